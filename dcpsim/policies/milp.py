"""``milp``: the exact optimum for small batches, with ``scipy.optimize.milp`` (HiGHS).

Used in tests and in the optimality-gap study of the heuristics. Objective:
the modelled iteration time (:mod:`dcpsim.policies.costs`) under the
*additive* cost table :class:`~dcpsim.policies.costs.SeqCosts` (a linear
objective needs additive costs; the returned plan is also scored with the
exact cost model by whoever evaluates it). Within that model the result is
optimal over all plans with at most ``max_steps`` steps, and
``meta["dual_bound_s"]`` is a proven lower bound on that optimum even when
the solver stops at its node limit.

The solver's budget is deterministic: ``node_limit`` branch-and-bound nodes
(default 2,000: about 45 CPU s for a 32-sequence batch on 8 ranks per stage on
a 2-core Xeon, where HiGHS needs tens of thousands of nodes to prove the
optimum), so one input gives one plan on any host. A wall-clock
``time_limit_s`` is off by default; where a user sets it and the solver
stops on it, the plan depends on how fast the host is, and ``meta["status"]``
says so.

``mode="dynamic"`` (default): every step partitions the stage's ranks into
aligned power-of-two slices of sizes ``min_cp .. max_dynamic_cp``.
Variables ``x[i,k,b]`` (sequence ``i`` in block ``b`` of step ``k``, only where
its padded share fits ``M``), ``y[k,b]`` (block used), step times ``S_k`` and
their maximum ``G``::

    min  Σ_k S_k + (pp-1)·G
    s.t. Σ_{k,b} x[i,k,b] = 1                      every sequence once
         x[i,k,b] ≤ y[k,b]
         Σ_{b ∋ r} y[k,b] ≤ 1                      a rank in one group per step
         Σ_i tok[i,b]·x[i,k,b] ≤ M·y[k,b]          token capacity per rank
         Σ_i t[i,b]·x[i,k,b] ≤ S_k ≤ G             step time = slowest group
         Σ_b c_b·(Σ_i t[i,b]·x[i,k,b]) ≤ R·S_k     (valid cut)
         the p-th sequence (longest first) in a step ≤ p   (symmetry breaking)

When every block of a size costs the same (all inside or all across the
NVLink domain), block positions do not matter: the rank constraint becomes
``Σ_b c_b·y[k,b] ≤ R`` (any multiset of power-of-two sizes with that total
is laid out aligned, largest first) and equal-size blocks are used in order.

``mode="static"``: group ``j`` of every step is DP replica ``j`` (ranks
``[j·cp, (j+1)·cp)``) and the objective is ``max_j (Σ_k T_jk + (pp-1)·max_k
T_jk)``, the static makespan model.

Sizes are limited (``max_sequences`` 64, ``max_ranks`` 16 per stage,
``max_variables`` 20000); larger inputs raise :class:`ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError
from dcpsim.policies.base import Policy
from dcpsim.policies.bound import lower_bound_s
from dcpsim.policies.costs import SeqCosts
from dcpsim.policies.fit import dynamic_fit, raise_too_long
from dcpsim.policies.plan import Group, Layout, Plan, Step

MODES = ("dynamic", "static")


class MilpPolicy(Policy):
    """``milp`` (see the module docstring).

    Options: ``mode`` (``dynamic`` | ``static``), ``max_steps`` (default: the
    capacity minimum + 3, at most the number of sequences), ``node_limit``
    (branch-and-bound nodes, default 2,000; None: no limit), ``time_limit_s``
    (wall-clock seconds, default None: none, see the module docstring),
    ``max_sequences`` (64), ``max_ranks`` (16), ``max_variables`` (20000).
    """

    name = "milp"
    dynamic = True

    def __init__(
        self,
        mode: str = "dynamic",
        max_steps: int | None = None,
        node_limit: int | None = 2000,
        time_limit_s: float | None = None,
        max_sequences: int = 64,
        max_ranks: int = 16,
        max_variables: int = 20000,
    ) -> None:
        if mode not in MODES:
            raise ConfigError("policy.options.mode", mode, f"one of {MODES}")
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ConfigError("policy.options.max_steps", max_steps, "a positive integer or None")
        if node_limit is not None and (not isinstance(node_limit, int) or isinstance(node_limit, bool)
                                       or node_limit < 1):
            raise ConfigError("policy.options.node_limit", node_limit,
                              "a positive integer (branch-and-bound nodes), or None for no limit")
        if time_limit_s is not None and (not isinstance(time_limit_s, (int, float)) or isinstance(time_limit_s, bool)
                                         or not 0 < time_limit_s < float("inf")):
            raise ConfigError("policy.options.time_limit_s", time_limit_s,
                              "a positive finite number of seconds, or None (the default: no wall-clock limit)")
        self.mode = mode
        self.max_steps = max_steps
        self.node_limit = node_limit
        self.time_limit_s = None if time_limit_s is None else float(time_limit_s)
        self.max_sequences = int(max_sequences)
        self.max_ranks = int(max_ranks)
        self.max_variables = int(max_variables)

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        n = lengths.size
        self._check_size(n, layout.ranks_per_stage)
        sizes, blocks = self._blocks(lengths, layout)
        if n == 0:
            meta = {"status": "optimal", "objective_s": 0.0, "dual_bound_s": 0.0, "additive_lower_bound_s": 0.0}
            return Plan(self.name, layout, lengths, [], self.mode == "dynamic", meta=meta)
        R, M = layout.ranks_per_stage, layout.max_tokens_per_rank
        sc = SeqCosts(lengths, layout, cost, sizes)
        tok_min = per_rank_tokens(lengths, int(sizes[-1])).sum()
        m0 = max(1, int(np.ceil(tok_min / (R * M))))
        K = self.max_steps if self.max_steps is not None else min(n, m0 + 3)
        B = len(blocks)
        sidx = np.array([sc.size_index[c] for _, c in blocks])
        span = np.array([int(bool(layout.spans_network(s, c))) for s, c in blocks])
        t = sc.time_s[sidx, span, :]  # (B, n)
        tok = sc.tokens[sidx, :]  # (B, n)
        feas = tok <= M  # (B, n)
        if self.mode == "dynamic":
            res, xi, meta = self._solve_dynamic(n, K, B, blocks, t, tok, feas, layout)
        else:
            res, xi, meta = self._solve_static(n, K, B, t, tok, feas, layout)
        if res.x is None and self._stopped(res) == "node limit (best found)":
            raise ConfigError("policy.options.node_limit", self.node_limit,
                              f"enough branch-and-bound nodes to find a plan with {K} steps (none found; raise it)")
        if res.x is None:
            raise ConfigError(
                "policy.options.max_steps", K, f"a step count with a feasible plan (solver: {res.message})"
            )
        steps = self._steps(res, xi, K, blocks, meta.get("formulation"))
        meta.update(
            {
                # the bound that also holds for the additive model the objective uses
                "additive_lower_bound_s": lower_bound_s(lengths, layout, cost, standalone=False),
                "mode": self.mode,
                "max_steps": K,
                "status": self._stopped(res),
                "nodes": int(getattr(res, "mip_node_count", 0) or 0),
                "node_limit": self.node_limit,
                "objective_s": float(res.fun),
                "dual_bound_s": float(getattr(res, "mip_dual_bound", res.fun) if res.status != 0 else res.fun),
                "mip_gap": float(getattr(res, "mip_gap", 0.0) or 0.0),
                "cost_model": "additive SeqCosts table (see dcpsim.policies.costs)",
            }
        )
        return Plan(self.name, layout, lengths, steps, self.mode == "dynamic", meta=meta)

    def _stopped(self, res) -> str:
        """Why the solver stopped: ``optimal``, its node limit (deterministic) or its wall-clock limit."""
        if res.status == 0:
            return "optimal"
        if res.status == 1:
            return "time limit (best found; depends on the host's speed)"
        if self.node_limit is not None and int(getattr(res, "mip_node_count", 0) or 0) >= self.node_limit:
            return "node limit (best found)"
        return f"stopped (best found): {res.message}"

    def _check_size(self, n: int, R: int) -> None:
        if n > self.max_sequences:
            raise ConfigError("workload.gbs", f"{n} sequences", f"at most {self.max_sequences} for the milp policy "
                              "(policy.options.max_sequences)")
        if R > self.max_ranks:
            raise ConfigError("cluster.gpus", f"{R} ranks per stage (dp*cp)", f"at most {self.max_ranks} for the milp "
                              "policy (policy.options.max_ranks)")

    def _blocks(self, lengths: np.ndarray, layout: Layout) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """(CP sizes, blocks (start, size)): every aligned slice (dynamic) or the DP replicas (static)."""
        R, M = layout.ranks_per_stage, layout.max_tokens_per_rank
        if self.mode == "dynamic":
            sizes, _ = dynamic_fit(lengths, layout)
            return sizes, [(int(s), int(c)) for c in sizes.tolist() for s in range(0, R - c + 1, c)]
        bad = per_rank_tokens(lengths, layout.cp) > M
        if bad.any():
            raise_too_long(lengths, bad, layout.cp, M, "static")
        return np.asarray([layout.cp]), [(j * layout.cp, layout.cp) for j in range(layout.dp)]

    def _steps(self, res, xi: np.ndarray, K: int, blocks: list[tuple[int, int]], formulation: str | None) -> list[Step]:
        """The plan's steps from the solution's x variables (empty steps left out)."""
        B = len(blocks)
        x = np.round(res.x[: xi.shape[0]]).astype(bool)
        groups: dict[tuple[int, int], list[int]] = {}
        for (i, k, b), on in zip(xi.tolist(), x.tolist(), strict=True):
            if on:
                groups.setdefault((k, b), []).append(i)
        steps = []
        for k in range(K):
            if self.mode == "dynamic":
                gs = [Group(blocks[b][0], blocks[b][1], sorted(groups[(k, b)])) for b in range(B) if (k, b) in groups]
                if formulation == "slots":  # lay the groups out largest first from rank 0
                    pos = 0
                    for g in sorted(gs, key=lambda g: -g.size):
                        g.start, pos = pos, pos + g.size
            else:
                if not any((k, b) in groups for b in range(B)):
                    continue
                gs = [Group(blocks[b][0], blocks[b][1], sorted(groups.get((k, b), []))) for b in range(B)]
            if gs:
                steps.append(Step(sorted(gs, key=lambda g: g.start)))
        return steps

    # ------------------------------------------------------------- dynamic
    def _solve_dynamic(self, n, K, B, blocks, t, tok, feas, layout: Layout):
        """Block formulation, or the slot formulation when a group's position does not change its cost."""
        pp = layout.pp
        sizes_b = np.array([c for _, c in blocks])
        # slots: positions do not matter when every block of a size has the same cost (all inside or all
        # across the NVLink domain); then a step is any multiset of sizes with total <= R (largest first
        # from rank 0 is aligned), and slots of one size are interchangeable (ordered by time below)
        same = all(
            np.allclose(t[sizes_b == c], t[sizes_b == c][0]) for c in np.unique(sizes_b)
        )
        pairs = np.argwhere(feas.T)  # (i, b)
        xi = np.array([(i, k, b) for k in range(K) for i, b in pairs.tolist()], dtype=np.int64).reshape(-1, 3)
        nx, ny = xi.shape[0], K * B
        nvar = nx + ny + K + 1
        if nvar > self.max_variables:
            raise ConfigError("milp problem", f"{nvar} variables", f"at most {self.max_variables} (fewer sequences or steps)")
        ix = _DynamicIndex(xi, n, K, B)
        rows = _Rows()
        self._sequence_rows(rows, ix, t, feas)
        for v in range(nx):  # x <= y
            rows.add([v, nx + int(ix.xk[v])], [1.0, -1.0], -np.inf, 0.0)
        problem = _StepProblem(blocks, sizes_b, t, tok, layout, same)
        for k in range(K):
            self._step_rows(rows, ix, k, problem)
        sid, gid = nx + ny, nx + ny + K
        cobj = np.zeros(nvar)
        cobj[sid : sid + K] = 1.0
        cobj[gid] = pp - 1
        integrality = np.zeros(nvar)
        integrality[: nx + ny] = 1
        ub = np.full(nvar, np.inf)
        ub[: nx + ny] = 1.0
        lb = np.zeros(nvar)
        # the slowest step is at least the longest sequence's fastest time
        lb[gid] = float(np.where(feas, t, np.inf).min(axis=0).max())
        res = rows.solve(cobj, integrality, lb, ub, (self.node_limit, self.time_limit_s))
        return res, xi, {"variables": nvar, "constraints": rows.r, "formulation": "slots" if same else "blocks"}

    @staticmethod
    def _sequence_rows(rows: _Rows, ix: _DynamicIndex, t: np.ndarray, feas: np.ndarray) -> None:
        """Every sequence once; steps numbered by their first sequence in a fixed order (symmetry breaking)."""
        n, xi = ix.n, ix.xi
        for i in range(n):
            rows.add(ix.by_i[i], [1.0] * len(ix.by_i[i]), 1.0, 1.0)
        # steps are interchangeable: number them by their first sequence in a fixed order, so the
        # sequence at position p of that order sits in a step <= p
        rank_of = np.empty(n, dtype=np.int64)
        rank_of[np.lexsort((np.arange(n), -np.where(feas, t, 0).max(axis=0)))] = np.arange(n)
        for i in range(n):
            late = [v for v in ix.by_i[i] if xi[v, 1] > rank_of[i]]
            if late:
                rows.add(late, [1.0] * len(late), 0.0, 0.0)

    @staticmethod
    def _step_rows(rows: _Rows, ix: _DynamicIndex, k: int, p: _StepProblem) -> None:
        """Rows of step ``k``: rank budget, token cap and time of each group, valid cuts, makespan terms."""
        blocks, sizes_b, t, tok, layout, same = p.blocks, p.sizes_b, p.t, p.tok, p.layout, p.same
        R, M = layout.ranks_per_stage, layout.max_tokens_per_rank
        B, K, nx, xi = len(blocks), ix.K, ix.nx, ix.xi
        sid, gid = nx + K * B, nx + K * B + K
        if same:  # total ranks of the step's groups
            rows.add([nx + k * B + b for b in range(B)], sizes_b.tolist(), -np.inf, float(R))
        else:
            for rank in range(R):  # one group per rank
                cs = [nx + k * B + b for b, (s0, c) in enumerate(blocks) if s0 <= rank < s0 + c]
                rows.add(cs, [1.0] * len(cs), -np.inf, 1.0)
        work_cols, work_vals = [], []
        for b in range(B):
            sel = ix.by_kb[k * B + b]
            ii = xi[sel, 0]
            rows.add(sel + [nx + k * B + b], tok[b, ii].tolist() + [-float(M)], -np.inf, 0.0)
            rows.add(sel + [sid + k], t[b, ii].tolist() + [-1.0], -np.inf, 0.0)
            work_cols += sel
            work_vals += (sizes_b[b] * t[b, ii]).tolist()
        # valid cuts: a step lasts at least its GPU-seconds / R, and at least each of its sequences
        rows.add(work_cols + [sid + k], work_vals + [-float(R)], -np.inf, 0.0)
        for i in range(ix.n):
            sel = ix.by_ik[i * K + k]
            if sel:
                rows.add(sel + [sid + k], t[xi[sel, 2], i].tolist() + [-1.0], -np.inf, 0.0)
        rows.add([sid + k, gid], [1.0, -1.0], -np.inf, 0.0)
        if same:  # interchangeable slots of one size: used ones first
            for b in range(1, B):
                if sizes_b[b] == sizes_b[b - 1]:
                    rows.add([nx + k * B + b, nx + k * B + b - 1], [1.0, -1.0], -np.inf, 0.0)

    # -------------------------------------------------------------- static
    def _solve_static(self, n, K, B, t, tok, feas, layout: Layout):
        M, pp = layout.max_tokens_per_rank, layout.pp
        # x[i,k,j]; T[k,j] step time of replica j; X[j] its max; Z overall
        xi = np.array([(i, k, j) for k in range(K) for i in range(n) for j in range(B)], dtype=np.int64).reshape(-1, 3)
        nx = xi.shape[0]
        tid = lambda k, j: nx + k * B + j  # noqa: E731
        mid = nx + K * B
        zid = mid + B
        nvar = zid + 1
        if nvar > self.max_variables:
            raise ConfigError("milp problem", f"{nvar} variables", f"at most {self.max_variables} (fewer sequences or steps)")
        rows = _Rows()
        add = rows.add
        for i in range(n):
            sel = np.nonzero(xi[:, 0] == i)[0]
            add(sel.tolist(), [1.0] * sel.size, 1.0, 1.0)
        xk = xi[:, 1] * B + xi[:, 2]
        for k in range(K):
            for j in range(B):
                sel = np.nonzero(xk == k * B + j)[0]
                ii = xi[sel, 0]
                add(sel.tolist(), tok[j, ii].astype(float).tolist(), -np.inf, float(M))
                add(sel.tolist() + [tid(k, j)], t[j, ii].tolist() + [-1.0], -np.inf, 0.0)
                add([tid(k, j), mid + j], [1.0, -1.0], -np.inf, 0.0)
                if k:
                    add([tid(k, j), tid(k - 1, j)], [1.0, -1.0], -np.inf, 0.0)
        for j in range(B):
            add([tid(k, j) for k in range(K)] + [mid + j, zid], [1.0] * K + [float(pp - 1), -1.0], -np.inf, 0.0)
        cobj = np.zeros(nvar)
        cobj[zid] = 1.0
        integrality = np.zeros(nvar)
        integrality[:nx] = 1
        ub = np.full(nvar, np.inf)
        ub[:nx] = 1.0
        res = rows.solve(cobj, integrality, np.zeros(nvar), ub, (self.node_limit, self.time_limit_s))
        return res, xi, {"variables": nvar, "constraints": rows.r}


class _Rows:
    """Sparse constraint rows ``lo <= A·x <= hi``, added one at a time, and the HiGHS solve over them."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.r = 0

    def add(self, cs, vs, lb: float, ub: float) -> None:
        self.rows.extend([self.r] * len(cs))
        self.cols.extend(int(x) for x in cs)
        self.vals.extend(float(v) for v in vs)
        self.lo.append(lb)
        self.hi.append(ub)
        self.r += 1

    def solve(self, cobj: np.ndarray, integrality: np.ndarray, lb: np.ndarray, ub: np.ndarray,
              limits: tuple[int | None, float | None]):
        """HiGHS on these rows; ``limits`` = (branch-and-bound nodes, wall-clock seconds), None for none."""
        A = sparse.csr_array((self.vals, (self.rows, self.cols)), shape=(self.r, cobj.size))
        options = {"mip_rel_gap": 1e-6, "disp": False}
        if limits[0] is not None:
            options["node_limit"] = limits[0]
        if limits[1] is not None:
            options["time_limit"] = limits[1]
        return milp(
            cobj,
            constraints=LinearConstraint(A, self.lo, self.hi),
            integrality=integrality,
            bounds=Bounds(lb, ub),
            options=options,
        )


@dataclass(frozen=True)
class _StepProblem:
    """What every step's rows of the dynamic formulation share: the rank blocks ``(start, size)``, their sizes, the
    time ``t[b, i]`` (seconds) and per-rank tokens ``tok[b, i]`` of sequence ``i`` in block ``b``, the layout, and
    whether blocks of one size cost the same (the slot formulation)."""

    blocks: list[tuple[int, int]]
    sizes_b: np.ndarray
    t: np.ndarray
    tok: np.ndarray
    layout: Layout
    same: bool


class _DynamicIndex:
    """Where the x variables (sequence i, step k, block b) of the dynamic formulation sit, by (k, b), i and (i, k)."""

    def __init__(self, xi: np.ndarray, n: int, K: int, B: int) -> None:
        self.xi, self.n, self.K, self.nx = xi, n, K, xi.shape[0]
        self.xk = xi[:, 1] * B + xi[:, 2]  # (k, b) of each x
        self.by_kb: list[list[int]] = [[] for _ in range(K * B)]
        for v, kb in enumerate(self.xk.tolist()):
            self.by_kb[kb].append(v)
        self.by_i: list[list[int]] = [[] for _ in range(n)]
        self.by_ik: list[list[int]] = [[] for _ in range(n * K)]
        for v, (i, k, _) in enumerate(xi.tolist()):
            self.by_i[i].append(v)
            self.by_ik[i * K + k].append(v)
