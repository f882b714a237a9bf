"""The one worker-death policy the three drivers share (dcpsim.run.pool: sweeps, plan, reproduce)."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

from dcpsim.run.pool import WORKER_ATTEMPTS, is_worker_death, restart_broken, retry_alone


def test_lost_tasks_are_retried_each_alone_then_given_up():
    exc = BrokenProcessPool("worker died")
    resubmitted, given_up = [], []
    retry_alone(["a", "b"], 1, exc, resubmit=lambda t, n: resubmitted.append((t, n)),
                give_up=lambda ts, e: given_up.append((list(ts), e)))
    assert resubmitted == [("a", 2), ("b", 2)] and not given_up
    retry_alone(["a"], WORKER_ATTEMPTS, exc, resubmit=lambda t, n: resubmitted.append((t, n)),
                give_up=lambda ts, e: given_up.append((list(ts), e)))
    assert given_up == [(["a"], exc)] and len(resubmitted) == 2


def test_worker_death_and_restart_of_the_current_pool_only():
    class KilledWorker(Exception):  # dask.distributed's name
        pass

    assert is_worker_death(BrokenProcessPool()) and is_worker_death(KilledWorker())
    assert not is_worker_death(ValueError())

    class Ex:
        generation = 3
        restarts = 0

        def restart(self):
            self.restarts += 1
            self.generation += 1

    ex = Ex()
    restart_broken(ex, 3)
    restart_broken(ex, 3)  # a second task of the dead pool: already replaced
    assert ex.restarts == 1 and ex.generation == 4


def test_processes_started_for_the_pool_ignore_sigint_from_the_start():
    """A Ctrl-C to the process group while the fork server imported its preload modules (a sweep stopped in its
    first second) printed the fork server's KeyboardInterrupt traceback: it ignored SIGINT only after them. It is
    now started with SIGINT ignored (inherited across exec), and this process keeps its own handler and mask."""
    import signal
    import subprocess
    import sys

    from dcpsim.run.pool import _sigint_ignored_by_children

    before = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with _sigint_ignored_by_children():
        child = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is "
                                "signal.SIG_IGN)"], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "True"
    assert (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, set())) == before
