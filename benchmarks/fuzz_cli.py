"""Bad inputs over every ``dcpsim`` command: does each end in a clean one-line error, a traceback or a hang?

    python benchmarks/fuzz_cli.py [--timeout 60] [--only simulate] [--json out.json] [-v]

Each case runs ``dcpsim.cli.main(argv)`` in a forked child (dcpsim is imported
once, before the forks, so a case costs only its own work) inside a scratch
folder, with a wall-clock bound. Outcomes:

* ``clean``     exit 2, stderr one line starting ``dcpsim: error:``, no traceback;
* ``accepted``  exit 0 (the input was valid after all, or dcpsim chose a documented default);
* ``traceback`` a Python traceback (or any other exit code with more than one stderr line);
* ``hang``      still running at ``--timeout`` seconds (killed).

This is not a default test (it takes minutes); the counts go into the issue
notes. Every input is built here from templates: numbers out of range,
wrong types, missing/odd files (empty, binary, a folder, 300-character
names, byte-order marks), unknown names, clashing outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LONG = "n" * 300
BAD_NUMBERS = ["-1", "0", "nan", "inf", "1e309", "abc", "2.5", "", "99999999999999999999999"]


def _files(d: Path) -> dict[str, str]:
    """Odd input files in the scratch folder: name -> path."""
    f = {
        "empty": d / "empty.toml",
        "binary": d / "binary.toml",
        "bom": d / "bom.toml",
        "badtoml": d / "bad.toml",
        "typo": d / "typo.toml",
        "folder": d / "afolder",
        "lengths_empty": d / "empty.csv",
        "lengths_text": d / "words.csv",
        "lengths_neg": d / "neg.txt",
        "lengths_short": d / "short.txt",
        "lengths_bom": d / "bom.csv",
        "spec_noaxes": d / "noaxes.toml",
        "spec_badaxis": d / "badaxis.toml",
        "user_file": d / "mine.json",
    }
    f["empty"].write_text("")
    f["binary"].write_bytes(bytes(range(256)))
    f["bom"].write_bytes(b"\xef\xbb\xbf[workload]\ngbs = 64\n[cluster]\ngpus = 16\n")
    f["badtoml"].write_text("[model\nname = ")
    f["typo"].write_text("[modle]\nname = 'llama-13b'\n")
    f["folder"].mkdir(exist_ok=True)
    f["lengths_empty"].write_text("")
    f["lengths_text"].write_text("length\nabc\ndef\n")
    f["lengths_neg"].write_text("-5\n10\n")
    f["lengths_short"].write_text("100\n200\n")
    f["lengths_bom"].write_bytes(b"\xef\xbb\xbflength\n1000\n2000\n")
    f["spec_noaxes"].write_text("[sweep]\nname='x'\n")
    f["spec_badaxis"].write_text("[sweep]\nname='x'\n[[axes]]\nnosuch.field = [1, 2]\n")
    f["user_file"].write_text('{"mine": true}\n')
    return {k: str(v) for k, v in f.items()}


def cases(d: Path) -> list[list[str]]:
    f = _files(d)
    ex = "example:default"
    small = ["--set", "workload.gbs=16", "--set", "cluster.gpus=16"]
    out: list[list[str]] = []
    # numbers out of range through typed flags and --set
    for v in BAD_NUMBERS:
        out += [["simulate", ex, "--seed", v], ["simulate", ex, "--iterations", v], ["workload", "show", "github",
                "--samples", v], ["plan", "--seq-len", v], ["plan", "--gbs-tokens", v], ["plan", "--tokens", v],
                ["sweep", "example:example_sweep", "--out", str(d / "sw"), "-j", v], ["cost", "--seq-len", v],
                ["schedule", "--gbs", v], ["simulate", ex, "--set", f"workload.gbs={v}"],
                ["simulate", ex, "--set", f"hardware.network_scale={v}"]]
    for kv in ["workload.gbs=100000000", "cluster.gpus=3", "parallel.cp=0", "parallel.vp=3", "sim.noise_cv=-1",
               "workload.min_len=999999999", "workload.max_len=1", "policy.name=nosuch", "model.name=nosuch",
               "hardware.gpu=nosuch", "hardware.gpu=" + f["folder"], "workload.name=" + f["lengths_empty"],
               "workload.name=" + f["lengths_text"], "workload.name=" + f["lengths_neg"],
               "workload.name=" + f["lengths_short"], "nosuch.field=1", "workload=3", "=", "workload.gbs",
               "hardware.network_scale=1e-300", "sim.iterations=0"]:
        out.append(["simulate", ex, "--set", kv])
    # odd files where a config / spec / lengths file is read
    for key in ("empty", "binary", "badtoml", "typo", "folder"):
        out += [["simulate", f[key]], ["sweep", f[key], "--out", str(d / f"s-{key}")], ["export", "--config", f[key],
                "--out", str(d / f"e-{key}")]]
    for key in ("lengths_empty", "lengths_text", "lengths_neg", "folder"):
        out.append(["workload", "show", f[key]])
    out += [["simulate", str(d / "missing.toml")], ["simulate", str(d / (LONG + ".toml"))], ["simulate", "example:nosuch"],
            ["sweep", f["spec_noaxes"], "--out", str(d / "na")], ["sweep", f["spec_badaxis"], "--out", str(d / "ba")],
            ["workload", "show", "nosuch"], ["workload", "show", str(d / (LONG + ".csv"))],
            ["profiles", "show", "nosuch"], ["profiles", "show"], ["profiles", "show", f["folder"]],
            ["calibrate", "--gpu", "b200"], ["calibrate", "--gpu", "nosuch"], ["calibrate", "--gpu", "h100-sxm",
            "--params", "nosuch"], ["validate", "--published", "--rows", "0"], ["validate", "--published", "--rows",
            "abc"], ["validate", "--published", "--suite", f["folder"]], ["validate", "--subset", "nosuch"],
            ["reproduce", "--out", f["user_file"]], ["plot", str(d / "missing")], ["plot", f["folder"], "--x", "gpus"],
            ["plot", f["folder"]], ["schedule", "--policy", "nosuch"], ["cost", "--model", "nosuch"],
            ["export", "--config", ex, "--out", f["user_file"]], ["export", "--config", ex, "--gpus-per-node", "3",
            "--out", str(d / "gpn")],
            ["plan", "--gpus", "nosuch:1"], ["plan", "--gpus", "h100-sxm"], ["plan", "--gpus", "h100-sxm:-1"],
            ["plan", "--sizes", "0"], ["plan", "--sizes", "abc"], ["plan", "--policies", "nosuch"],
            ["plan", "--precision", "fp4"], ["plan", "--documents", "nosuch"], ["plan", "--deadline", "soon"],
            ["plan", "--data", "nosuch"], ["plan", "--seq-len", "3"], ["plan", "--workload", f["lengths_short"]],
            ["plan", "--plot", str(d / "p.jpg")], ["plan", "--plot", str(d / "x.png"), "--csv", str(d / "x.png")],
            ["sweep", "example:example_sweep", "--out", str(d / "dk"), "--dask-address", "tcp://127.0.0.1:9"],
            ["sweep", "example:example_sweep", "--out", str(d / "dk"), "--dask-address", "nonsense"],
            ["sweep", "example:example_sweep", "--out", str(d / "dk"), "--dask-wait", "1"],
            ["simulate", ex, "--out", str(d / LONG)], ["simulate", ex, "--trace", str(d / (LONG + ".json"))],
            ["simulate", ex, "--out", str(d / "o"), "--trace", str(d / "o" / "summary.json")],
            ["simulate", ex, "--out", f["user_file"]], ["simulate", ex, "--trace", f["user_file"]],
            ["simulate", ex, "--trace", f["folder"]], ["simulate", ex, "--out", ""], ["simulate", ex, "--out",
            "/proc/nope"], ["simulate", ex, "--policy", "nosuch"], ["simulate", ex, "--network", "nosuch"],
            ["simulate", ex, "--megatron-args", str(d / "missing.txt")], ["simulate", f["bom"], *small],
            ["workload", "show", f["lengths_bom"]], ["demo", "--iterations", "0"], ["demo", "--trace", f["folder"]],
            ["examples", "--out", f["user_file"]], ["nosuch-command"], ["simulate"], ["sweep", ex]]
    # a plan is a search of minutes at its defaults: fuzz it on one size, one policy, one seed
    quick_plan = ["--sizes", "512", "--policies", "packing", "--seeds", "1", "--simulate", "1"]
    return [c + quick_plan if c[0] == "plan" and "--sizes" not in c and "--policies" not in c else c for c in out]


def _child(argv: list[str], cwd: Path, err_w: int) -> None:
    """In the forked child: run the command with stderr into the pipe; exit with its status (99: traceback)."""
    from dcpsim.cli import main

    try:
        os.chdir(cwd)
        os.dup2(err_w, 2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
        except BaseException:  # noqa: BLE001 - what the fuzz looks for
            import traceback

            traceback.print_exc()
            rc = 99
        sys.stderr.flush()
        os._exit(int(rc or 0))
    finally:
        os._exit(98)


def _drain(fd: int, chunks: list[bytes], wait_s: float) -> bool:
    """Read what ``fd`` has within ``wait_s``; whether anything was read."""
    import select

    ready, _, _ = select.select([fd], [], [], wait_s)
    if not ready:
        return False
    data = os.read(fd, 65536)
    if data:
        chunks.append(data)
    return bool(data)


def _classify(status: int | None, err: str) -> tuple[str, int | None]:
    if status is None:
        return "hang", None
    rc = os.waitstatus_to_exitcode(status)
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("dcpsim: warning:")]
    if "Traceback" in err or rc == 99:
        return "traceback", rc
    if rc == 0:
        return "accepted", rc
    one_line = len(lines) == 1 and lines[0].startswith("dcpsim: error:")
    usage = len(lines) == 2 and lines[0].startswith("usage:") and "error:" in lines[1]  # argparse
    return ("clean" if rc == 2 and (one_line or usage) else "other"), rc


def _run_one(argv: list[str], cwd: Path, timeout: float) -> dict:
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(argv, cwd, err_w)
    os.close(err_w)
    t0 = time.monotonic()
    chunks: list[bytes] = []
    status = None
    while status is None and time.monotonic() - t0 <= timeout:
        _drain(err_r, chunks, 0.2)
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    while _drain(err_r, chunks, 0):
        pass
    os.close(err_r)
    err = b"".join(chunks).decode(errors="replace")
    kind, rc = _classify(status, err)
    return {"argv": argv, "kind": kind, "rc": rc, "wall_s": round(time.monotonic() - t0, 2), "stderr": err[-600:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    ap.add_argument("--only", default=None, help="only cases of this command")
    ap.add_argument("--json", default=None, help="write every case's outcome to this file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every non-clean case")
    a = ap.parse_args()
    from _results import check_result_path, save_result

    check_result_path(a.json)
    import dcpsim.cli  # noqa: F401 - imported once, before the forks
    import dcpsim.run.single  # noqa: F401
    import dcpsim.run.sweep  # noqa: F401

    os.environ.setdefault("DCPSIM_STATE_DIR", tempfile.mkdtemp(prefix="dcpsim-fuzz-state-"))
    with tempfile.TemporaryDirectory(prefix="dcpsim-fuzz-") as tmp:
        d = Path(tmp)
        todo = [c for c in cases(d) if a.only is None or c[0] == a.only]
        results = []
        for i, argv in enumerate(todo):
            r = _run_one(argv, d, a.timeout)
            results.append(r)
            if a.verbose and r["kind"] not in ("clean", "accepted"):
                shown = [x[:60] for x in argv]
                print(f"[{i + 1}/{len(todo)}] {r['kind']}: {shown}\n    {r['stderr'].strip()[-400:]}", flush=True)
    counts: dict[str, int] = {}
    for r in results:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    print(json.dumps({"cases": len(results), "counts": counts}))
    save_result(a.json, {"cases": len(results), "counts": counts, "results": results})
    return 0 if not counts.get("traceback") and not counts.get("hang") else 1


if __name__ == "__main__":
    sys.exit(main())
