"""The host timeline (dcpsim.cost.host): closed-form limits of the host/device rule, sync draining, calls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dcpsim.cost.host import (
    HostOps,
    Op,
    OpCosts,
    PassShape,
    StepEndWork,
    StepFlags,
    evaluate,
    issue,
    issue_one,
    layer_pass_host,
    step_end_ops,
)
from dcpsim.errors import ConfigError, ProfileError
from dcpsim.hardware.host import HostCosts, host_from_table

X86 = HostCosts(cpu="x86", kernel_fwd_s=24e-6, kernel_bwd_s=35e-6, kernel_launch_s=6.5e-6, module_call_s=10e-6,
                collective_call_s=44e-6, sync_s=5e-6, microbatch_s=100e-6, param_tensor_s=6e-6, step_s=1e-3,
                graph_replay_s=6.5e-6, graph_kernel_s=0.9e-6)


def _chain(n: int, h: float, d: float, k: int = 1, **kw) -> list[Op]:
    return [Op(f"op{i}", h, d, kernels=k, **kw) for i in range(n)]


@pytest.mark.parametrize("n,h,d", [(10, 1.0, 3.0), (10, 3.0, 1.0), (1, 2.0, 5.0), (7, 2.5, 2.5)])
def test_chain_without_syncs_is_the_flow_shop(n, h, d):
    """n equal ops, one kernel each: the host runs ahead, so the list takes h + n·d when the device is the
    bottleneck and n·h + d when the host is: the two-machine flow shop, max(Σh + d, h + Σd)."""
    tl = evaluate(_chain(n, h, d), sync_s=0.0)
    assert tl.end_s == pytest.approx(max(n * h + d, h + n * d))


def test_device_bound_hides_the_host_and_host_bound_shows_it():
    dev = evaluate(_chain(100, 1e-6, 1e-3, k=10), sync_s=0.0)
    assert dev.end_s == pytest.approx(100 * 1e-3 + 1e-7, rel=1e-9)  # only the first kernel's launch shows
    host = evaluate(_chain(100, 1e-3, 1e-6, k=10), sync_s=0.0)
    assert host.end_s == pytest.approx(100 * 1e-3 + 1e-7, rel=1e-9)  # only the last kernel's run shows


def test_many_kernels_overlap_within_one_op():
    """One op of k kernels: max(h + d/k, h/k + d), between max(h, d) and h + d."""
    for h, d, k in ((3.0, 1.0, 4), (1.0, 3.0, 4), (2.0, 2.0, 1)):
        tl = evaluate([Op("x", h, d, kernels=k)], sync_s=0.0)
        assert tl.end_s == pytest.approx(max(h + d / k, h / k + d))
        assert max(h, d) <= tl.end_s <= h + d


def test_a_sync_drains_the_queue_and_costs_the_lead():
    """With a sync before every op the host cannot run ahead: each op costs sync + h + d (one kernel)."""
    n, h, d, s = 8, 1.0, 3.0, 0.5
    synced = evaluate(_chain(n, h, d, sync_before=True), sync_s=s)
    assert synced.end_s == pytest.approx(n * (s + h + d))
    free = evaluate(_chain(n, h, d), sync_s=s)
    assert free.end_s < synced.end_s
    # one sync in the middle: the two halves are flow shops, joined by the drain
    ops = _chain(4, h, d) + [Op("sync", h, d, sync_before=True)] + _chain(3, h, d)
    tl = evaluate(ops, sync_s=s)
    first = max(4 * h + d, h + 4 * d)
    second = max(4 * h + d, h + 4 * d)  # the synced op then 3 more: 4 ops from an aligned start
    assert tl.end_s == pytest.approx(first + s + second)


def test_sync_after_blocks_the_host_until_the_op_ends():
    tl = evaluate([Op("a", 1.0, 5.0, sync_after=True), Op("b", 1.0, 1.0)], sync_s=0.25)
    assert tl.host_end[0] == pytest.approx(6.25)
    assert tl.end_s == pytest.approx(6.25 + 1.0 + 1.0)


def test_ready_time_is_a_device_dependency_not_a_host_wait():
    """A pipeline input arriving late delays the device, not the host, which keeps issuing."""
    ops = [Op("a", 1.0, 1.0, ready_s=10.0), Op("b", 1.0, 1.0)]
    tl = evaluate(ops, sync_s=0.0)
    assert tl.device_start[0] == pytest.approx(10.0)
    assert tl.host_end[1] == pytest.approx(2.0)
    assert tl.end_s == pytest.approx(12.0)
    # a synced receive makes the host wait for the input too
    tl2 = evaluate([Op("a", 1.0, 1.0, ready_s=10.0, sync_before=True), Op("b", 1.0, 1.0)], sync_s=0.0)
    assert tl2.issue_start[0] == pytest.approx(10.0)
    assert tl2.end_s == pytest.approx(10.0 + 1.0 + 1.0 + 1.0)


def test_issue_is_vectorised_like_the_scalar_rule():
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 2, size=(6, 50))
    sb, sa = rng.random(50) < 0.5, rng.random(50) < 0.5
    k = rng.integers(1, 9, 50)
    H, s, e, hf = issue(a[0], a[1], a[2], OpCosts(a[3], a[4], k, sb, sa), 0.1)
    for i in range(50):
        h1, s1, e1, f1 = issue(a[0, i], a[1, i], a[2, i], OpCosts(a[3, i], a[4, i], k[i], sb[i], sa[i]), 0.1)
        assert (H[i], s[i], e[i], hf[i]) == pytest.approx((float(h1), float(s1), float(e1), float(f1)))
    assert (e >= s + a[4] - 1e-12).all() and (s >= a[1]).all() and (s >= a[2]).all()


def test_the_scalar_rule_is_bit_identical_to_the_vectorised_one():
    """issue_one (and HostOps.run_one, the event engine's per-op path) equal issue exactly, not approximately:
    ties, zero costs, kernels below 1 and both syncs included."""
    rng = np.random.default_rng(11)
    n = 400
    a = rng.uniform(0, 2, size=(5, n))
    a[:, rng.random(n) < 0.2] = 0.0  # ties and zeros
    a[1, ::7] = a[0, ::7]
    a[2, ::5] = a[1, ::5]
    sb, sa = rng.random(n) < 0.5, rng.random(n) < 0.5
    k = rng.integers(0, 9, n).astype(float)
    k[::9] = 0.5
    ref = np.stack(issue(a[0], a[1], a[2], OpCosts(a[3], a[4], k, sb, sa), 0.1))
    for i in range(n):
        got = issue_one(float(a[0, i]), float(a[1, i]), float(a[2, i]), float(a[4, i]),
                        (float(a[3, i]), float(k[i]), bool(sb[i]), bool(sa[i])), 0.1)
        assert got == tuple(ref[:, i].tolist())
    V, G = 2, n // 4
    shape = (V, 2, G)
    ops = HostOps(a[3].reshape(shape), k.reshape(shape), sb.reshape(shape), sa.reshape(shape), 0.1)
    for s in range(V):
        for d in range(2):
            i0 = (s * 2 + d) * G
            st, fin, after, H = ops.run(s, d, 0, G, a[0, i0:i0 + G], a[1, i0:i0 + G], a[4, i0:i0 + G])
            for g in range(G):
                one = ops.run_one(i0 + g, float(a[0, i0 + g]), float(a[1, i0 + g]), float(a[4, i0 + g]))
                assert one == (st[g], fin[g], after[g], H[g])


def test_zero_host_costs_give_the_device_time():
    tl = evaluate(_chain(5, 0.0, 2.0, k=3, sync_before=True), sync_s=0.0)
    assert tl.end_s == pytest.approx(10.0)


def _shape(**kw):
    base = dict(stage_layers=np.array([2]), vp=1, tp=2, kernels_fwd=np.array([20.0]), kernels_bwd=np.array([30.0]),
                collectives_fwd=np.array([4.0]), collectives_bwd=np.array([4.0]))
    base.update(kw)
    return PassShape(**base)


def test_layer_pass_prices_kernels_calls_and_graphs():
    f, b, kf, kb = layer_pass_host(_shape(), X86, StepFlags())
    assert f[0] == pytest.approx(16 * 24e-6 + 4 * 44e-6) and b[0] == pytest.approx(26 * 35e-6 + 4 * 44e-6)
    gf, gb, _, _ = layer_pass_host(_shape(), X86, StepFlags(cuda_graphs="transformer_engine"))
    assert gf[0] == pytest.approx(10e-6 + 6.5e-6 + 20 * 0.9e-6) and gb[0] < b[0] and gf[0] < f[0]
    rf, rb, _, rk = layer_pass_host(_shape(recompute="full"), X86, StepFlags())
    # the recomputed forward plus CheckpointFunction's own calls (dcpsim.cost.host_calls)
    assert rb[0] == pytest.approx(b[0] + f[0] + 20 * 6.5e-6 + 2 * 10e-6) and rk[0] == kb[0] + kf[0]
    _, nb, _, nk = layer_pass_host(_shape(), X86, StepFlags(grad_accumulation_fusion=False))
    assert nk[0] == kb[0] + 4 and nb[0] == pytest.approx(b[0] + 4 * 35e-6)
    with pytest.raises(ConfigError, match="cuda_graphs"):
        layer_pass_host(_shape(), X86, StepFlags(cuda_graphs="full"))


def test_layer_pass_prices_the_measured_layer_whole_and_extra_kernels_one_by_one():
    """With layer_*_s the base layer's pass costs the measured block's pass whatever its kernel count; the
    TP collectives cost a call each and kernels beyond the base layer's (here 20 - 4 - 12 = 4 forward,
    30 - 4 - 20 = 6 backward) the per-kernel price."""
    from dataclasses import replace

    host = replace(X86, layer_fwd_s=267e-6, layer_bwd_s=1473e-6)
    f, b, _, _ = layer_pass_host(_shape(), host, StepFlags())
    assert f[0] == pytest.approx(267e-6 + 4 * 24e-6 + 4 * 44e-6)
    assert b[0] == pytest.approx(1473e-6 + 6 * 35e-6 + 4 * 44e-6)
    base = PassShape(stage_layers=np.array([1.0]), vp=1, tp=1, kernels_fwd=np.array([12.0]),
                     kernels_bwd=np.array([20.0]), collectives_fwd=np.zeros(1), collectives_bwd=np.zeros(1))
    fewer = replace(base, kernels_fwd=np.array([8.0]), kernels_bwd=np.array([14.0]))
    for sh in (base, fewer):  # fusing the layer into fewer kernels does not make its pass cheaper to issue
        bf, bb, _, _ = layer_pass_host(sh, host, StepFlags())
        assert bf[0] == pytest.approx(267e-6) and bb[0] == pytest.approx(1473e-6)


def test_test_mode_qk_checks_add_the_realtime_comparisons_per_attention_forward():
    """--test-mode with --qk-layernorm (Megatron's run_realtime_tests): per layer forward one stack, two all-gathers
    (DP, TP) and, per rank of each group, 4 comparisons (2 kernels and a sync each); nothing in the backward."""
    sh = _shape(dp_cp=4, cps=np.array([2.0]))  # tp 2, DP group 4 / 2 = 2: 4 ranks compared
    f, b, kf, kb = layer_pass_host(sh, X86, StepFlags())
    tf, tb, tkf, tkb = layer_pass_host(sh, X86, StepFlags(test_mode_qk_checks=True))
    assert tf[0] - f[0] == pytest.approx(6.5e-6 + 2 * 44e-6 + 4 * 4 * (2 * 6.5e-6 + 5e-6))
    assert tkf[0] - kf[0] == 1 + 8 * 4 and tb[0] == b[0] and tkb[0] == kb[0]


def test_step_end_flags_add_syncs_and_work():
    work = StepEndWork(optimizer_device_s=2e-3, param_tensors=50, buckets=2)
    base = step_end_ops(work, StepFlags(log_params_norm=False, log_num_zeros=False, log_interval=1), X86)
    more = step_end_ops(work, StepFlags(log_params_norm=True, log_num_zeros=True, log_interval=1), X86)
    syncs = lambda ops: sum(o.sync_after or o.sync_before for o in ops)  # noqa: E731
    assert syncs(more) == syncs(base) + 2
    t0, t1 = evaluate(base, X86.sync_s).end_s, evaluate(more, X86.sync_s).end_s
    assert t1 > t0 > 2e-3
    # the optimizer's device time is there, and the host's work: the logging Python runs while the device
    # still runs the optimizer (no sync between them), so the step end is not their sum
    assert t0 >= max(2e-3, sum(o.host_s for o in base)) and t0 < 2e-3 + sum(o.host_s for o in base)


def test_host_table_is_validated():
    src = {f"host.{k}": "a source" for k in ("kernel_launch_s", "sync_s")}
    h = host_from_table({"cpu": "grace", "kernel_launch_s": 1e-5, "sync_s": 2e-5}, src, "p")
    assert h.enabled and h.cpu == "grace" and h.kernel_launch_s == 1e-5 and h.kernel_fwd_s == 0.0
    assert not host_from_table(None, {}, "p").enabled
    with pytest.raises(ProfileError, match="host.cpu"):
        host_from_table({"cpu": "arm"}, src, "p")
    with pytest.raises(ProfileError, match="host.sync_s"):
        host_from_table({"cpu": "x86", "sync_s": -1.0}, src, "p")
    with pytest.raises(ProfileError, match="origin"):
        host_from_table({"cpu": "x86", "module_call_s": 1e-6}, src, "p")
    with pytest.raises(ProfileError, match="not a host field"):
        host_from_table({"cpu": "x86", "launch": 1e-6}, src, "p")
    assert math.isfinite(h.kernel_launch_s)


# ---------------------------------------------------------------- the pipeline evaluators with a host
def _random_host(work, rng, sync_s=2e-4):
    from dcpsim.cost.host import HostOps

    f, _, _ = work.virtual()
    V, G = f.shape
    scale = float(np.median(f)) if f.size else 1e-3
    return HostOps(rng.uniform(0, 2 * scale, (V, 2, G)), rng.integers(1, 50, (V, 2, G)).astype(float),
                   rng.random((V, 2, G)) < 0.4, rng.random((V, 2, G)) < 0.2, sync_s)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("pp,vp", [(1, 1), (2, 1), (4, 2)])
def test_events_and_fast_path_agree_with_a_host(seed, pp, vp):
    from dcpsim.pipeline import pipeline_schedule
    from dcpsim.policies import get_policy
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import build_cost_model, build_layout, build_simulator
    from dcpsim.sim import build_graph, build_group_table, run_iteration
    from dcpsim.sim.fastpath import fast_iteration

    rng = np.random.default_rng(seed)
    cfg = config_from_dict({"cluster": {"gpus": pp * 16}, "parallel": {"pp": pp, "cp": 2, "vp": vp,
                                                                        "max_tokens_per_rank": 16384},
                            "sim": {"iterations": 1, "planning": "ignore", "overlap_param_gather": seed % 2 == 1}})
    cost = build_cost_model(cfg)
    lay, sim = build_layout(cfg, cost), build_simulator(cfg, cost)
    lengths = rng.integers(128, 30000, size=int(rng.integers(8, 40)))
    plan = get_policy("dynamic" if seed % 2 else "packing").plan(lengths, lay, cost)
    table = build_group_table(plan)
    work = sim.durations.work(plan, table)
    sched = pipeline_schedule(pp, table.n_steps, vp)
    o = sim.settings
    base = fast_iteration(work, sched, sim.sync, overlap_param_gather=o.overlap_param_gather)
    work.host = _random_host(work, rng)
    des = run_iteration(work, build_graph(table, sched, work.virtual()[2]), sim.sync,
                        overlap_param_gather=o.overlap_param_gather)
    fast = fast_iteration(work, sched, sim.sync, overlap_param_gather=o.overlap_param_gather)
    for f in ("start", "finish", "bwd_end_s", "stage_end_s", "host_start", "host_end"):
        np.testing.assert_allclose(getattr(des, f), getattr(fast, f), rtol=1e-9, err_msg=f)
    assert fast.makespan_s >= base.makespan_s * (1 - 1e-12)  # a host never makes a step shorter


def test_one_rank_pipeline_is_the_op_list_evaluator():
    """pp = 1, one rank, static groups: the evaluator of the pipeline equals :func:`evaluate` on the rank's
    op list (forward then backward per microbatch)."""
    from dcpsim.cost.host import HostOps
    from dcpsim.pipeline import StepGroups, group_times, pipeline_schedule

    rng = np.random.default_rng(7)
    m = 5
    f, b = rng.uniform(0.5, 2, (1, m)), rng.uniform(1, 3, (1, m))
    hs, ks = rng.uniform(0, 3, (1, 2, m)), rng.integers(1, 9, (1, 2, m)).astype(float)
    sb, sa = rng.random((1, 2, m)) < 0.5, rng.random((1, 2, m)) < 0.3
    host = HostOps(hs, ks, sb, sa, 0.1)
    groups = StepGroups.from_arrays(np.arange(m), np.zeros(m, int), np.ones(m, int), m, 1)
    gt = group_times(pipeline_schedule(1, m, 1), groups, f, b, None, None, host=host)
    ops = []
    for k in range(m):
        for d, dur in ((0, f[0, k]), (1, b[0, k])):
            ops.append(Op(f"{d}{k}", hs[0, d, k], dur, int(ks[0, d, k]), bool(sb[0, d, k]), bool(sa[0, d, k])))
    tl = evaluate(ops, 0.1)
    np.testing.assert_allclose(gt.finish[0].T.reshape(-1), tl.device_end, rtol=1e-12)


# ---------------------------------------------------------------- the simulator with a host model
HOST_TABLE = {"cpu": "x86", "kernel_fwd_s": 24e-6, "kernel_bwd_s": 35e-6, "kernel_launch_s": 6.5e-6,
              "module_call_s": 10e-6, "collective_call_s": 44e-6, "sync_s": 5e-6, "microbatch_s": 200e-6,
              "param_tensor_s": 6e-6, "step_s": 2e-3, "graph_replay_s": 6.5e-6, "graph_kernel_s": 0.9e-6}
GPT_TINY = {"name": "gpt-tiny", "n_layers": 12, "hidden": 512, "n_heads": 8, "ffn_hidden": 2048, "vocab": 50304,
            "gated_mlp": False}


def _host_profile(tmp_path, table=HOST_TABLE, name="h100-host"):
    import tomllib

    from dcpsim.published.calibrate import dump_profile_toml, profile_folder

    base = profile_folder("h100-sxm")
    out = tmp_path / name
    out.mkdir()
    for f in base.iterdir():
        if f.suffix == ".csv":
            (out / f.name).write_bytes(f.read_bytes())
    data = tomllib.loads((base / "profile.toml").read_text())
    data["name"] = name
    data["timing"]["per_kernel_overhead_s"] = 0.0
    data.pop("host", None)
    data["sources"] = {k: v for k, v in data["sources"].items() if not k.startswith("host.")}
    if table is not None:
        data["host"] = dict(table)
        data["sources"].update({f"host.{k}": "test value" for k in table if k != "cpu"})
    (out / "profile.toml").write_text(dump_profile_toml(data))
    return str(out)


def _tiny(gpu, tp=1, pp=1, vp=1, gbs=8, gpus=8, **step):
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import run_simulation

    cfg = config_from_dict({"model": {"name": GPT_TINY}, "hardware": {"gpu": gpu}, "cluster": {"gpus": gpus},
                            "parallel": {"tp": tp, "pp": pp, "cp": 1, "vp": vp, "max_tokens_per_rank": 4096},
                            "workload": {"name": "fixed", "seq_len": 4096, "gbs": gbs},
                            "policy": {"name": "packing"}, "step": {"log_interval": 1, **step}})
    return run_simulation(cfg).summary["iteration_time_s"]


def test_a_host_model_lengthens_a_tiny_step_and_cuda_graphs_shorten_it(tmp_path):
    gpu = _host_profile(tmp_path)
    dev = _tiny(_host_profile(tmp_path, None, "h100-device"))
    host = _tiny(gpu)
    graphs = _tiny(gpu, cuda_graphs="transformer_engine")
    assert host > dev  # host-bound: the host's issue time shows
    assert dev < graphs < host  # graphs remove per-kernel host cost, not the step's syncs and Python
    # the step's host work alone is a floor: one microbatch's layers on one rank, at least
    from dcpsim.cost.fixed import KERNELS_BWD, KERNELS_FWD

    per_layer = KERNELS_FWD * 24e-6 + KERNELS_BWD * 35e-6
    assert host >= 12 * per_layer + HOST_TABLE["step_s"]
    # logging flags add syncs and work
    assert _tiny(gpu, log_params_norm=True, log_num_zeros_in_grad=True) > host


def test_a_host_model_hides_behind_a_large_step(tmp_path):
    """Llama-13B microbatches of 16K tokens: the device is the bottleneck, the host hides (< 3%)."""
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import run_simulation

    gpu = _host_profile(tmp_path)
    dev = _host_profile(tmp_path, None, "h100-device")
    t = {}
    for g in (dev, gpu):
        cfg = config_from_dict({"model": {"name": "llama-13b"}, "hardware": {"gpu": g}, "cluster": {"gpus": 16},
                                "parallel": {"tp": 2, "pp": 2, "cp": 1, "max_tokens_per_rank": 16384},
                                "workload": {"name": "fixed", "seq_len": 16384, "gbs": 16},
                                "policy": {"name": "packing"}})
        t[g] = run_simulation(cfg).summary["iteration_time_s"]
    assert 1.0 <= t[gpu] / t[dev] < 1.03


def test_a_host_table_excludes_the_launch_floor(tmp_path):
    import tomllib

    from dcpsim.hardware.profile import load_profile
    from dcpsim.published.calibrate import dump_profile_toml

    folder = _host_profile(tmp_path)
    assert load_profile(folder).host.enabled
    p = tmp_path / "h100-host" / "profile.toml"
    data = tomllib.loads(p.read_text())
    data["timing"]["per_kernel_overhead_s"] = 1e-5
    p.write_text(dump_profile_toml(data))
    with pytest.raises(ProfileError, match="per_kernel_overhead_s"):
        load_profile(folder)


def test_rank_step_lays_out_host_and_device(tmp_path):
    from dcpsim.report.host import plot_rank_step, rank_step, step_table_markdown
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import run_simulation

    gpu = _host_profile(tmp_path)
    cfg = config_from_dict({"model": {"name": GPT_TINY}, "hardware": {"gpu": gpu}, "cluster": {"gpus": 8},
                            "parallel": {"tp": 1, "pp": 2, "cp": 1, "max_tokens_per_rank": 4096},
                            "workload": {"name": "fixed", "seq_len": 4096, "gbs": 8},
                            "policy": {"name": "packing"}, "step": {"log_interval": 1}})
    res = run_simulation(cfg)
    step = rank_step(res.records[0], stage=1, rank=0)
    assert [r["op"] for r in step.rows] == ["F0", "B0", "F1", "B1"]
    for r in step.rows:
        assert r["device_end_s"] >= r["device_start_s"] + r["device_s"] * (1 - 1e-12)
        assert r["device_start_s"] >= r["host_start_s"]  # nothing runs before its issue began
        assert "before" in r["sync"] or r["op"] == "F0" or r["direction"] == "backward"
    s = step.summary()
    assert s["step_s"] == pytest.approx(res.summary["iteration_time_s"], rel=1e-9)
    assert 0 < s["device_busy_s"] <= s["forward_backward_s"] and s["host_busy_s"] > 0
    assert "| F0 |" in step_table_markdown(step)
    from dcpsim.run.single import build_simulator

    full = rank_step(res.records[0], stage=1, rank=0, sim=build_simulator(cfg))
    names = [r["op"] for r in full.tail]
    assert "optimizer" in names and "grad norm" in names and "loss report and logging" in names
    assert full.tail[-1]["device_end_s"] <= s["step_s"] + 1e-12 and "Step end" in step_table_markdown(full)
    assert plot_rank_step(step.frame(), tmp_path / "step.png").stat().st_size > 0
    assert plot_rank_step(full.frame(), tmp_path / "full.png").stat().st_size > 0
    df = full.frame()
    assert list(df["part"]).count("reduce-scatter") == 1 and (df["part"] == "step end").sum() == len(full.tail)
    from dcpsim.report import get_plot

    assert get_plot("rank-step") is plot_rank_step
    with pytest.raises(ConfigError, match="host"):
        rank_step(run_simulation(cfg.with_updates({"hardware.gpu": _host_profile(tmp_path, None, "dev")})).records[0])
