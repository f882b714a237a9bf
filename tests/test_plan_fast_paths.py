"""The planner's fast paths give what the slow ones give (issue 24): light candidate configurations, the
bounded screen, the vectorised sync tail, the per-stage sync memo and the cached memory terms."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.errors import ConfigError
from dcpsim.planning import SearchSpace, make_data_spec, search_layouts
from dcpsim.run.config import RunConfig


def _base() -> RunConfig:
    return RunConfig().with_updates({"model.name": "llama2-7b", "hardware.gpu": "a100-sxm-80gb"})


def _outcome(fn):
    try:
        cfg = fn()
    except ConfigError as exc:
        return "error", str(exc)
    return "ok", cfg


@pytest.mark.parametrize("policy", ["packing", "dynamic"])
def test_light_config_is_with_updates(policy):
    """Every candidate of a search: light_config gives an equal configuration (same hash) where with_updates
    does, and the same one-line error where it refuses."""
    from dcpsim.planning.search import search_updates
    from dcpsim.planning.space import batch_check, enumerate_candidates, light_config

    data = make_data_spec(seq_len=4096, gbs=64)
    base = _base()
    common = search_updates(data, policy, 64)
    space = SearchSpace(tp=[1, 2, 2048], pp=[1, 2, 4], mbs=[1, 2, 8192], precision=["bf16", "fp8", "fp4"])
    n = {"ok": 0, "error": 0}
    for cand in enumerate_candidates(base, 64, data, space, policy == "dynamic"):
        if batch_check(cand, 64, data, 64):
            continue
        upd = {**common, **cand.updates(64)}
        slow = _outcome(lambda upd=upd: base.with_updates(upd))
        fast = _outcome(lambda upd=upd: light_config(base, upd))
        assert fast[0] == slow[0] and (fast[1] == slow[1] if slow[0] == "error" else True), cand
        if slow[0] == "ok":
            assert fast[1] == slow[1] and fast[1].config_hash() == slow[1].config_hash()
        n[slow[0]] += 1
    assert n["ok"] > 10 and n["error"] > 10  # both paths exercised (tp 2048, mbs 8192, fp4 are refused)
    # refused by the run's own checks (not a field's range): a virtual pipeline without pipeline stages
    bad = {**common, "cluster.gpus": 64, "parallel.pp": 1, "parallel.vp": 2}
    assert _outcome(lambda: light_config(base, bad)) == _outcome(lambda: base.with_updates(bad))


def test_copy_with_is_model_copy():
    """light_config's copy of the base with new sections is pydantic's ``model_copy(update=...)``: the same values,
    fields set, extra and private values, and a copy (the base untouched)."""
    from dcpsim.planning.configs import _copy_with

    base = _base()
    new = {"parallel": base.parallel.model_copy(update={"tp": 2}), "cluster": base.cluster.model_copy(update={"gpus": 64})}
    fast, slow = _copy_with(base, new), base.model_copy(update=new)
    assert type(fast) is type(slow) and fast.__dict__ == slow.__dict__ and fast == slow
    assert fast.__pydantic_fields_set__ == slow.__pydantic_fields_set__
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__ and fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.__dict__ is not base.__dict__ and base.parallel.tp != 2 and fast.parallel.tp == 2


@pytest.mark.parametrize("gpus,policy,gpu", [pytest.param(64, "packing", "a100-sxm-80gb", marks=pytest.mark.slow),
                                              (256, "dynamic", "h100-sxm"), (128, "packing", "h100-sxm")])
def test_bounded_screen_finds_what_the_full_screen_finds(monkeypatch, gpus, policy, gpu):
    """The screen cut by its lower bound simulates the same layouts as screening every candidate (the same
    rows); the vectorised sync tail equals the per-stage rules on every screened candidate; the host
    timeline never makes a rank faster than its device time (its periods skipped or not: the same time) and the
    sync tail is never negative (what the two bounds assume)."""
    import dcpsim.planning.screen as screen_mod
    import dcpsim.planning.search as search_mod
    import dcpsim.planning.timeline as timeline_mod

    busy_s, rank_ops = screen_mod.rank_busy_s, screen_mod.rank_ops
    device_of: dict[int, tuple] = {}  # id of a layout's ranks -> (those ranks, its device stage times)

    def checked_rank_ops(cfg, cost, mb, mbs):
        ranks = rank_ops(cfg, cost, mb, mbs)
        if ranks is not None:
            device_of[id(ranks)] = (ranks, screen_mod.stage_times_s(cost, mb))
        return ranks

    def checked_busy_s(ranks, m):
        busy = busy_s(ranks, m)
        held, device = device_of[id(ranks)]
        assert held is ranks and (busy >= m * device * (1 - 1e-12)).all()
        assert busy.max() >= m * timeline_mod.busy_floor_s(ranks) * (1 - 1e-12)  # the second pass's bound
        monkeypatch.setattr(timeline_mod, "SKIP_RANK_PERIODS", False)  # the skipped periods equal every op run
        assert busy == pytest.approx(busy_s(ranks, m), rel=1e-12, abs=0.0)
        monkeypatch.setattr(timeline_mod, "SKIP_RANK_PERIODS", True)
        return busy

    tail_s = screen_mod.sync_tail_s

    def checked_tail_s(*args):
        tail = tail_s(*args)
        assert tail >= 0.0  # what the compute + bubble bound of the screen assumes
        return tail

    monkeypatch.setattr(screen_mod, "_CHECK_SCALAR", True)
    monkeypatch.setattr(screen_mod, "rank_ops", checked_rank_ops)
    monkeypatch.setattr(screen_mod, "rank_busy_s", checked_busy_s)
    monkeypatch.setattr(screen_mod, "sync_tail_s", checked_tail_s)
    monkeypatch.setattr(screen_mod, "SCREEN_MEMO", False)  # every candidate priced here (the checks run)
    data = make_data_spec(seq_len=4096, gbs=256)
    space = SearchSpace(tp=[1, 2], pp=[1, 2, 4, 8], mbs=[1, 2, 4])
    base = _base().with_updates({"hardware.gpu": gpu})
    fast = search_layouts(base, gpus, data, policy=policy, space=space, simulate=3)
    monkeypatch.setattr(search_mod, "FULL_SCREEN", True)
    full = search_layouts(base, gpus, data, policy=policy, space=space, simulate=3)
    assert fast.rows == full.rows and fast.rows
    assert fast.counts["fit"] == full.counts["fit"] and fast.counts["screened"] < full.counts["screened"]


@pytest.mark.parametrize("updates", [
    {"parallel.tp": 1, "parallel.pp": 8, "parallel.cp": 2},
    {"parallel.tp": 2, "parallel.pp": 8, "parallel.cp": 1, "parallel.precision": "fp8"},
    {"parallel.tp": 1, "parallel.pp": 4, "parallel.cp": 1, "parallel.first_stage_layers": 7,
     "parallel.last_stage_layers": 7, "cluster.gpus": 96, "hardware.nvlink_domain_gpus": 12},
])
def test_sync_cost_stage_memo_is_exact(monkeypatch, updates):
    """sync_cost computes stages with equal inputs once: the same arrays as computing every stage."""
    import dcpsim.sim.durations as durations
    from dcpsim.run.single import build_simulator

    cfg = RunConfig().with_updates({"model.name": "llama2-7b", "hardware.gpu": "h100-sxm", "cluster.gpus": 64,
                                    "workload.gbs": 256, **updates})
    memo = build_simulator(cfg)
    monkeypatch.setattr(durations, "STAGE_MEMO", False)
    every = build_simulator(cfg)
    for name, a in vars(memo.sync).items():
        b = getattr(every.sync, name)
        assert (a is None and b is None) or np.array_equal(np.asarray(a), np.asarray(b)), name
    assert memo.durations.step_end_inputs == every.durations.step_end_inputs


def test_cached_memory_terms_match_the_model():
    """The peak memory's cached linear terms give what memory_per_gpu gives at any token count."""
    from dcpsim.cost.memory import memory_settings
    from dcpsim.model import memory_per_gpu
    from dcpsim.run.single import build_cost_model

    cost = build_cost_model(RunConfig().with_updates({"model.name": "llama2-7b", "parallel.recompute": "none"}))
    tokens = np.array([0, 1, 4096, 65536])
    got = cost.peak_memory_bytes(tokens)
    ms = memory_settings(cost.settings)
    want = [memory_per_gpu(cost.model, ms, tokens_per_rank=0).total_bytes
            + (memory_per_gpu(cost.model, ms, tokens_per_rank=1).total_bytes
               - memory_per_gpu(cost.model, ms, tokens_per_rank=0).total_bytes) * float(t) for t in tokens]
    assert got.tolist() == want
    assert got[3] == pytest.approx(memory_per_gpu(cost.model, ms, tokens_per_rank=65536).total_bytes, rel=1e-9)


def test_sync_cost_shared_between_equal_runs():
    """Runs that differ only by seed or policy share one sync cost (read-only); any input of it that differs
    (the bucket size, the topology) computes its own, equal to a fresh computation."""
    import dcpsim.sim.durations as durations
    from dcpsim.run.single import build_simulator

    base = RunConfig().with_updates({"model.name": "llama2-7b", "cluster.gpus": 64, "workload.gbs": 64,
                                     "parallel.pp": 4, "parallel.cp": 2})
    a = build_simulator(base)
    b = build_simulator(base.with_updates({"sim.seed": 7, "policy.name": "packing"}))
    assert a.sync is b.sync and not a.sync.reduce_scatter_s.flags.writeable
    assert a.durations.step_end_inputs == b.durations.step_end_inputs
    for upd in ({"sim.grad_bucket_params": 10_000_000}, {"parallel.tp": 2, "parallel.cp": 1}):
        c = build_simulator(base.with_updates(upd))
        durations._SYNC_MEMO.clear()
        fresh = build_simulator(base.with_updates(upd))
        assert c.sync is not a.sync
        for name, x in vars(c.sync).items():
            y = getattr(fresh.sync, name)
            assert (x is None and y is None) or np.array_equal(np.asarray(x), np.asarray(y)), name


@pytest.mark.slow  # a worker pool and two small plans: ~4 s
def test_plan_with_two_jobs_reaps_its_workers():
    """`dcpsim plan -j 2` (more searches than run in-process): when planning returns, the worker processes and
    their fork server are gone (reaped by this process), and the plan equals the in-process one."""
    import os
    from multiprocessing import forkserver

    from dcpsim.planning import CapacityRequest, plan_capacity

    def children() -> set[int]:
        pids = set()
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                            pids.add(int(d))
                except (OSError, ValueError, IndexError):
                    continue
        return pids

    if not os.path.isdir("/proc/self"):
        pytest.skip("needs /proc")
    before = children()
    request = CapacityRequest("llama2-7b", None, 1e9, {"a100-sxm-80gb": 1.0}, (32, 64), seq_len=4096, gbs=64,
                              policies=("packing", "dynamic"), space=SearchSpace(tp=[1], pp=[1, 2], mbs=[1]),
                              simulate=1, seeds=1)
    two = plan_capacity(request, jobs=2)
    assert forkserver._forkserver._forkserver_pid is None  # the fork server was stopped and reaped
    assert children() <= before  # no worker left behind
    one = plan_capacity(request, jobs=1)
    drop = [c for c in one.rows.columns if "cpu" in c]
    assert two.rows.drop(columns=drop).equals(one.rows.drop(columns=drop))


@pytest.mark.parametrize("step", [{}, {"step.test_mode_qk_checks": True}])
def test_screen_memo_is_the_per_candidate_screen(monkeypatch, step):
    """The memoised fixed-window screen (a layout's stage times shared by every cluster size, whole screens by
    equal configurations) gives exactly what screening each candidate from scratch gives, on random candidates
    of three cluster sizes visited in random order; so do its lower bound and a simulated row's compute parts.
    With the q/k checks of ``--test-mode`` the host timeline reads DP (their all-gather), and the memo keeps DP
    apart."""
    import random

    import dcpsim.planning.screen as screen_mod
    from dcpsim.planning.search import search_updates
    from dcpsim.planning.space import check_candidate, enumerate_candidates

    base = _base().with_updates({"hardware.gpu": "h100-sxm", **step})
    data = make_data_spec(seq_len=4096, gbs=256)
    space = SearchSpace(tp=[1, 2, 4], pp=[1, 2, 4], mbs=[1, 2, 4])
    checked = []
    for gpus in (32, 64, 128):
        common = search_updates(data, "packing", 256)
        for cand in enumerate_candidates(base, gpus, data, space, False):
            ch = check_candidate(base, cand, gpus, data, 256, common)
            if ch.cfg is not None:
                checked.append(ch)
    rng = random.Random(7)
    sample = rng.sample(checked, min(120, len(checked)))
    sample += rng.sample(sample, 40)  # repeats: memo hits
    for memo in (screen_mod._DEVICE_MAX, screen_mod._STAGES, screen_mod._SCREENS, screen_mod._LAYOUT_KEYS,
                 screen_mod._BOUND_BY_SECTIONS, screen_mod._PARTS):
        memo.clear()
    got = [(screen_mod.screen_fixed(ch.cfg, data, ch.cand.mbs), screen_mod.fixed_lower_bound_s(ch.cfg, data, ch.cand.mbs),
            screen_mod.compute_parts_s(ch.cfg, data, ch.cand.mbs)) for ch in sample]
    shared = len(screen_mod._STAGES) < len({id(ch) for ch in sample})  # layouts shared across sizes
    assert shared == (not step)
    monkeypatch.setattr(screen_mod, "SCREEN_MEMO", False)
    for ch, (parts, bound, compute) in zip(sample, got, strict=True):
        assert parts == screen_mod.screen_fixed_each(ch.cfg, data, ch.cand.mbs), ch.cand.label()
        assert bound == screen_mod.fixed_lower_bound_s(ch.cfg, data, ch.cand.mbs)
        fresh = screen_mod.compute_parts_s(ch.cfg, data, ch.cand.mbs)  # the row's compute parts, memo off
        assert list(compute.items()) == list(fresh.items())
        assert bound <= parts["time_s"] * (1 + 1e-12)  # a lower bound (what the bounded screen relies on)


def test_task_groups_keep_a_gpu_type_together():
    """Workers get the searches of one GPU type as one unit, in task order -- of one (GPU type, policy) when
    there are fewer GPU types than workers."""
    from dcpsim.planning.capacity import task_groups
    from dcpsim.planning.tasks import Task

    tasks = [Task(g, 1.0, n, p, 64) for g in ("a", "b") for n in (8, 16) for p in ("packing", "dynamic")]
    assert task_groups(tasks, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert task_groups(tasks, 3) == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_final_evaluation_reuses_the_search_run():
    """The best layout's final run on the search's (ideal) network is the search's own run: the plan equals the
    one whose final evaluation simulates it again (an explicit runner turns the reuse off)."""
    from dcpsim.planning import CapacityRequest, plan_capacity
    from dcpsim.run.single import run_simulation

    request = CapacityRequest("llama2-7b", None, 1e9, {"a100-sxm-80gb": 1.0}, (32,), seq_len=4096, gbs=64,
                              policies=("packing",), space=SearchSpace(tp=[1], pp=[1, 2], mbs=[1]), simulate=2,
                              seeds=1)
    reused = plan_capacity(request, jobs=1)
    fresh = plan_capacity(request, jobs=1, runner=run_simulation)
    drop = [c for c in reused.rows.columns if "cpu" in c]
    assert reused.rows.drop(columns=drop).equals(fresh.rows.drop(columns=drop))


def test_screen_sync_cache_ignores_the_overlap_flags():
    """The screen's cached sync cost of a configuration is the simulator's for every setting of the overlap
    flags it leaves out of its key (they time the sync, not its cost)."""
    import itertools

    import dcpsim.planning.screen as screen_mod
    from dcpsim.run.single import build_cost_model, build_simulator

    base = RunConfig().with_updates({"model.name": "llama2-7b", "hardware.gpu": "h100-sxm", "cluster.gpus": 64,
                                     "workload.gbs": 256, "parallel.pp": 4, "parallel.vp": 2, "parallel.cp": 2})
    screen_mod._SYNC_CACHE.clear()
    for g, p, launch in itertools.product((True, False), (True, False), ("first_forward", "step_start")):
        cfg = base.with_updates({"sim.overlap_grad_sync": g, "sim.overlap_param_gather": p,
                                 "sim.param_gather_launch": launch})
        cached = screen_mod._sync_cost(cfg, build_cost_model(cfg))
        fresh = build_simulator(cfg).sync
        for name, a in vars(fresh).items():
            b = getattr(cached, name)
            assert (a is None and b is None) or np.array_equal(np.asarray(a), np.asarray(b)), name
    assert len(screen_mod._SYNC_CACHE) == 1


def _stage_dp_group_reference(topo, stage: int) -> tuple[int, int, float]:
    """Topology.stage_dp_group as it was: every GPU of the group listed (numpy unique per TP rank)."""
    r = np.arange(topo.ranks_per_stage, dtype=np.int64)
    domains, factor = 1, float(topo.network_scale)
    for t in range(topo.tp):
        g = topo.gpu_id(stage, r, t)
        domains = max(domains, int(np.unique(g // topo.nvlink_domain_gpus).size))
        f = float(topo.network_scale)
        if topo.pod_gpus and np.unique(g // topo.pod_gpus).size > 1:
            f /= topo.oversubscription
        if topo.degraded_gpu is not None and topo.degraded_link_scale < 1.0 and bool((g == topo.degraded_gpu).any()):
            f *= topo.degraded_link_scale
        factor = min(factor, f)
    return topo.ranks_per_stage, domains, factor


@pytest.mark.parametrize("seed", range(4))
def test_stage_dp_group_closed_form_is_the_listed_one(seed):
    """The DP group's domains, pods and degraded link from the run's first and last GPU equal listing them."""
    from dcpsim.sim.topology import Topology

    rng = np.random.default_rng(seed)
    for _ in range(150):
        tp, pp, dp, cp = (int(rng.choice(v)) for v in ([1, 2, 4, 8, 16], [1, 2, 3, 4, 8], [1, 2, 3, 8, 64], [1, 2, 4]))
        gpus = tp * pp * dp * cp
        deg = int(rng.integers(0, gpus)) if rng.random() < 0.5 else None
        domain = int(rng.choice([tp, 2 * tp, 4 * tp] + ([72] if 72 % tp == 0 else [])))
        topo = Topology(tp=tp, pp=pp, dp=dp, cp=cp, nvlink_domain_gpus=domain,
                        pod_gpus=int(rng.choice([0, 8, 16, 256])), oversubscription=float(rng.choice([1.0, 2.0])),
                        network_scale=float(rng.choice([1.0, 0.7])), degraded_gpu=deg,
                        degraded_link_scale=float(rng.choice([1.0, 0.25])))
        for stage in range(pp):
            assert topo.stage_dp_group(stage) == _stage_dp_group_reference(topo, stage)


@pytest.mark.parametrize("iters", [[0.9], pytest.param([0.9, 1.1], marks=pytest.mark.slow),
                                   pytest.param([0.5, 0.7, 0.6], marks=pytest.mark.slow)])
def test_long_run_equal_segments_shortcut_is_exact(monkeypatch, iters):
    """Without slow episodes, segments that run the same iterations are summed once: the same long runs as
    pricing every segment from its iterations (goodput, failures, times to the last bit)."""
    import dcpsim.sim.longrun as longrun
    from dcpsim.sim.longrun import long_run_from_settings, long_runs

    sim = RunConfig().with_updates({"sim.gpu_mtbf_h": 2000.0}).sim
    for gpus, hours in ((512, 300.0), (16384, 2000.0), (64, 50.0)):
        lr = long_run_from_settings(sim, hours)
        fast = long_runs(np.array(iters), gpus, lr, 4, 11)
        monkeypatch.setattr(longrun, "SAME_SEGMENTS", False)
        every = long_runs(np.array(iters), gpus, lr, 4, 11)
        monkeypatch.setattr(longrun, "SAME_SEGMENTS", True)
        assert fast == every and sum(r["failures"] for r in fast) > 0


@pytest.mark.parametrize("updates", [
    {"parallel.tp": 2, "parallel.pp": 4, "parallel.vp": 2, "parallel.cp": 2, "parallel.precision": "fp8"},
    {"parallel.tp": 1, "parallel.pp": 1, "parallel.cp": 1, "sim.straggler_fraction": 0.1,
     "sim.degraded_link_scale": 0.5, "sim.seed": 3},
])
def test_build_sync_cost_is_the_simulators(updates):
    """The screen's sync cost without the simulator around it equals the simulator's (the same fault stream,
    topology and host flags), array for array."""
    import dcpsim.sim.durations as durations
    from dcpsim.run.single import build_cost_model, build_simulator, build_sync_cost

    cfg = RunConfig().with_updates({"model.name": "llama2-7b", "hardware.gpu": "h100-sxm", "cluster.gpus": 64,
                                    "workload.gbs": 256, **updates})
    want = build_simulator(cfg).sync
    durations._SYNC_MEMO.clear()
    got = build_sync_cost(cfg, build_cost_model(cfg))
    for name, a in vars(want).items():
        b = getattr(got, name)
        assert (a is None and b is None) or np.array_equal(np.asarray(a), np.asarray(b)), name


def test_enumeration_memo_is_the_enumeration():
    """Candidates enumerated from the process-wide combinations, for one GPU count after another, are those built
    afresh, in the same order."""
    import dcpsim.planning.space as space_mod

    base = _base()
    data = make_data_spec(seq_len=4096, gbs=256)
    space = SearchSpace(tp=[1, 2], mbs=[1, 2])
    for gpus in (24, 64, 96):
        got = list(space_mod.enumerate_candidates(base, gpus, data, space, False))
        space_mod._COMBOS.clear()
        assert list(space_mod.enumerate_candidates(base, gpus, data, space, False)) == got and got


def test_memoised_host_side_is_host_ops():
    """The screen's host side of a layout's ops, memoised across micro-batch sizes, is host_ops' own of the
    simulator's pass shape, interleaved or not, with every sync flag (per-op timers, p2p not overlapped)."""
    import dcpsim.planning.screen as screen_mod
    import dcpsim.planning.timeline as timeline_mod
    from dcpsim.cost.host import StepFlags, host_ops
    from dcpsim.sim.durations import pass_shape

    data = make_data_spec(seq_len=4096, gbs=256)
    for upd in ({"parallel.pp": 4, "parallel.vp": 4}, {"parallel.pp": 8, "parallel.tp": 2},
                {"parallel.pp": 2, "parallel.vp": 2, "step.overlap_p2p_comm": False, "step.timing_log_level": 2},
                {"parallel.pp": 1}):
        for mbs in (1, 2, 4):
            cfg = RunConfig().with_updates({"model.name": "llama2-7b", "hardware.gpu": "h100-sxm", "cluster.gpus": 64,
                                            "workload.name": "fixed", "workload.seq_len": 4096, "workload.gbs": 256,
                                            "parallel.cp": 1, "parallel.mbs": mbs, **upd})
            cost, mb, _, _ = screen_mod._device_stages(cfg, data, mbs)
            got = timeline_mod._host_ops(cfg, cost, mbs)
            p = cfg.parallel
            want = host_ops(pass_shape(cost, p.vp, np.array([p.cp]), n_seqs=np.array([mbs])), cost.profile.host,
                            StepFlags.from_settings(cfg.step))
            for name in ("host_s", "kernels", "sync_before", "sync_after", "sync_s"):
                assert np.array_equal(getattr(got, name), getattr(want, name)), (upd, mbs, name)
            ranks = screen_mod.rank_ops(cfg, cost, mb, mbs)
            dev = timeline_mod.chunk_device_s(cost, mb, p.vp)
            for r in range(p.pp):
                for c in range(p.vp):
                    s = c * p.pp + r
                    for way, ops in ((0, ranks.fwd), (1, ranks.bwd)):
                        assert ops[r][c] == ((want.host_s[s, way, 0], want.kernels[s, way, 0],
                                              want.sync_before[s, way, 0], want.sync_after[s, way, 0]), dev[s, way])


def test_prepared_issue_step_is_issue_one(monkeypatch):
    """The rank timeline's op step (quotients computed once per op, input ready when the device is free) gives
    issue_one's floats on random ops with every sync flag, and the ranks' timelines of the screen's layouts are the
    same floats with issue_one itself; a rank's ops are the host ops' items as float()/bool() read them."""
    import random

    import dcpsim.planning.screen as screen_mod
    import dcpsim.planning.timeline as timeline_mod
    from dcpsim.cost.host import issue_one

    rng = random.Random(3)
    for _ in range(2000):
        op = (rng.choice([0.0, rng.random(), 10 * rng.random()]), rng.choice([0.0, 0.5, 1.0, float(rng.randint(1, 90))]),
              rng.random() < 0.4, rng.random() < 0.3)
        d, hf, df, sync = rng.choice([0.0, rng.random()]), rng.random() * 5, rng.random() * 5, rng.random() * 1e-3
        prep = timeline_mod._prepared(((op, d),))[0]
        _, _, end, host = issue_one(hf, df, df, d, op, sync)
        assert timeline_mod._issue_ready(hf, df, prep, sync) == (host, end)
    data = make_data_spec(seq_len=4096, gbs=256)
    for upd in ({"parallel.pp": 4, "parallel.vp": 4}, {"parallel.pp": 8, "parallel.tp": 2}, {"parallel.pp": 1}):
        cfg = RunConfig().with_updates({"model.name": "llama2-7b", "hardware.gpu": "h100-sxm", "cluster.gpus": 64,
                                        "workload.name": "fixed", "workload.seq_len": 4096, "workload.gbs": 256,
                                        "parallel.cp": 1, **upd})
        cost, mb, _, m = screen_mod._device_stages(cfg, data, 1)
        ranks = screen_mod.rank_ops(cfg, cost, mb, 1)
        ops = timeline_mod._host_ops(cfg, cost, 1)
        (h, k, b, a), _ = ranks.bwd[0][0]
        assert (h, k, b, a) == (float(ops.host_s[0, 1, 0]), float(ops.kernels[0, 1, 0]), bool(ops.sync_before[0, 1, 0]),
                                bool(ops.sync_after[0, 1, 0]))
        fast = screen_mod.rank_busy_s(ranks, m)
        monkeypatch.setattr(timeline_mod, "FAST_ISSUE", False)
        assert screen_mod.rank_busy_s(ranks, m).tolist() == fast.tolist(), upd
        monkeypatch.setattr(timeline_mod, "FAST_ISSUE", True)


def test_candidate_prune_order_is_a_cache():
    """A candidate's cached prune order (recompute rank, layout less recompute) leaves its equality, hash and
    replace() alone, and is what prune ordered and dominated by."""
    import dataclasses

    from dcpsim.planning.space import RECOMPUTE, Candidate

    a = Candidate(tp=2, pp=4, cp=1, tokens_per_rank=4096, recompute="selective", vp=2, mbs=1, precision="bf16",
                  flags=(("overlap_grad_sync", True),))
    b = dataclasses.replace(a)
    assert a.prune_order == (RECOMPUTE.index("selective"), (a.layout_key()[:-2], "bf16", a.flags))
    assert a == b and hash(a) == hash(b)
    c = dataclasses.replace(a, recompute="full", flags=(("overlap_grad_sync", False),))
    assert c.prune_order == (RECOMPUTE.index("full"), (a.layout_key()[:-2], "bf16", (("overlap_grad_sync", False),)))


@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_peak_memory_one_is_peak_memory_bytes(attention):
    """The prune's scalar memory figure (cost.memory.peak_memory_one) is exactly the cost model's
    peak_memory_bytes of one microbatch, on every candidate of a search (fixed windows and variable lengths;
    unfused attention adds the score matrices)."""
    from dcpsim.cost.memory import peak_memory_one
    from dcpsim.planning.search import search_updates
    from dcpsim.planning.space import _cached_cost, check_candidate, enumerate_candidates
    from dcpsim.run.single import microbatch_sum_sq

    base = _base().with_updates({"hardware.gpu": "h100-sxm", "parallel.attention": attention})
    n = 0
    for data in (make_data_spec(seq_len=4096, gbs=64), make_data_spec(workload="github", gbs=64, max_len=65536)):
        common = search_updates(data, "packing", 64)
        for cand in enumerate_candidates(base, 64, data, SearchSpace(tp=[1, 2], pp=[1, 2], mbs=[1, 2], tokens_per_rank=[4096, 16384]), False):
            cfg = check_candidate(base, cand, 64, data, 64, common).cfg
            if cfg is None:
                continue
            cost, sq = _cached_cost(cfg), microbatch_sum_sq(cfg)
            assert peak_memory_one(cost.settings, cfg.max_tokens_per_rank, sq) == float(
                cost.peak_memory_bytes([cfg.max_tokens_per_rank], [sq])[0])
            n += 1
    assert n > 50
