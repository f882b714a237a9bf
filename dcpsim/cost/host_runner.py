"""The host/device rule of :func:`dcpsim.cost.host.issue` for the ops of one plan, one op's groups at a time.

:func:`dcpsim.pipeline.group_times` evaluates the schedule op by op; for each op it calls the function that
:func:`runner` returns with the op's cell ``(virtual stage s, direction d, groups a:z)``, the groups' host clocks
and device-ready times. It runs the same float64 operations as :func:`~dcpsim.cost.host.issue` on the same values,
less the ones that give their input back: the max of ``ready`` with itself (the evaluators pass the ready time
as the device's free time), and a ``where`` whose condition is the same for every op of a (stage, direction) (else
it is a ``copyto`` in place, the same values); a sum ``y + x`` is computed as ``x += y`` in a reused array
(floating-point addition is commutative), and ``max(k, 1)`` is left out when every kernel count is at least 1. So
its results are :func:`issue`'s bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def runner(ops, fwd_s: np.ndarray, bwd_s: np.ndarray) -> Callable:
    """For :class:`~dcpsim.cost.host.HostOps` ``ops`` of device times ``fwd_s``/``bwd_s`` (``(V, G)`` per direction,
    seconds): ``run(s, d, a, z, host_free, ready, out=(None, None, None)) -> (device start, device end, host free
    after, issue start)`` of ops ``(s, d, a:z)`` (``out``: arrays to hold the device start, the host free after and
    the issue start; fewer than three: the rest None)."""
    dur, sync_s, floor = (fwd_s, bwd_s), ops.sync_s, not bool((ops.kernels >= 1.0).all())  # else max(k, 1) is k
    sb, sa = ((x.any(axis=2).astype(int) + x.all(axis=2)).tolist()  # per (row, d): 0 no op syncs, 1 some, 2 all
              for x in (ops.sync_before, ops.sync_after))
    rows = range(fwd_s.shape[0]) if ops.stage_row is None else ops.stage_row  # stage s's ops in row rows[s]

    def run(s: int, d: int, a: int, z: int, host_free, ready, out=(None, None, None)):
        r = rows[s]
        H, h, k, dev = host_free, ops.host_s[r, d, a:z], ops.kernels[r, d, a:z], dur[d][s, a:z]
        out = (*out, None, None, None)[:3]
        k = np.maximum(k, 1.0) if floor else k
        if sb[r][d]:
            H = np.maximum(host_free, ready, out=out[2])
            H += sync_s  # max(host free, ready) + sync
            if sb[r][d] == 1:  # where(sync_before, H, host_free), in place
                np.copyto(H, host_free, where=~ops.sync_before[r, d, a:z])
        elif out[2] is not None:
            H = out[2]
            H[...] = host_free
        t = h / k
        t += H  # H + h / k
        start = np.maximum(ready, t, out=out[0])
        busy = np.add(H, h, out=None if sa[r][d] else out[1])
        end = start + dev
        t = np.divide(dev, k, out=t)
        t += busy  # busy + dev / k
        np.maximum(end, t, out=end)
        if sa[r][d]:
            after = np.maximum(busy, end) + sync_s
            busy = after if sa[r][d] == 2 else np.where(ops.sync_after[r, d, a:z], after, busy)
            if out[1] is not None:
                out[1][...] = busy
                busy = out[1]
        return start, end, busy, H

    return run
