"""The Megatron-LM argument reader (dcpsim.export.reader): flags -> RunConfig, refusals by name, export round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from dcpsim.errors import ConfigError
from dcpsim.export.megatron import megatron_args, resolve_policy
from dcpsim.export.reader import (
    APPROXIMATED,
    IGNORABLE,
    MODELLED,
    megatron_config,
    parse_flags,
    read_config_yaml,
    read_megatron,
    roundtrip_differences,
    tokens_from_text,
)
from dcpsim.run.load import load_config

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "experiments" / "megatron_ci"

TINY = """--num-layers 12
--hidden-size 512
--num-attention-heads 8
--seq-length 1024
--max-position-embeddings 1024
--micro-batch-size 4
--global-batch-size 32
--tensor-model-parallel-size 1
--pipeline-model-parallel-size 4
--num-layers-per-virtual-pipeline-stage 1
--vocab-file ${DATA_PATH}/vocab.json
--merge-file ${DATA_PATH}/merges.txt
--data-path ${DATA_PATH}/my-gpt3_00_text_document
--bf16
--log-interval 1
--log-params-norm
--log-num-zeros-in-grad
--deterministic-mode
--attention-backend unfused
--save ${CHECKPOINT_SAVE_PATH}
--lr 0.00015
"""


def test_flag_lists_are_disjoint() -> None:
    assert not MODELLED & IGNORABLE
    assert not MODELLED & set(APPROXIMATED)
    assert not IGNORABLE & set(APPROXIMATED)


def test_tiny_gpt_argument_list(tmp_path: Path) -> None:
    f = tmp_path / "args.txt"
    f.write_text(TINY)
    run = read_megatron(f, gpus=8, gpu="h100-sxm")
    c = run.config
    assert (c.parallel.tp, c.parallel.pp, c.parallel.cp, c.parallel.vp, c.parallel.mbs, c.dp) == (1, 4, 1, 3, 4, 2)
    assert c.workload.name == "fixed" and c.workload.seq_len == 1024 and c.workload.gbs == 32
    spec = c.model.name
    assert spec["ffn_hidden"] == 2048 and not spec["gated_mlp"] and spec["tied_embeddings"]
    assert spec["vocab"] == 50304  # GPT-2 BPE 50,257 padded to a multiple of 128
    assert c.parallel.attention == "unfused" and c.parallel.cross_entropy == "unfused"
    assert c.step.log_interval == 1 and c.step.log_params_norm and c.step.deterministic
    assert not c.sim.overlap_grad_sync
    assert "--save" in run.ignored and "--lr" in run.ignored


@pytest.mark.parametrize("flag, value", [("--num-experts", "8"), ("--use-megatron-fsdp", None),
                                         ("--some-future-flag", "1")])
def test_unmodelled_flags_are_refused_by_name(flag: str, value: str | None) -> None:
    flags = parse_flags(tokens_from_text(TINY + flag + (f" {value}" if value else "")))
    with pytest.raises(ConfigError) as exc:
        megatron_config(flags, gpus=8, gpu="h100-sxm")
    assert exc.value.field == flag


@pytest.mark.parametrize("extra, field", [("--cp-comm-type a2a+p2p", "--cp-comm-type"),
                                          ("--recompute-granularity full --recompute-method block "
                                           "--recompute-num-layers 1", "--recompute-num-layers"),
                                          ("--fp8-format hybrid --fp8-recipe mxfp8", "--fp8-recipe"),
                                          ("--overlap-param-gather", "--overlap-param-gather")])
def test_unmodelled_values_are_refused_by_flag(extra: str, field: str) -> None:
    flags = parse_flags(tokens_from_text(TINY + extra))
    with pytest.raises(ConfigError) as exc:
        megatron_config(flags, gpus=8, gpu="h100-sxm")
    assert exc.value.field == field


def test_model_config_yaml(tmp_path: Path) -> None:
    f = tmp_path / "model_config.yaml"
    body = "\n".join("  " + line.split(" ", 1)[0] + ": " + (line.split(" ", 1)[1] if " " in line else "true")
                     for line in TINY.strip().splitlines())
    f.write_text("ENV_VARS:\n  NVTE_ALLOW_NONDETERMINISTIC_ALGO: 0\nMODEL_ARGS:\n" + body + "\nTEST_TYPE: regular\n")
    flags, env = read_config_yaml(f)
    assert flags["--log-params-norm"] is True and flags["--num-layers"] == "12" and env["NVTE_ALLOW_NONDETERMINISTIC_ALGO"] == "0"
    run = read_megatron(f, gpus=8, gpu="h100-sxm")
    assert run.config.parallel.vp == 3


def test_every_ci_flag_file_is_read_or_refused_by_name() -> None:
    """Each shipped CI argument list either reads or stops at a named flag (never a crash, never silence)."""
    files = sorted((CI / "flags").glob("gpt__*.args"))
    assert len(files) > 100
    read = 0
    for f in files:
        try:
            read_megatron(f, gpus=8, gpu="h100-sxm")
            read += 1
        except ConfigError as exc:
            assert str(exc.field).startswith("--") or exc.field in ("cluster.gpus", "workload.gbs"), (f, exc)
    assert read > 0.7 * len(files)


def _examples() -> list[Path]:
    out = []
    for f in sorted([*ROOT.glob("examples/*.toml"), *ROOT.glob("experiments/**/*.toml")]):
        try:
            load_config(f)
        except ConfigError:
            continue  # a sweep, suite or experiment file, not a run
        out.append(f)
    return out


VARIANTS = [{}, {"parallel.vp": 2}, {"parallel.precision": "fp8", "hardware.gpu": "h100-sxm"},
            {"parallel.recompute": "selective", "parallel.cross_entropy": "unfused", "sim.overlap_grad_sync": False,
             "parallel.rope_fusion": False},
            {"policy.name": "packing", "parallel.cp_comm": "all_gather", "sim.grad_reduce_bytes_per_param": 2},
            {"parallel.tp": 2, "cluster.gpus": 128, "sim.tp_comm_overlap": True, "sim.grad_bucket_params": 50_000_000},
            {"step.log_interval": 1, "step.log_params_norm": True, "step.log_num_zeros_in_grad": True,
             "step.log_memory": True, "step.log_timers": True, "step.timing_log_level": 2, "step.deterministic": True,
             "step.cuda_graphs": "transformer_engine", "step.clip_grad": 0.5, "step.grad_accumulation_fusion": False,
             "step.manual_gc": True, "step.check_for_nan_in_loss_and_grad": False, "step.overlap_p2p_comm": False,
             "step.attention_mask_in_dataloader": False}]


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_export_round_trip(path: Path, variant: int) -> None:
    """export -> read back -> the same run, over every shipped example run (and variants of its settings)."""
    cfg = load_config(path)
    upd = dict(VARIANTS[variant])
    if "parallel.vp" in upd:  # the smallest interleaving the example's layers per stage allow
        from dcpsim.model import get_model

        per = get_model(cfg.model.name).n_layers // cfg.parallel.pp
        divisors = [d for d in range(2, per + 1) if per % d == 0]
        if cfg.parallel.pp == 1 or not divisors:
            pytest.skip(f"{per} layer(s) per stage: no interleaved pipeline to export")
        upd["parallel.vp"] = divisors[0]
    if upd:
        cfg = cfg.with_updates(upd)
    policy, _ = resolve_policy(cfg, allow_approximate=True)
    args = megatron_args(cfg, policy=policy)
    back = megatron_config(parse_flags(args), gpus=cfg.cluster.gpus, gpu=cfg.hardware.gpu).config
    assert roundtrip_differences(cfg, back) == []


def test_round_trip_check_can_fail() -> None:
    cfg = load_config(ROOT / "examples" / "simulate_default.toml")
    args = megatron_args(cfg, policy="dynamic")
    i = args.index("--pipeline-model-parallel-size")
    args[i + 1] = "4"
    back = megatron_config(parse_flags(args), gpus=cfg.cluster.gpus, gpu=cfg.hardware.gpu).config
    assert "parallel.pp: 8 -> 4" in roundtrip_differences(cfg, back)


def test_simulate_megatron_args_cli(tmp_path: Path, capsys) -> None:
    from dcpsim.cli import main

    f = tmp_path / "args.txt"
    f.write_text(TINY)
    assert main(["simulate", "--megatron-args", str(f), "--gpus", "8", "--json"]) == 0
    assert main(["simulate", "--megatron-args", str(f)]) == 2  # --gpus is required
    f.write_text(TINY + "--num-experts 8\n")
    assert main(["simulate", "--megatron-args", str(f), "--gpus", "8"]) == 2
    assert "--num-experts" in capsys.readouterr().err


@pytest.mark.parametrize("flag,value,field", [("--gpu", "h200-sxm", "hardware.gpu"), ("--gpus", "128", "cluster.gpus")])
def test_simulate_refuses_megatron_only_flags_with_a_run_file(capsys, flag, value, field) -> None:
    """--gpu / --gpus belong to --megatron-args/--megatron-config: with a run file they were dropped silently (the
    file's h100-sxm / 64 GPUs simulated); now refused, naming the --set that overrides the file."""
    from dcpsim.cli import main

    assert main(["simulate", str(ROOT / "examples" / "simulate_default.toml"), flag, value]) == 2
    err = capsys.readouterr().err
    assert flag in err and value in err and f"--set {field}=" in err


def test_simulating_exported_arguments_reproduces_the_export(tmp_path: Path, capsys) -> None:
    """dcpsim export, then dcpsim simulate --megatron-args on its megatron_args.txt: expected.json's step time."""
    import json

    from dcpsim.cli import main
    from dcpsim.export import export_megatron
    from dcpsim.hardware.defaults import resolve_gpu

    gpu = resolve_gpu("h100-sxm")  # the profile `simulate` reads for h100-sxm (its calibrated twin where shipped)
    cfg = load_config(ROOT / "examples" / "simulate_default.toml").with_updates(
        {"cluster.gpus": 16, "parallel.pp": 4, "model.name": "llama2-7b", "workload.gbs": 64, "sim.iterations": 2,
         "hardware.gpu": gpu})
    out = tmp_path / "exp"
    exp = export_megatron(cfg, out)
    assert main(["simulate", "--megatron-args", str(out / "megatron_args.txt"), "--gpus", "16", "--gpu", gpu,
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["summary"]["iteration_time_s"]
    assert got == pytest.approx(exp.expected["iteration_time_s"], rel=1e-12)


def test_a_launcher_command_line_is_refused_as_the_launchers_flags(tmp_path: Path) -> None:
    """`dcpsim simulate --megatron-args launch.sh` (dcpsim export's own template, or `torchrun --nproc_per_node 8
    pretrain_gpt.py --num-layers ...`) was refused as "--nproc_per_node: ... expected a flag dcpsim can model",
    as if torchrun's flag were Megatron's: now the launcher's flags are named as such. A bare program name before
    the arguments still reads."""
    f = tmp_path / "run.sh"
    f.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n" + TINY)
    with pytest.raises(ConfigError, match="launcher.*pretrain_gpt.py|pretrain_gpt.py.*launcher"):
        read_megatron(f, gpus=8, gpu="h100-sxm")
    f.write_text("python pretrain_gpt.py \\\n" + TINY)
    assert tokens_from_text(f.read_text())[0] == "--num-layers"


@pytest.mark.parametrize("text,shown", [("MODEL_ARGS: [1, 2]\n", "got [1, 2]"),
                                        ("ENV_VARS: {}\n", "got 'no MODEL_ARGS key'"), ("", "got 'no MODEL_ARGS key'")])
def test_a_model_config_without_a_flag_table_says_what_it_holds(tmp_path: Path, text, shown) -> None:
    """A model_config.yaml whose MODEL_ARGS is a list (or missing) was refused as "MODEL_ARGS: got None": the
    message now shows what the file holds."""
    f = tmp_path / "model_config.yaml"
    f.write_text(text)
    import re

    with pytest.raises(ConfigError, match=re.escape(f"MODEL_ARGS: {shown}")):
        read_config_yaml(f)
