"""Read a Megatron-LM run (its argument list, or a functional test's ``model_config.yaml``) as a dcpsim run.

::

    from dcpsim.export.reader import read_megatron
    run = read_megatron("megatron_args.txt", gpus=8, gpu="h100-sxm")
    run.config          # a validated RunConfig: model, layout, batch, precision, overlap, step settings
    run.notes           # what was assumed (each approximation in words)
    run.ignored         # flags known not to change the simulated step (paths, logging targets, lr schedule ...)

Every flag falls in one of three lists, all stated here:

* **modelled** (:data:`MODELLED`): mapped to a RunConfig field (model dimensions, TP/PP/CP/VP, batch,
  recompute, precision, attention and loss kernels, gradient/parameter overlap, the ``[step]`` settings);
* **accepted with a stated approximation** (:data:`APPROXIMATED`): the flag changes the real run in a way the
  time model does not price (a bias add, a LayerNorm in place of RMSNorm, an unfused kernel ...); the run is
  simulated and the approximation is listed in ``notes``;
* **known not to change the step** (:data:`IGNORABLE`): checkpoint and data paths, the learning-rate
  schedule, tokenizer files, evaluation every N > train-iters steps, TensorBoard/W&B targets ...

Any other flag (and any value of a modelled flag that the time model cannot express) is refused with a
:class:`~dcpsim.errors.ConfigError` naming the flag: a mixture-of-experts run stops at ``--num-experts``, an
FSDP run at ``--use-megatron-fsdp``. Nothing is dropped silently.

The argument list is what ``pretrain_gpt.py`` receives: ``--flag [value ...]`` tokens, one flag per line in
a file (``dcpsim export``'s ``megatron_args.txt``; ``#`` comments and a trailing ``\\`` allowed) or a
``model_config.yaml`` with ``MODEL_ARGS`` (a ``true`` value is the bare flag, as Megatron's CI launcher
passes it). GPU count and hardware profile are not Megatron arguments: the caller gives them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.export.flags import (  # noqa: F401  (re-exported: the reader's public names stay importable from here)
    APPROXIMATED,
    IGNORABLE,
    MEGATRON_VOCAB_DIVISOR,
    MODELLED,
    REFUSED_WHY,
    _bool,
    _choice,
    _float,
    _int,
    _one,
    _refusal,
    check_known,
    parse_flags,
    read_args_file,
    read_config_yaml,
    tokens_from_text,
)

GPT2_BPE_VOCAB = 50257  # GPT-2 BPE vocabulary (the --vocab-file/--merge-file tokenizer of Megatron's GPT tests)
FFN_FACTOR = 4  # Megatron's default --ffn-hidden-size = 4 x hidden (not gated)

@dataclass
class MegatronRun:
    """A Megatron-LM run read as a dcpsim configuration."""

    config: Any  # RunConfig
    flags: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    batches: list[Any] | None = None  # the lengths file's global batches in file order (varlen runs), else None


# ------------------------------------------------------------------ mapping
def _model(flags: dict, tp: int, notes: list[str]) -> dict[str, Any]:
    layers = _int(flags, "--num-layers")
    hidden = _int(flags, "--hidden-size")
    heads = _int(flags, "--num-attention-heads")
    for name, v in (("--num-layers", layers), ("--hidden-size", hidden), ("--num-attention-heads", heads)):
        if v is None:
            raise ConfigError(name, None, "the model dimension (required)")
    gated = _bool(flags, "--swiglu")
    ffn = _int(flags, "--ffn-hidden-size")
    if ffn is None:
        ffn = FFN_FACTOR * hidden if not gated else int(4 * hidden * 2 / 3 / 64 + 0.999999) * 64
        notes.append(f"--ffn-hidden-size not given: Megatron's default {ffn}"
                     + (" (SwiGLU: 8h/3 rounded up to a multiple of 64)" if gated else " (4 x hidden)"))
    kv = _int(flags, "--num-query-groups") if _bool(flags, "--group-query-attention") else None
    head_dim = _int(flags, "--kv-channels")
    vocab, vnote = _vocab(flags, tp)
    notes.append(vnote)
    spec: dict[str, Any] = {
        "name": "megatron-args", "n_layers": layers, "hidden": hidden, "n_heads": heads, "ffn_hidden": ffn,
        "vocab": vocab, "gated_mlp": gated, "tied_embeddings": not _bool(flags, "--untie-embeddings-and-output-weights"),
        "hidden_dropout": _float(flags, "--hidden-dropout", 0.1),
        "qk_layernorm": _bool(flags, "--qk-layernorm"),
        "source": "Megatron-LM arguments (dcpsim.export.reader)",
    }
    if kv is not None:
        spec["n_kv_heads"] = kv
    if head_dim is not None:
        spec["head_dim"] = head_dim
    if spec["hidden_dropout"] >= 1:
        raise ConfigError("--hidden-dropout", spec["hidden_dropout"], "a probability < 1")
    return spec


def _vocab(flags: dict, tp: int) -> tuple[int, str]:
    """Megatron's padded vocabulary: the tokenizer's size rounded up to a multiple of divisor x TP."""
    div = _int(flags, "--make-vocab-size-divisible-by", MEGATRON_VOCAB_DIVISOR)
    size = _int(flags, "--vocab-size")
    tok = _one(flags, "--tokenizer-type")
    if size is not None:
        src = f"--vocab-size {size}"
    elif "--vocab-file" in flags and tok in (None, "GPT2BPETokenizer"):
        size, src = GPT2_BPE_VOCAB, f"GPT-2 BPE --vocab-file ({GPT2_BPE_VOCAB} tokens)"
    else:
        raise ConfigError("--vocab-size", None, "a vocabulary size (or a GPT-2 BPE --vocab-file); "
                          f"tokenizer {tok!r} has no size dcpsim knows")
    q = div * tp
    padded = int(math.ceil(size / q) * q)
    return padded, f"vocabulary {src} padded to {padded} (multiple of {div} x TP {tp}), as Megatron does"


def _recompute(flags: dict, layers_per_stage: int, notes: list[str]) -> str:
    gran = _choice(flags, "--recompute-granularity", {"full": "full", "selective": "selective"}, "none")
    if gran != "full":
        if "--recompute-method" in flags or "--recompute-num-layers" in flags:
            raise ConfigError("--recompute-method", flags.get("--recompute-method"),
                              "no --recompute-method/--recompute-num-layers without --recompute-granularity full")
        return gran
    method = _choice(flags, "--recompute-method", {"uniform": "uniform", "block": "block"}, None)
    n = _int(flags, "--recompute-num-layers", 1)
    if method is None:
        raise ConfigError("--recompute-method", None, "uniform or block with --recompute-granularity full")
    if method == "block" and n < layers_per_stage:
        raise ConfigError("--recompute-num-layers", n, f"all {layers_per_stage} layers of a stage with --recompute-method "
                          "block (recomputing part of a stage is not modelled)")
    if method == "uniform" and n > 1:
        notes.append(f"--recompute-method uniform --recompute-num-layers {n}: every layer recomputed (as with 1)")
    return "full"


def _precision(flags: dict, notes: list[str]) -> str:
    fmt = _choice(flags, "--fp8-format", {"hybrid": "fp8", "e4m3": "fp8"}, None)
    if fmt:
        recipe = _one(flags, "--fp8-recipe") or "delayed"
        if recipe not in ("delayed", "tensorwise"):
            raise ConfigError("--fp8-recipe", recipe, "delayed or tensorwise (per-tensor scaling; block/MX scaling is "
                              "not modelled)")
        notes.append(f"FP8 ({flags['--fp8-format']}, {recipe} scaling): GEMMs at the profile's FP8 rate")
        return "fp8"
    if "--fp8-recipe" in flags or "--fp8-param-gather" in flags:
        raise ConfigError("--fp8-recipe" if "--fp8-recipe" in flags else "--fp8-param-gather", True,
                          "only with --fp8-format")
    if _bool(flags, "--fp16"):
        notes.append("--fp16: FP16 mixed precision at the BF16 rate (same tensor-core peak)")
    elif not _bool(flags, "--bf16"):
        raise ConfigError("--bf16", None, "--bf16, --fp16 or --fp8-format (FP32 training is not modelled)")
    return "bf16"


def _workload(flags: dict, seq: int, gbs: int, notes: list[str]) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The [workload] table, the policy name, and [parallel] extras of a variable-length run."""
    if _bool(flags, "--use-varlen-dataset") or "--sequence-packing-scheduler" in flags:
        raw = _one(flags, "--varlen-mock-dataset-config-json")
        if raw is None:
            raise ConfigError("--varlen-mock-dataset-config-json", None, "the varlen dataset's lengths (file mode)")
        try:
            vc = json.loads(raw)
        except json.JSONDecodeError:
            raise ConfigError("--varlen-mock-dataset-config-json", raw, "JSON") from None
        if not isinstance(vc, dict) or vc.get("mode") != "file" or not vc.get("path"):
            raise ConfigError("--varlen-mock-dataset-config-json", raw,
                              '{"mode": "file", "path": LENGTHS.csv} (a distribution mode is not read yet)')
        sched = _choice(flags, "--sequence-packing-scheduler",
                        {"dp_balanced": "packing", "default_dynamic_cp": "dynamic"}, "packing")
        if _bool(flags, "--dynamic-context-parallel") != (sched == "dynamic"):
            raise ConfigError("--dynamic-context-parallel", flags.get("--dynamic-context-parallel"),
                              "set exactly when --sequence-packing-scheduler is default_dynamic_cp")
        extra: dict[str, Any] = {"max_tokens_per_rank": _int(flags, "--max-seqlen-per-dp-cp-rank")}
        if extra["max_tokens_per_rank"] is None:
            raise ConfigError("--max-seqlen-per-dp-cp-rank", None, "tokens per rank per microbatch (varlen data)")
        if sched == "dynamic":
            extra["min_cp"] = _int(flags, "--min-dynamic-context-parallel-size", 1)
        if _int(flags, "--micro-batch-size", 1) != 1:
            raise ConfigError("--micro-batch-size", flags["--micro-batch-size"], "1 with variable-length packing")
        notes.append(f"lengths from {vc['path']}: its global batches of {gbs} in file order, one per simulated "
                     "iteration, as the export simulated them (resampled from the file if it does not split into them)")
        return {"name": str(vc["path"]), "gbs": gbs, "max_len": seq, "min_len": None}, sched, extra
    for name in ("--max-seqlen-per-dp-cp-rank", "--dynamic-context-parallel", "--min-dynamic-context-parallel-size",
                 "--varlen-mock-dataset-config-json"):
        if name in flags:
            raise ConfigError(name, flags[name], "only with --use-varlen-dataset (variable-length packing)")
    if "--data-path" not in flags and not _bool(flags, "--mock-data"):
        raise ConfigError("--data-path", None, "a dataset (--data-path) or --mock-data")
    notes.append(f"data: fixed windows of {seq} tokens (pre-training on concatenated documents, full causal mask)")
    return {"name": "fixed", "seq_len": seq, "gbs": gbs}, "packing", {}


def _step(flags: dict) -> dict[str, Any]:
    return {
        "log_interval": _int(flags, "--log-interval", 100),
        "log_params_norm": _bool(flags, "--log-params-norm"),
        "log_num_zeros_in_grad": _bool(flags, "--log-num-zeros-in-grad"),
        "log_memory": _bool(flags, "--log-memory-to-tensorboard"),
        "log_timers": _bool(flags, "--log-timers-to-tensorboard"),
        "timing_log_level": _choice(flags, "--timing-log-level", {"0": 0, "1": 1, "2": 2}, 0),
        "deterministic": _bool(flags, "--deterministic-mode"),
        "cuda_graphs": _choice(flags, "--cuda-graph-impl", {"none": "none", "local": "local",
                                                            "transformer_engine": "transformer_engine"}, "none"),
        "clip_grad": _float(flags, "--clip-grad", 1.0),
        "transformer_impl": _choice(flags, "--transformer-impl", {"transformer_engine": "transformer_engine",
                                                                  "local": "local"}, "transformer_engine"),
        "grad_accumulation_fusion": not _bool(flags, "--no-gradient-accumulation-fusion"),
        "manual_gc": _bool(flags, "--manual-gc"),
        "check_for_nan_in_loss_and_grad": not _bool(flags, "--no-check-for-nan-in-loss-and-grad"),
        "overlap_p2p_comm": not _bool(flags, "--no-overlap-p2p-communication"),
        # run_realtime_tests (megatron/core/transformer/attention.py at d98e8a64) returns at once without q/k norms
        "test_mode_qk_checks": _bool(flags, "--test-mode") and _bool(flags, "--qk-layernorm"),
        # pretrain_gpt.py get_batch / core.utils.get_batch_on_this_tp_rank at d98e8a64 (dcpsim.cost.host)
        "attention_mask_in_dataloader": not _bool(flags, "--no-create-attention-mask-in-dataloader"),
    }


def _layout(flags: dict, layers: int, notes: list[str]) -> tuple[int, int, int, int]:
    """TP, PP, CP and the virtual-pipeline chunk count (vp = layers / (pp x layers per virtual stage))."""
    tp = _int(flags, "--tensor-model-parallel-size", 1)
    pp = _int(flags, "--pipeline-model-parallel-size", 1)
    cp = _int(flags, "--context-parallel-size", 1)
    ep = _int(flags, "--expert-model-parallel-size", 1)
    etp = _int(flags, "--expert-tensor-parallel-size")
    if ep != 1 or (etp is not None and etp != tp):  # --num-experts is refused first: a dense model has no experts
        notes.append(f"expert parallelism (EP {ep}, expert TP {etp or tp}) has no effect on a dense model")
    vp = 1
    if "--num-layers-per-virtual-pipeline-stage" in flags or "--num-virtual-stages-per-pipeline-rank" in flags:
        if pp == 1:
            raise ConfigError("--num-layers-per-virtual-pipeline-stage", flags.get("--num-layers-per-virtual-pipeline-stage"),
                              "only with --pipeline-model-parallel-size > 1")
        per = _int(flags, "--num-layers-per-virtual-pipeline-stage")
        vp = _int(flags, "--num-virtual-stages-per-pipeline-rank") or 1
        if per is not None:
            if layers % (pp * per):
                raise ConfigError("--num-layers-per-virtual-pipeline-stage", per,
                                  f"a divisor of layers / pp = {layers}/{pp}")
            vp = layers // (pp * per)
    return tp, pp, cp, vp


def _attention(flags: dict, notes: list[str]) -> str:
    attention = _choice(flags, "--attention-backend", {"flash": "flash", "fused": "flash", "auto": "flash",
                                                       "unfused": "unfused", "local": "unfused"}, "flash")
    if _one(flags, "--transformer-impl") == "local" and attention == "flash":
        attention = "unfused"
        notes.append("--transformer-impl local: Megatron's own attention (unfused: GEMMs + softmax)")
    if attention == "flash" and _one(flags, "--attention-backend") == "fused":
        notes.append("--attention-backend fused (cuDNN) priced as the profile's fused attention")
    return attention


def _rope_fusion(flags: dict, notes: list[str]) -> bool:
    """Megatron's fused RoPE (default) unless ``--no-rope-fusion`` with RoPE position embeddings (Megatron's default
    ``--position-embedding-type`` is ``learned_absolute``, which has no RoPE kernels to fuse)."""
    if not _bool(flags, "--no-rope-fusion"):
        return True
    rope = _one(flags, "--position-embedding-type") in ("rope", "mrope") or _bool(flags, "--use-rotary-position-embeddings")
    if not rope:
        notes.append("--no-rope-fusion without RoPE position embeddings: no effect")
        return True
    notes.append("--no-rope-fusion: Megatron-Core's unfused RoPE kernels (dcpsim.cost.fixed.KERNELS_ROPE_UNFUSED)")
    return False


def _sim(flags: dict, precision: str) -> dict[str, Any]:
    overlap = _bool(flags, "--overlap-grad-reduce")
    if _bool(flags, "--overlap-param-gather") and not overlap:
        raise ConfigError("--overlap-param-gather", True, "only with --overlap-grad-reduce (Megatron's rule)")
    return {
        "overlap_grad_sync": overlap, "overlap_param_gather": _bool(flags, "--overlap-param-gather"),
        "tp_comm_overlap": _bool(flags, "--tp-comm-overlap"),
        "grad_bucket_params": _int(flags, "--ddp-bucket-size", 0, lo=0),
        "grad_reduce_bytes_per_param": 2 if _bool(flags, "--grad-reduce-in-bf16") else 4,
        "fp8_param_gather": _bool(flags, "--fp8-param-gather") if precision == "fp8" else True,
        "seed": _int(flags, "--seed", 1234, lo=0),
    }


def _general_notes(flags: dict, tp: int, notes: list[str]) -> None:
    train_iters = _int(flags, "--train-iters")
    eval_interval = _int(flags, "--eval-interval", 1000)
    if train_iters is not None and eval_interval <= train_iters:
        notes.append(f"evaluation every {eval_interval} steps (of {train_iters}) is not simulated: compare steps "
                     "without evaluation")
    if not _bool(flags, "--use-distributed-optimizer"):
        notes.append("no --use-distributed-optimizer: gradients all-reduced (priced as reduce-scatter + all-gather, "
                     "the same bytes); optimizer states not sharded")
    if tp > 1 and not _bool(flags, "--sequence-parallel"):
        notes.append("TP without --sequence-parallel: TP all-reduces priced as reduce-scatter + all-gather (same bytes)")
    for name, why in APPROXIMATED.items():
        if name in flags and why:
            notes.append(f"{name}: {why}")


def _sizes(flags: dict) -> tuple[int, int]:
    seq = _int(flags, "--seq-length")
    if seq is None:
        raise ConfigError("--seq-length", None, "tokens per sequence (required)")
    mpe = _int(flags, "--max-position-embeddings")
    if mpe is not None and mpe < seq:
        raise ConfigError("--max-position-embeddings", mpe, f">= --seq-length {seq}")
    gbs = _int(flags, "--global-batch-size")
    if gbs is None:
        raise ConfigError("--global-batch-size", None, "sequences per step (required)")
    return seq, gbs


def megatron_dict(flags: dict[str, Any], *, gpus: int, gpu: str, notes: list[str] | None = None) -> dict[str, Any]:
    """The RunConfig table of a Megatron run (flags parsed by :func:`parse_flags`), checked flag by flag."""
    notes = notes if notes is not None else []
    check_known(flags)
    tp = _int(flags, "--tensor-model-parallel-size", 1)
    model = _model(flags, tp, notes)
    tp, pp, cp, vp = _layout(flags, model["n_layers"], notes)
    seq, gbs = _sizes(flags)
    workload, policy, extra = _workload(flags, seq, gbs, notes)
    precision = _precision(flags, notes)
    parallel: dict[str, Any] = {
        "tp": tp, "pp": pp, "cp": cp, "vp": vp, "mbs": _int(flags, "--micro-batch-size", 1),
        "cp_comm": _choice(flags, "--cp-comm-type", {"p2p": "p2p", "all_gather": "all_gather", "a2a": "a2a"}, "p2p"),
        "recompute": _recompute(flags, max(1, model["n_layers"] // pp), notes), "precision": precision,
        "cross_entropy": "fused" if _bool(flags, "--cross-entropy-loss-fusion") else "unfused",
        "attention": _attention(flags, notes),
        "rope_fusion": _rope_fusion(flags, notes),
        "first_stage_layers": _int(flags, "--decoder-first-pipeline-num-layers", 0, lo=0),
        "last_stage_layers": _int(flags, "--decoder-last-pipeline-num-layers", 0, lo=0),
        **extra,
    }
    if workload["name"] != "fixed":
        parallel.pop("mbs")
    _general_notes(flags, tp, notes)
    return {
        "model": {"name": model}, "hardware": {"gpu": gpu}, "cluster": {"gpus": gpus}, "parallel": parallel,
        "workload": workload, "policy": {"name": policy}, "sim": _sim(flags, precision), "step": _step(flags),
    }


def megatron_config(flags: dict[str, Any], *, gpus: int, gpu: str, env: dict[str, str] | None = None,
                    where: str = "Megatron arguments") -> MegatronRun:
    """A validated :class:`MegatronRun` from parsed flags; ConfigError names the flag at fault."""
    from dcpsim.run.load import config_from_dict

    notes: list[str] = []
    d = megatron_dict(flags, gpus=gpus, gpu=gpu, notes=notes)
    env = dict(env or {})
    if env.get("NVTE_ALLOW_NONDETERMINISTIC_ALGO") == "0" and not d["step"]["deterministic"]:
        notes.append("NVTE_ALLOW_NONDETERMINISTIC_ALGO=0: deterministic Transformer Engine kernels")
    cfg = config_from_dict(d, where=where)
    batches = _file_batches(cfg)
    if batches:
        cfg = cfg.with_updates({"sim.iterations": len(batches)})
    return MegatronRun(cfg, flags, notes, check_known(flags), env, batches)


def _file_batches(cfg) -> list[Any] | None:
    """A varlen run's lengths file cut into global batches in file order (None: not a file, or not whole batches)."""
    import numpy as np

    path = Path(str(cfg.workload.name))
    if cfg.is_fixed or path.suffix != ".csv" or not path.is_file():
        return None
    try:
        lengths = np.loadtxt(path, dtype=np.int64, skiprows=1, ndmin=1)
    except ValueError:
        return None
    gbs = cfg.workload.gbs
    if len(lengths) == 0 or len(lengths) % gbs or len(lengths) // gbs > 10_000:
        return None
    return list(np.split(lengths, len(lengths) // gbs))


def read_megatron(path: str | Path, *, gpus: int, gpu: str) -> MegatronRun:
    """Read an argument-list file or a ``model_config.yaml`` (by suffix ``.yaml``/``.yml``) as a run."""
    p = Path(path)
    if p.suffix in (".yaml", ".yml"):
        flags, env = read_config_yaml(p)
    else:
        flags, env = read_args_file(p), {}
    return megatron_config(flags, gpus=gpus, gpu=gpu, env=env, where=str(p))


# ------------------------------------------------------------------ round trip
ROUNDTRIP_NOT_CARRIED = {
    "hardware, cluster.gpus": "not Megatron arguments (the launcher's node list and the machine): given to the reader",
    "workload.name, min_len, clip": "the export writes one sampled batch of lengths (lengths.csv), read back as a file",
    "sim.* other than overlap, buckets, gradient bytes, FP8 gather, seed": "simulation settings with no Megatron flag",
    "parallel.min_cp under static packing": "no meaning for static CP (the export notes it)",
    "step.attention_mask_in_dataloader of a packed run": "packed (variable-length) batches carry no s x s mask: the "
                                                          "export sets --no-create-attention-mask-in-dataloader and the "
                                                          "time model reads the setting for fixed-length runs only",
}
"""What an export cannot carry (and :func:`roundtrip_differences` does not compare), with the reason."""


def roundtrip_differences(original, readback) -> list[str]:
    """Fields Megatron's flags carry that differ between ``original`` and its exported-then-read ``readback``.

    Compared: every model dimension (resolved spec), every ``[parallel]`` field, the global batch and sequence
    length, the policy (as Megatron's scheduler), and the ``[sim]`` fields that have a flag. Empty = same run.
    """
    from dcpsim.export.megatron import resolve_policy
    from dcpsim.model import get_model

    diffs: list[str] = []

    def cmp(name: str, a: Any, b: Any) -> None:
        if a != b:
            diffs.append(f"{name}: {a!r} -> {b!r}")

    ma, mb = get_model(original.model.name), get_model(readback.model.name)
    for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden", "vocab", "gated_mlp",
              "tied_embeddings", "hidden_dropout"):
        cmp(f"model.{f}", getattr(ma, f), getattr(mb, f))
    # q/k norms as priced: the model's, or implied by --test-mode's checks (CostSettings.qk_norms)
    cmp("model.qk_layernorm", ma.qk_layernorm or original.step.test_mode_qk_checks, mb.qk_layernorm)
    policy, _ = resolve_policy(original, allow_approximate=True)
    cmp("policy.name", policy, readback.policy.name)
    pa, pb = original.parallel.model_dump(), readback.parallel.model_dump()
    for f in pa:
        if f == "min_cp" and policy != "dynamic":
            continue
        if f == "max_tokens_per_rank":
            cmp("parallel.max_tokens_per_rank", original.max_tokens_per_rank, readback.max_tokens_per_rank)
            continue
        cmp(f"parallel.{f}", pa[f], pb[f])
    cmp("workload.gbs", original.workload.gbs, readback.workload.gbs)
    cmp("workload.max_len", original.workload.max_len, readback.workload.max_len)
    sa, sb = original.sim, readback.sim
    cmp("sim.overlap_grad_sync", sa.overlap_grad_sync, sb.overlap_grad_sync)
    if sa.overlap_grad_sync:
        cmp("sim.overlap_param_gather", sa.overlap_param_gather, sb.overlap_param_gather)
    if original.parallel.tp > 1:
        cmp("sim.tp_comm_overlap", sa.tp_comm_overlap, sb.tp_comm_overlap)
    if original.parallel.precision == "fp8":
        cmp("sim.fp8_param_gather", sa.fp8_param_gather, sb.fp8_param_gather)
    for f in ("grad_bucket_params", "grad_reduce_bytes_per_param", "seed"):
        cmp(f"sim.{f}", getattr(sa, f), getattr(sb, f))
    diffs += _step_differences(original, readback)
    return diffs


def _step_differences(original, readback) -> list[str]:
    """The ``[step]`` fields that differ (a packed run's dataloader mask is not carried: ROUNDTRIP_NOT_CARRIED)."""
    ta, tb = original.step.model_dump(), readback.step.model_dump()
    if not original.is_fixed:
        ta.pop("attention_mask_in_dataloader")
    return [f"step.{f}: {ta[f]!r} -> {tb[f]!r}" for f in ta if ta[f] != tb[f]]
