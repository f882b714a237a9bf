"""Nothing waits without a bound: wrong Dask addresses, schedulers without workers, tiny plans, Ctrl-C.

Every wait here is bounded and uses only loopback (127.0.0.1); the bounds are
generous (many times what the code needs) so that no assertion depends on the
host's speed: a run that would hang is what they catch.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from test_sweep import SMALL_BASE

from dcpsim.cli import main
from dcpsim.errors import ConfigError
from dcpsim.planning.inputs import make_data_spec
from tests.test_files import _one_line_error  # one definition of the one-line error check

REPO = Path(__file__).resolve().parents[1]


def _spec(tmp_path: Path, axes: str) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(SMALL_BASE + '\n[sweep]\nname = "hang"\n' + axes)
    return p


class _SilentListener:
    """A TCP listener on 127.0.0.1 that accepts connections and never says anything (not a Dask scheduler)."""

    def __init__(self, close_at_once: bool = False) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.close_at_once = close_at_once
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            if self.close_at_once:
                conn.close()
            else:
                self._conns.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for c in self._conns:
            c.close()
        self.sock.close()


@pytest.mark.parametrize("close_at_once", [False, True], ids=["silent", "hangs-up"])
def test_dask_address_of_a_listener_that_is_not_dask_fails_in_seconds(tmp_path, capsys, monkeypatch, close_at_once):
    pytest.importorskip("distributed")
    monkeypatch.setattr("dcpsim.run.executors.DASK_CONNECT_TIMEOUT_S", 1)
    listener = _SilentListener(close_at_once)
    try:
        spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing"]\n')
        box: dict = {}
        t = threading.Thread(target=lambda: box.setdefault("rc", main(
            ["sweep", str(spec), "--out", str(tmp_path / "o"), "--dask-address", f"tcp://127.0.0.1:{listener.port}"])),
            daemon=True)
        t.start()
        t.join(timeout=60)  # the bound is 1 s; 60 only says "it did not hang"
        assert not t.is_alive(), "dcpsim sweep hung on a listener that is not a Dask scheduler"
    finally:
        listener.close()
    _one_line_error(capsys, box["rc"], "--dask-address", "Dask")
    assert not (tmp_path / "o" / "results").exists()


def test_dask_scheduler_without_workers_times_out_with_a_message(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                                       dashboard_address=None)
    try:
        spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing"]\n')
        rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dask-address", cluster.scheduler_address,
                   "--dask-wait", "0.5"])
    finally:
        cluster.close()
    _one_line_error(capsys, rc, "--dask-address", "worker", "--dask-wait")


def test_dask_wait_needs_dask_address(tmp_path, capsys):
    spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing"]\n')
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dask-wait", "3"])
    _one_line_error(capsys, rc, "--dask-wait", "--dask-address")


# ---------------------------------------------------------------- Ctrl-C
_DRIVER = textwrap.dedent('''
    import sys, time
    from pathlib import Path

    from dcpsim.run.sweep import SweepInterrupted, SweepOptions, run_sweep

    MARK = Path(sys.argv[3])

    def runner(cfg):
        """Seed 0 returns at once; any other seed marks that it started, then sleeps far longer than any bound."""
        if cfg.sim.seed:
            MARK.write_text("started")
            time.sleep(600)
        return {"tflops_per_gpu": 1.0, "iteration_time_s": 1.0}

    if __name__ == "__main__":
        try:
            run_sweep(sys.argv[1], sys.argv[2], SweepOptions(jobs=int(sys.argv[4]), batch_size=1, progress=False, figures=False,
                      runner="slowrunner:runner"))
        except SweepInterrupted as exc:
            print(exc, file=sys.stderr)
            sys.exit(130)
''')


@pytest.mark.parametrize("jobs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_ctrl_c_stops_a_sweep_at_once_and_keeps_finished_rows(tmp_path, jobs):
    """A run that would take 600 s is abandoned after Ctrl-C; the finished run's row stays; resume reruns the rest."""
    from dcpsim.run.sweep import load_results

    (tmp_path / "slowrunner.py").write_text(_DRIVER)
    spec = _spec(tmp_path, "[axes]\nsim.seed = [0, 1, 2]\n")
    out, mark = tmp_path / "o", tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "slowrunner.py"), str(spec), str(out), str(mark),
                             str(jobs)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        t_end = time.monotonic() + 120
        while not (mark.exists() and list((out / "results").glob("*.parquet"))):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < t_end, "the sweep did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # the slow run sleeps 600 s: finishing within 60 means abandoned
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "resume" in err
    df = load_results(out)
    assert list(df["sim.seed"]) == [0] and list(df["status"]) == ["ok"]


# ---------------------------------------------------------------- sizes refused up front
def test_plan_with_a_tiny_window_is_refused_at_once(capsys):
    rc = main(["plan", "--seq-len", "3", "--no-progress"])
    _one_line_error(capsys, rc, "--seq-len", "at least 5 tokens", "1,000,000")


def test_huge_global_batch_is_refused_with_its_bound(capsys):
    """``--set workload.gbs=100000000`` ended in MemoryError after 26 s; now one line naming the bound."""
    rc = main(["simulate", str(REPO / "examples" / "simulate_default.toml"), "--set", "workload.gbs=100000000"])
    _one_line_error(capsys, rc, "workload.gbs", "1000000")
    with pytest.raises(ConfigError, match="--gbs-tokens"):
        make_data_spec(workload="github", gbs_tokens=10**12)


def test_a_batch_smaller_than_one_sequence_is_refused():
    with pytest.raises(ConfigError, match="--gbs-tokens.*at least one sequence"):
        make_data_spec(seq_len=4096, gbs_tokens=3)


def test_a_reachable_but_vanishing_length_range_is_refused_not_drawn_for_an_hour(capsys):
    """``dcpsim workload show github --min-len 5000000``: about 5 in a million GitHub lengths reach 5M tokens, above
    the 1e-6 give-up rate, so drop-clipping drew 1.8M candidates a round for ~4e10 draws (about an hour). Now the
    draws it would need are judged once 10M have measured the rate: one line naming min_len/max_len."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("rc", main(["workload", "show", "github", "--min-len",
                                                                   "5000000"])), daemon=True)
    t.start()
    t.join(timeout=60)  # it takes about a second; 60 only says "it did not hang"
    assert not t.is_alive(), "dcpsim workload show drew for minutes on a nearly empty length range"
    _one_line_error(capsys, box["rc"], "min_len/max_len", "5,000,000")
