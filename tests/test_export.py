"""Megatron-LM export: constraint checks, arguments, files, and the simulated expectations."""

from __future__ import annotations

import csv
import json
import shlex
import subprocess

import numpy as np
import pytest

from dcpsim.errors import ConfigError
from dcpsim.export import SCHEDULERS, check_megatron, export_megatron, megatron_args, resolve_policy
from dcpsim.export.megatron import EXPORT_FIELDS
from dcpsim.run.config import RunConfig

# 32 GPUs: TP1 PP4 CP2 DP4; M = 8192 so that M*CP = max length 16384 (static) and M*DP*CP = 65536 (dynamic).
SMALL = {"cluster.gpus": 32, "parallel.pp": 4, "parallel.cp": 2, "parallel.max_tokens_per_rank": 8192,
         "workload.gbs": 32, "workload.max_len": 16384}


def _cfg(**upd) -> RunConfig:
    return RunConfig().with_updates(SMALL | {k.replace("__", "."): v for k, v in upd.items()})


def _flags(args: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    cur = None
    for a in args:
        if a.startswith("--"):
            cur = a
            out[cur] = []
        else:
            out[cur].append(a)
    return out


def test_dynamic_args_follow_reference_flags():
    f = _flags(megatron_args(_cfg(policy__name="dynamic", parallel__min_cp=2)))
    assert f["--sequence-packing-scheduler"] == ["default_dynamic_cp"]
    assert "--dynamic-context-parallel" in f
    assert f["--min-dynamic-context-parallel-size"] == ["2"]
    assert f["--max-seqlen-per-dp-cp-rank"] == ["8192"]
    assert f["--context-parallel-size"] == ["2"] and f["--tensor-model-parallel-size"] == ["1"]
    assert f["--pipeline-model-parallel-size"] == ["4"] and f["--global-batch-size"] == ["32"]
    assert f["--micro-batch-size"] == ["1"] and f["--dataloader-type"] == ["single"]
    assert f["--seq-length"] == ["16384"] and f["--cp-comm-type"] == ["p2p"]
    for flag in ("--calculate-per-token-loss", "--use-varlen-dataset", "--mock-data", "--bf16", "--swiglu",
                 "--use-distributed-optimizer", "--untie-embeddings-and-output-weights"):
        assert flag in f, flag
    assert f["--normalization"] == ["RMSNorm"] and f["--position-embedding-type"] == ["rope"]
    assert f["--num-layers"] == ["40"] and f["--hidden-size"] == ["5120"] and f["--ffn-hidden-size"] == ["13824"]
    assert f["--recompute-granularity"] == ["full"] and f["--recompute-method"] == ["uniform"]
    assert json.loads(f["--varlen-mock-dataset-config-json"][0]) == {"mode": "file", "format": "thd", "path": "lengths.csv"}
    assert "--group-query-attention" not in f  # Llama-13B is MHA


def test_packing_is_dp_balanced_without_dynamic_cp():
    f = _flags(megatron_args(_cfg(policy__name="packing")))
    assert f["--sequence-packing-scheduler"] == ["dp_balanced"]
    assert "--dynamic-context-parallel" not in f and "--min-dynamic-context-parallel-size" not in f


def test_gqa_tp_and_recompute_mapping():
    cfg = RunConfig().with_updates({"model.name": "llama3-8b", "cluster.gpus": 64, "parallel.tp": 2, "parallel.pp": 4,
                                    "parallel.cp": 2, "parallel.recompute": "selective", "workload.gbs": 32,
                                    "parallel.max_tokens_per_rank": 65536})
    f = _flags(megatron_args(cfg))
    assert "--group-query-attention" in f and f["--num-query-groups"] == ["8"]
    assert "--sequence-parallel" in f and f["--recompute-granularity"] == ["selective"]
    assert "--recompute-method" not in f
    assert "--recompute-granularity" not in _flags(megatron_args(cfg.with_updates({"parallel.recompute": "none"})))


@pytest.mark.parametrize("upd, field", [
    # dynamic domain DP*CP = 3*2 = 6 is not a power of two
    ({"cluster.gpus": 24}, "workload.gbs"),  # 32 sequences over DP = 3
    ({"cluster.gpus": 24, "workload.gbs": 30}, "parallel.cp"),
    ({"parallel.min_cp": 3}, "parallel.min_cp"),
    ({"parallel.min_cp": 16}, "parallel.min_cp"),
    ({"parallel.max_tokens_per_rank": 1024}, "parallel.max_tokens_per_rank"),  # 1024*8 < 16384
    ({"parallel.pp": 3, "cluster.gpus": 24, "workload.gbs": 32}, "parallel.pp"),  # 40 layers
    ({"parallel.tp": 3, "parallel.pp": 1, "cluster.gpus": 6, "workload.gbs": 32}, "parallel.tp"),  # 40 heads
    ({"parallel.cp_comm": "a2a", "cluster.gpus": 512, "workload.gbs": 128}, "parallel.cp_comm"),  # 40 % 128
    ({"workload.max_len": None}, "workload.max_len"),
])
def test_dynamic_constraints_refuse_naming_the_field(upd, field):
    with pytest.raises(ConfigError) as ei:  # the config itself refuses some (min_cp not a power of two)
        check_megatron(_cfg(**{k.replace(".", "__"): v for k, v in upd.items()}), "dynamic")
    assert ei.value.field == field


def test_static_packing_needs_m_times_cp_at_least_max_len():
    cfg = _cfg(policy__name="packing", parallel__max_tokens_per_rank=4096)  # 4096*2 < 16384, 4096*8 >= 16384
    check_megatron(cfg.with_updates({"policy.name": "dynamic"}), "dynamic")
    with pytest.raises(ConfigError) as ei:
        check_megatron(cfg, "packing")
    assert ei.value.field == "parallel.max_tokens_per_rank" and "M×CP" in str(ei.value)
    # a2a with static CP only needs heads divisible by TP*CP
    check_megatron(_cfg(policy__name="packing", parallel__cp_comm="a2a"), "packing")


def test_policies_without_megatron_scheduler():
    with pytest.raises(ConfigError, match="dp_balanced.*--allow-approximate") as ei:
        resolve_policy(_cfg(policy__name="packing-balanced"))
    assert ei.value.field == "policy.name"
    assert resolve_policy(_cfg(policy__name="dynamic-solver"), allow_approximate=True) == ("dynamic", True)
    with pytest.raises(ConfigError, match="no Megatron equivalent"):
        resolve_policy(_cfg(policy__name="bound"), allow_approximate=True)
    assert set(SCHEDULERS.values()) == {"dp_balanced", "default_dynamic_cp"}


def test_export_writes_files_and_refuses_without_writing(tmp_path):
    cfg = _cfg(policy__name="dynamic", sim__iterations=2, sim__seed=3)
    out = tmp_path / "exp"
    exp = export_megatron(cfg, out, simulate=False)
    assert set(exp.files) == {"megatron_args.txt", "megatron_args.json", "lengths.csv", "varlen_config.json",
                              "launch.sh", "README.md"}
    lines = (out / "megatron_args.txt").read_text().splitlines()
    assert all(ln.startswith("--") for ln in lines) and "--dynamic-context-parallel" in lines
    toks = [t for ln in lines for t in shlex.split(ln)]
    assert toks == json.loads((out / "megatron_args.json").read_text())["args"]
    vc = json.loads(_flags(toks)["--varlen-mock-dataset-config-json"][0])
    assert vc["path"] == str((out / "lengths.csv").resolve()) and vc["mode"] == "file" and vc["format"] == "thd"
    assert json.loads((out / "varlen_config.json").read_text()) == {"mode": "file", "format": "thd", "path": "lengths.csv"}
    with open(out / "lengths.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["length"]
    lengths = np.array([int(r[0]) for r in rows[1:]])
    assert len(lengths) == 2 * 32 and lengths.min() >= 256 and lengths.max() <= 16384
    # seeded: the same config gives the same lengths, another seed others
    assert np.array_equal(export_megatron(cfg, tmp_path / "again", simulate=False).lengths, lengths)
    assert not np.array_equal(export_megatron(cfg.with_updates({"sim.seed": 4}), tmp_path / "s4", simulate=False).lengths,
                              lengths)
    assert "TEMPLATE" in (out / "launch.sh").read_text()
    # run the template with a stand-in torchrun that records its arguments
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text('#!/usr/bin/env python3\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n')
    (fake / "torchrun").chmod(0o755)
    moved = tmp_path / "moved"
    out.rename(moved)  # the template finds lengths.csv next to itself
    env = {"PATH": f"{fake}:/usr/bin:/bin", "MEGATRON_DIR": str(tmp_path)}
    r = subprocess.run(["bash", str(moved / "launch.sh"), "--extra-flag"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[0])
    assert got[:10] == ["--nproc_per_node", "8", "--nnodes", "4", "--node_rank", "0", "--master_addr", "localhost",
                        "--master_port", "6000"]
    assert got[10] == "pretrain_gpt.py" and got[-1] == "--extra-flag"
    i = got.index("--varlen-mock-dataset-config-json")
    assert json.loads(got[i + 1])["path"] == f"{moved}/lengths.csv"
    assert got[11:i] + got[i + 2:-1] == toks[:toks.index("--varlen-mock-dataset-config-json")] + \
        toks[toks.index("--varlen-mock-dataset-config-json") + 2:]
    out = moved
    assert not (out / "expected.json").exists()
    bad = tmp_path / "bad"
    with pytest.raises(ConfigError):
        export_megatron(cfg.with_updates({"parallel.min_cp": 3}), bad, simulate=False)
    assert not bad.exists()


def test_expected_matches_simulation_of_the_exported_lengths(tmp_path):
    from dcpsim.run.single import run_simulation

    cfg = _cfg(policy__name="dynamic")
    exp = export_megatron(cfg, tmp_path / "e")
    e = json.loads((tmp_path / "e" / "expected.json").read_text())
    ref = run_simulation(cfg, batches=[exp.lengths]).summary
    assert e["iteration_time_s"] == pytest.approx(ref["iteration_time_s"])
    assert e["tflops_per_gpu"] == pytest.approx(ref["tflops_per_gpu"]) and e["tflops_per_gpu"] > 0
    assert e["tokens_per_s"] == pytest.approx(exp.lengths.sum() / ref["iteration_time_s"], rel=0.02)
    assert e["config_hash"] == cfg.config_hash()
    assert "Predicted: iteration time" in (tmp_path / "e" / "README.md").read_text()


def test_cli_export(tmp_path, capsys):
    from dcpsim.cli import main

    run = tmp_path / "run.toml"
    run.write_text('[cluster]\ngpus = 32\n[parallel]\npp = 4\ncp = 2\nmax_tokens_per_rank = 8192\n'
                   '[workload]\ngbs = 32\nmax_len = 16384\n[policy]\nname = "dynamic-solver"\n')
    assert main(["export", "--config", str(run), "--out", str(tmp_path / "x"), "--no-simulate"]) == 2
    assert "--allow-approximate" in capsys.readouterr().err
    assert main(["export", "--config", str(run), "--out", str(tmp_path / "x"), "--no-simulate",
                 "--allow-approximate", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["scheduler"] == "default_dynamic_cp" and info["approximate"] is True
    assert any("closest" in n for n in info["notes"])


def test_cost_mechanism_fields_map_to_megatron_flags():
    cfg = RunConfig().with_updates({"model.name": "llama3-8b", "cluster.gpus": 64, "parallel.tp": 2, "parallel.pp": 4,
                                    "parallel.cp": 2, "workload.gbs": 32, "parallel.max_tokens_per_rank": 65536,
                                    "parallel.precision": "fp8", "parallel.first_stage_layers": 5,
                                    "parallel.last_stage_layers": 9, "sim.tp_comm_overlap": True,
                                    "sim.grad_bucket_params": 50_000_000})
    f = _flags(megatron_args(cfg))
    assert f["--fp8-format"] == ["hybrid"] and "--fp8-param-gather" in f
    assert f["--decoder-first-pipeline-num-layers"] == ["5"] and f["--decoder-last-pipeline-num-layers"] == ["9"]
    assert "--overlap-grad-reduce" in f and "--overlap-param-gather" in f and "--tp-comm-overlap" in f
    assert f["--ddp-bucket-size"] == ["50000000"]
    plain = _flags(megatron_args(_cfg(sim__overlap_param_gather=False)))
    assert "--overlap-param-gather" not in plain and "--fp8-format" not in plain and "--tp-comm-overlap" not in plain


def test_memory_settings_map_to_megatron_flags():
    """The gradient buffer dtype and the dropout the memory model priced are what the exported run uses."""
    f = _flags(megatron_args(_cfg(sim__grad_reduce_bytes_per_param=2)))
    assert "--grad-reduce-in-bf16" in f and f["--hidden-dropout"] == ["0.0"]
    assert "--grad-reduce-in-bf16" not in _flags(megatron_args(_cfg()))
    with pytest.raises(ConfigError, match="sim.grad_reduce_bytes_per_param"):
        check_megatron(_cfg(sim__grad_reduce_bytes_per_param=3), "dynamic")


def test_export_names_the_param_gather_launch_rule_it_timed(tmp_path):
    """The all-gather launch rule is a property of the Megatron-Core version (no flag): the export's README and
    launch.sh say which one the timing assumes; none where it makes no difference (pp 1, no overlap)."""
    from dcpsim.export.megatron import param_gather_rule_note

    new, old = _cfg(), _cfg(sim__param_gather_launch="step_start")
    assert "core_r0.9.0" in param_gather_rule_note(new) and "first_forward" in param_gather_rule_note(new)
    assert "core_r0.8.0" in param_gather_rule_note(old) and "step_start" in param_gather_rule_note(old)
    for note in (param_gather_rule_note(new), param_gather_rule_note(old)):  # read "core_r0.9.0 on's" before
        assert "core_r0.9.0 and later" in note and "on's" not in note and "0.9.0 on " not in note, note
    assert param_gather_rule_note(_cfg(sim__overlap_param_gather=False)) is None
    assert param_gather_rule_note(_cfg(parallel__pp=1, parallel__cp=8)) is None
    exp = export_megatron(old.with_updates({"policy.name": "dynamic"}), tmp_path / "x", simulate=False)
    assert "step_start" in (tmp_path / "x" / "README.md").read_text()
    assert "step_start" in (tmp_path / "x" / "launch.sh").read_text()
    assert any("core_r0.8.0" in n for n in exp.notes)


def test_export_says_when_megatron_pads_the_vocabulary(tmp_path):
    """llama-13b (vocab 32000) at TP 8: Megatron pads the output layer to 32768 (a multiple of 128 x TP), so
    `dcpsim simulate --megatron-args` on the exported arguments gave 21.80400 s against expected.json's 21.80371 s
    with no word why. The export now says so; at TP 1 (32000 = 250 x 128) it says nothing."""
    from dcpsim.export.megatron import build_export

    tp8 = build_export(_cfg(parallel__tp=8, parallel__pp=1, parallel__cp=1, cluster__gpus=32), simulate=False)
    assert any("--vocab-size 32000 to 32768" in n for n in tp8.notes), tp8.notes
    assert not any("pads --vocab-size" in n for n in build_export(_cfg(), simulate=False).notes)
    exp = export_megatron(_cfg(parallel__tp=8, parallel__pp=1, parallel__cp=1, cluster__gpus=32), tmp_path / "x",
                          simulate=False)
    assert "32768" in (tmp_path / "x" / "README.md").read_text() and any("32768" in n for n in exp.notes)


# ------------------------------------------------------------------ issue 19, items 1, 2 and 5
def test_every_config_field_has_a_route_into_the_export():
    """Each RunConfig field is listed in EXPORT_FIELDS (a flag, the lengths, the layout, a check or a note): a new
    field fails here until its export is decided."""
    from tests.test_fuzz import config_fields

    fields = {path for path, _ in config_fields()}
    assert fields - set(EXPORT_FIELDS) == set(), "fields with no route into the export"
    assert set(EXPORT_FIELDS) - fields == set(), "EXPORT_FIELDS names fields that do not exist"
    assert set(EXPORT_FIELDS.values()) <= {"flag", "data", "layout", "check", "note", "cluster", "model", "none"}


# a non-default value of every "flag" and "note" field: it must change the exported arguments or the notes
NON_DEFAULT = {
    "model.name": "llama3-8b", "parallel.tp": 2, "parallel.pp": 2, "parallel.cp": 4, "parallel.min_cp": 2,
    "parallel.max_tokens_per_rank": 16384, "parallel.cp_comm": "all_gather", "parallel.recompute": "selective",
    "parallel.vp": 2, "parallel.precision": "fp8", "parallel.first_stage_layers": 8,
    "parallel.last_stage_layers": 8, "parallel.cross_entropy": "unfused", "parallel.attention": "unfused", "parallel.rope_fusion": False, "workload.gbs": 64,
    "workload.max_len": 8192, "policy.name": "packing", "sim.overlap_grad_sync": False,
    "sim.overlap_param_gather": False, "sim.tp_comm_overlap": True, "sim.grad_bucket_params": 10**8,
    "sim.grad_reduce_bytes_per_param": 2, "sim.fp8_param_gather": False,
    "hardware.network_scale": 0.5, "hardware.pod_gpus": 16, "hardware.oversubscription": 2.0,
    "hardware.nvlink_domain_gpus": 16, "sim.noise_cv": 0.1, "sim.straggler_fraction": 0.1,
    "sim.straggler_slowdown": 2.0, "sim.degraded_link_scale": 0.5, "sim.param_gather_launch": "step_start",
    "sim.planning": "stall", "sim.dynamic_cp_padding": True, "sim.dynamic_cp_exchange": "async",
    "sim.cp_switch_s": 0.001, "sim.microbatch_overhead_s": 0.001, "sim.long_run_hours": 10.0,
    "sim.sampler_prefetch": 8, "sim.host_timeline": False,
    "step.log_interval": 1, "step.log_params_norm": True, "step.log_num_zeros_in_grad": True, "step.log_memory": True,
    "step.log_timers": True, "step.timing_log_level": 1, "step.deterministic": True, "step.cuda_graphs": "local",
    "step.clip_grad": 0.0, "step.transformer_impl": "local", "step.grad_accumulation_fusion": False,
    "step.manual_gc": True, "step.check_for_nan_in_loss_and_grad": False, "step.overlap_p2p_comm": False,
    "step.test_mode_qk_checks": True,
}
# fields that only matter together with others
WITH = {"parallel.precision": {"model.name": "llama3-8b"}, "sim.fp8_param_gather": {"model.name": "llama3-8b",
        "parallel.precision": "fp8"}, "parallel.first_stage_layers": {"parallel.last_stage_layers": 0},
        "sim.tp_comm_overlap": {"parallel.tp": 2}, "parallel.tp": {"parallel.cp": 1},
        "parallel.attention": {"parallel.cp": 1}, "sim.straggler_fraction": {"sim.straggler_slowdown": 2.0},
        "sim.straggler_slowdown": {"sim.straggler_fraction": 0.1}, "parallel.recompute": {"parallel.max_tokens_per_rank": 4096},
        "sim.sampler_prefetch": {"sim.planning": "sampler"}, "step.overlap_p2p_comm": {"parallel.vp": 2}}


@pytest.mark.parametrize("path", sorted(p for p, how in EXPORT_FIELDS.items() if how in ("flag", "note")))
def test_every_flag_and_note_field_changes_the_export(path):
    """Change one field the simulation uses: the exported arguments or the named notes change (or it is refused)."""
    from dcpsim.export.megatron import build_export

    base_upd = {"policy.name": "dynamic"} | WITH.get(path, {})
    if path in ("parallel.cp", "parallel.max_tokens_per_rank"):
        base_upd |= {"parallel.cp": 2}
    if path == "parallel.precision":
        base_upd |= {"cluster.gpus": 64, "parallel.pp": 4, "parallel.cp": 2, "parallel.max_tokens_per_rank": 16384}
    base = _cfg(**{k.replace(".", "__"): v for k, v in base_upd.items()})
    changed = base.with_updates({path: NON_DEFAULT[path]})
    assert changed != base
    a = build_export(base, simulate=False)
    try:
        b = build_export(changed, simulate=False)
    except ConfigError as exc:  # refused: it names a field
        assert exc.field
        return
    assert a.args != b.args or a.notes != b.notes, f"{path} changes the simulation but not the export"


def test_vp_is_exported_and_refused_where_megatron_cannot_run_it():
    # llama-13b: 40 layers, pp 4 -> 10 per stage; vp 2 -> 5 layers per chunk
    f = _flags(megatron_args(_cfg(parallel__vp=2)))
    assert f["--num-layers-per-virtual-pipeline-stage"] == ["5"]
    assert "--num-layers-per-virtual-pipeline-stage" not in _flags(megatron_args(_cfg()))
    with pytest.raises(ConfigError, match="parallel.vp"):  # vp 3 does not divide 10 layers per stage
        megatron_args(_cfg(parallel__vp=3))
    uneven = _cfg(parallel__vp=2, parallel__first_stage_layers=8, parallel__last_stage_layers=8)
    with pytest.raises(ConfigError, match="parallel.vp.*uneven"):
        megatron_args(uneven)


def test_simulate_refuses_vp_that_does_not_divide_the_layers_per_stage():
    from dcpsim.run.single import build_cost_model, run_simulation

    # pp 8 on 40 layers: 5 per stage; vp 3 cannot split them (the case)
    cfg = RunConfig().with_updates({"parallel.vp": 3})
    with pytest.raises(ConfigError, match=r"parallel.vp: got 3.*5 layers per stage"):
        run_simulation(cfg)
    assert build_cost_model(RunConfig().with_updates({"parallel.vp": 5})).stage_layers.tolist() == [5] * 8
    # uneven stages: every stage's count must split
    with pytest.raises(ConfigError, match="parallel.vp"):
        build_cost_model(RunConfig().with_updates({"parallel.pp": 4, "parallel.cp": 4, "parallel.vp": 2,
                                                   "parallel.first_stage_layers": 7, "parallel.last_stage_layers": 9}))
    with pytest.raises(ConfigError, match="parallel.vp"):  # no pipeline to interleave (was an IndexError)
        RunConfig().with_updates({"parallel.vp": 2, "parallel.pp": 1, "parallel.cp": 8})


def test_export_refuses_what_megatron_has_no_flag_for():
    with pytest.raises(ConfigError, match="policy.options.cap_delta"):
        megatron_args(_cfg(policy__name="dynamic", policy__options={"cap_delta": 0.2}))
    megatron_args(_cfg(policy__name="dynamic", policy__options={"cap_delta": 0.05}))
    fixed = RunConfig().with_updates({"workload.name": "fixed", "workload.seq_len": 4096, "policy.name": "packing"})
    with pytest.raises(ConfigError, match="workload.name.*fixed"):
        check_megatron(fixed, "packing")


def test_export_and_simulate_give_one_answer_for_one_seed(tmp_path):
    """Same config, same seed: export's expected.json is `simulate`'s summary (the same batches, same stream)."""
    from dcpsim.run.single import run_simulation, sample_batches

    cfg = _cfg(policy__name="dynamic", sim__iterations=2, sim__seed=7)
    exp = export_megatron(cfg, tmp_path / "e")
    e = json.loads((tmp_path / "e" / "expected.json").read_text())
    ref = run_simulation(cfg).summary
    for k in ("iteration_time_s", "tflops_per_gpu", "tokens_per_s"):
        assert e[k] == pytest.approx(ref[k], rel=1e-12), k
    got = sample_batches(cfg)
    assert np.array_equal(exp.lengths, np.concatenate(got)) and len(got) == 2
    assert not np.array_equal(np.concatenate(sample_batches(cfg.with_updates({"sim.seed": 8}))), exp.lengths)


def test_cli_export_and_simulate_print_the_same_throughput(tmp_path, capsys):
    from dcpsim.cli import main

    run = tmp_path / "run.toml"
    run.write_text('[cluster]\ngpus = 32\n[parallel]\npp = 4\ncp = 2\nmax_tokens_per_rank = 8192\n'
                   '[workload]\ngbs = 32\nmax_len = 16384\n[sim]\niterations = 2\nseed = 3\n')
    assert main(["simulate", str(run), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert main(["export", "--config", str(run), "--out", str(tmp_path / "x"), "--json"]) == 0
    exp = json.loads(capsys.readouterr().out)
    s = sim.get("summary", sim)
    assert exp["expected"]["tflops_per_gpu"] == pytest.approx(s["tflops_per_gpu"], rel=1e-12)


def test_gpus_per_node_must_divide_the_gpus(tmp_path):
    from dcpsim.export.megatron import launch_gpus_per_node

    cfg = _cfg(cluster__gpus=16, parallel__pp=2, policy__name="dynamic")
    with pytest.raises(ConfigError, match=r"--gpus-per-node: got 3.*divisor of cluster.gpus = 16"):
        export_megatron(cfg, tmp_path / "g", gpus_per_node=3, simulate=False)
    assert not (tmp_path / "g").exists() or not any((tmp_path / "g").iterdir())
    assert launch_gpus_per_node(cfg, 4) == 4 and launch_gpus_per_node(cfg) == 8
    assert launch_gpus_per_node(_cfg(cluster__gpus=4, parallel__pp=2, parallel__max_tokens_per_rank=16384)) == 4
    export_megatron(cfg, tmp_path / "ok", gpus_per_node=4, simulate=False)
    text = (tmp_path / "ok" / "launch.sh").read_text()
    assert 'NNODES="${NNODES:-4}"' in text and 'GPUS_PER_NODE="${GPUS_PER_NODE:-4}"' in text
