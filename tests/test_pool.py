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
