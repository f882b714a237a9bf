"""The Megatron-LM flags dcpsim reads: which it models, approximates or ignores, and how an argument list is parsed.

Split out of :mod:`dcpsim.export.reader` (which re-exports every name here); see that module for the rules.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError

MEGATRON_VOCAB_DIVISOR = 128  # --make-vocab-size-divisible-by default (megatron/training/arguments.py)

MODELLED = {
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--kv-channels",
    "--group-query-attention", "--num-query-groups", "--swiglu", "--untie-embeddings-and-output-weights",
    "--vocab-size", "--vocab-file", "--merge-file", "--tokenizer-type", "--make-vocab-size-divisible-by",
    "--seq-length", "--max-position-embeddings", "--hidden-dropout", "--attention-dropout",
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank", "--cp-comm-type",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp8-param-gather",
    "--cross-entropy-loss-fusion", "--attention-backend", "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers", "--overlap-grad-reduce", "--overlap-param-gather", "--ddp-bucket-size",
    "--grad-reduce-in-bf16", "--tp-comm-overlap", "--use-distributed-optimizer", "--sequence-parallel",
    "--transformer-impl", "--seed", "--log-interval", "--log-params-norm", "--log-num-zeros-in-grad",
    "--log-memory-to-tensorboard", "--log-timers-to-tensorboard", "--timing-log-level", "--deterministic-mode",
    "--cuda-graph-impl", "--clip-grad", "--no-gradient-accumulation-fusion",
    "--manual-gc", "--sequence-packing-scheduler", "--max-seqlen-per-dp-cp-rank", "--dynamic-context-parallel",
    "--min-dynamic-context-parallel-size", "--use-varlen-dataset", "--varlen-mock-dataset-config-json",
    "--mock-data", "--data-path", "--train-iters", "--eval-interval",
    "--check-for-nan-in-loss-and-grad", "--no-check-for-nan-in-loss-and-grad", "--no-overlap-p2p-communication",
    "--test-mode", "--qk-layernorm", "--no-rope-fusion", "--no-create-attention-mask-in-dataloader",
}
"""Flags mapped to a RunConfig field."""

APPROXIMATED = {
    "--normalization": "the norm type (LayerNorm / RMSNorm) is priced as one memory-bound pass either way",
    "--position-embedding-type": "position embeddings (learned absolute or RoPE) are not priced",
    "--use-rotary-position-embeddings": "position embeddings (RoPE) are not priced",
    "--rotary-percent": "position embeddings (RoPE) are not priced",
    "--rotary-base": "position embeddings (RoPE) are not priced",
    "--rotary-interleaved": "position embeddings (RoPE) are not priced (the unfused RoPE of --no-rope-fusion is "
                            "priced with the default rotate-half's kernels)",
    "--disable-bias-linear": "linear-layer biases are not priced (with or without them)",
    "--no-bias-gelu-fusion": "the unfused bias-GeLU kernels are not priced",
    "--no-masked-softmax-fusion": "the unfused softmax kernels are not priced",
    "--no-persist-layer-norm": "the LayerNorm kernel choice is not priced",
    "--apply-layernorm-1p": "the LayerNorm variant is not priced",
    "--norm-epsilon": "a constant of the norm (no time)",
    "--attention-softmax-in-fp32": "softmax precision of unfused attention is not priced",
    "--apply-query-key-layer-scaling": "a scale constant (no time)",
    "--init-method-std": "an initialisation constant (no time)",
    "--calculate-per-token-loss": "per-token loss normalisation (a token-count reduction) is not priced",
    "--ddp-average-in-collective": "averaging inside the gradient collective is priced as a plain reduction",
    "--defer-embedding-wgrad-compute": "the deferred embedding weight-gradient GEMMs are priced in place",
    "--wgrad-deferral-limit": "the deferred embedding weight-gradient GEMMs are priced in place",
    "--delay-wgrad-compute": "delayed weight-gradient GEMMs are priced in place",
    "--num-distributed-optimizer-instances": "several distributed-optimizer instances are priced as one",
    "--overlap-param-gather-with-optimizer-step": "the parameter all-gather is priced as overlapping the forward",
    "--overlap-p2p-communication-warmup-flush": "pipeline transfers in warm-up/flush are priced as not overlapped",
    "--microbatch-group-size-per-virtual-pipeline-stage": "the interleaved schedule is priced with Megatron's "
                                                          "default microbatch group (= pp)",
    "--empty-unused-memory-level": "emptying the allocator cache is not priced",
    "--manual-gc-interval": "garbage-collection interval not priced",
    "--cross-entropy-fusion-impl": "the fused cross-entropy implementation choice is not priced",
    "--tp-comm-overlap-cfg": "TP overlap is priced from its default configuration",
    "--use-tp-pp-dp-mapping": "rank order is not modelled (groups are placed as NVLink allows)",
    "--te-rng-tracker": "the RNG tracker is not priced",
    "--check-weight-hash-across-dp-replicas-interval": "the weight-hash check every N steps is not priced",
    "--cuda-graph-warmup-steps": "CUDA-graph warm-up falls before the measured steps",
    "--cuda-graph-scope": "CUDA graphs are recorded as on/off (the host model reads step.cuda_graphs)",
    "--cuda-graph-modules": "CUDA graphs are recorded as on/off (the host model reads step.cuda_graphs)",
}
"""Flags accepted with a stated approximation (the value says which; empty: handled with a modelled flag)."""

IGNORABLE = {
    # checkpoints
    "--save", "--load", "--save-interval", "--save-retain-interval", "--ckpt-format", "--dist-ckpt-strictness",
    "--async-save", "--use-persistent-ckpt-worker", "--ckpt-assume-constant-structure", "--ckpt-fully-parallel-load",
    "--ckpt-fully-parallel-save", "--no-ckpt-fully-parallel-save", "--auto-detect-ckpt-format", "--no-load-optim",
    "--no-load-rng", "--use-checkpoint-args", "--use-checkpoint-opt_param-scheduler", "--dist-ckpt-optim-fully-reshardable",
    "--async-ckpt-use-cpu-shm", "--async-strategy", "--finetune", "--use-dist-ckpt", "--exit-on-missing-checkpoint",
    "--non-persistent-save-interval", "--non-persistent-ckpt-type", "--pretrained-checkpoint", "--verify-integrity",
    # data files and loader (the token stream's content, not its shape)
    "--data-cache-path", "--split", "--num-workers", "--no-mmap-bin-files", "--dataloader-type",
    "--null-tokenizer-pad-id", "--tokenizer-model", "--tiktoken-pattern",
    "--no-use-tokenizer-model-from-checkpoint-args", "--fim-data", "--fim-rate", "--fim-spm-rate", "--reset-position-ids",
    "--reset-attention-mask", "--eod-mask-loss", "--train-samples", "--eval-iters", "--eval-global-batch-size",
    # optimiser constants and the learning-rate schedule (values, not work)
    "--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples", "--lr-warmup-fraction",
    "--lr-warmup-iters", "--lr-warmup-samples", "--weight-decay", "--adam-beta1", "--adam-beta2", "--adam-eps",
    "--decoupled-lr", "--decoupled-min-lr", "--optimizer",
    # logging targets and process set-up
    "--tensorboard-dir", "--tensorboard-log-interval", "--log-validation-ppl-to-tensorboard", "--log-throughput",
    "--log-progress", "--logging-level", "--timing-log-option", "--wandb-project", "--wandb-exp-name",
    "--wandb-entity", "--wandb-save-dir", "--distributed-backend", "--distributed-timeout-minutes",
    "--exit-interval", "--exit-duration-in-mins", "--use-mcore-models", "--use-cpu-initialization",
    "--disable-gloo-process-groups", "--straggler-minmax-count",
}
"""Flags known not to change the simulated step (checkpointing, data files, learning-rate values, log targets)."""

REFUSED_WHY = {
    "--num-experts": "mixture-of-experts layers are not modelled",
    "--moe-": "mixture-of-experts layers are not modelled",
    "--multi-latent-attention": "multi-latent attention is not modelled",
    "--mtp-num-layers": "multi-token prediction is not modelled",
    "--use-megatron-fsdp": "FSDP (sharded parameters) is not modelled",
    "--use-torch-fsdp2": "FSDP (sharded parameters) is not modelled",
    "--data-parallel-sharding-strategy": "FSDP (sharded parameters) is not modelled",
    "--hierarchical-context-parallel-sizes": "hierarchical (a2a+p2p) CP is not modelled",
    "--account-for-embedding-in-pipeline-split": "a pipeline split counting the embedding as a layer is not modelled",
    "--account-for-loss-in-pipeline-split": "a pipeline split counting the loss as a layer is not modelled",
    "--pipeline-model-parallel-layout": "an explicit pipeline layout is not modelled",
    "--sft": "the SFT dataset is not modelled",
    "--perform-rl-step": "RL steps (generation inside the step) are not modelled",
    "--grpo-": "RL steps (generation inside the step) are not modelled",
    "--rl-": "RL steps (generation inside the step) are not modelled",
    "--inference-": "inference is not modelled",
    "--fine-grained-activation-offloading": "activation offloading is not modelled",
    "--offload-modules": "activation offloading is not modelled",
    "--recompute-modules": "recomputing chosen modules is not modelled",
    "--squared-relu": "the squared-ReLU MLP is not modelled as such",
    "--first-last-layers-bf16": "mixed FP8/BF16 layers are not modelled",
    "--step-batch-size-schedule": "a batch-size schedule is not modelled",
    "--export-": "model export/distillation is not modelled",
}
"""Why some refused flags are refused (a prefix ending in '-' matches a flag family)."""


# ------------------------------------------------------------------ parsing
def tokens_from_text(text: str, where: str = "arguments") -> list[str]:
    """Shell-split an argument list (``#`` comments, line continuations and a leading ``pretrain_gpt.py`` allowed)."""
    try:
        toks = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise ConfigError(where, text[:60], f"shell-quoted arguments ({exc})") from None
    while toks and not toks[0].startswith("--"):
        toks = toks[1:]  # a program name (pretrain_gpt.py, python ...) before the first flag
    script = next((t for t in toks if Path(t).name.startswith("pretrain_") and t.endswith(".py")), None)
    if script is not None:  # a launcher's own flags (torchrun --nproc_per_node ...) before the script: not Megatron's
        raise ConfigError(where, f"... {script} ...", f"Megatron-LM's arguments alone: the flags before {script} "
                          f"({toks[0]} ...) are the launcher's; pass the arguments after it (a launch script's "
                          "arguments, or dcpsim export's megatron_args.txt)")
    return toks


def parse_flags(tokens: list[str], where: str = "arguments") -> dict[str, Any]:
    """``["--a", "1", "--b", "--c", "x", "y"]`` -> ``{"--a": "1", "--b": True, "--c": ["x", "y"]}`` (also ``--a=1``)."""
    out: dict[str, Any] = {}
    cur: str | None = None
    for tok in tokens:
        if tok.startswith("--"):
            name, eq, val = tok.partition("=")
            if name in out:
                raise ConfigError(name, tok, f"each flag once ({where} repeats it)")
            out[name] = val if eq else True
            cur = None if eq else name
        elif cur is None:
            raise ConfigError(where, tok, "a --flag before each value")
        else:
            prev = out[cur]
            out[cur] = tok if prev is True else ([*prev, tok] if isinstance(prev, list) else [prev, tok])
    return out


def read_args_file(path: str | Path) -> dict[str, Any]:
    """Flags of an argument-list file (``megatron_args.txt``: one ``--flag [value]`` per line)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("--megatron-args", str(path), "an existing file of Megatron-LM arguments")
    return parse_flags(tokens_from_text(p.read_text(encoding="utf-8"), str(p)), str(p))


def read_config_yaml(path: str | Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Flags and environment of a Megatron functional test's ``model_config.yaml`` (``MODEL_ARGS``, ``ENV_VARS``)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError("--megatron-config", str(path), "an existing model_config.yaml")
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError("--megatron-config", str(path), f"YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("MODEL_ARGS"), dict):  # say what is there instead
        got = doc.get("MODEL_ARGS") if isinstance(doc, dict) and "MODEL_ARGS" in doc else "no MODEL_ARGS key"
        raise ConfigError("MODEL_ARGS", got, "a table of Megatron flags in the YAML file", where=str(p))
    flags: dict[str, Any] = {}
    for key, value in doc["MODEL_ARGS"].items():
        k = str(key)
        if not k.startswith("--"):
            raise ConfigError(f"MODEL_ARGS.{k}", value, "a --flag", where=str(p))
        if value is True:
            flags[k] = True
        elif isinstance(value, list):
            flags[k] = [str(v) for v in value]
        elif isinstance(value, dict):
            flags[k] = json.dumps(value, separators=(",", ":"))
        elif isinstance(value, str) and value.strip().startswith("[") and value.strip().endswith("]"):
            flags[k] = value.strip()[1:-1].split()
        else:
            flags[k] = str(value).strip()
    env = {str(k): str(v) for k, v in (doc.get("ENV_VARS") or {}).items()}
    return flags, env


# ------------------------------------------------------------------ values
def _one(flags: dict, name: str) -> str | None:
    v = flags.get(name)
    if v is None:
        return None
    if v is True or isinstance(v, list):
        raise ConfigError(name, v, "one value")
    return str(v)


def _int(flags: dict, name: str, default: int | None = None, *, lo: int = 1) -> int | None:
    v = _one(flags, name)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise ConfigError(name, v, "an integer") from None
    if n < lo:
        raise ConfigError(name, n, f"an integer >= {lo}")
    return n


def _float(flags: dict, name: str, default: float) -> float:
    v = _one(flags, name)
    if v is None:
        return default
    try:
        x = float(v)
    except ValueError:
        raise ConfigError(name, v, "a number") from None
    if not math.isfinite(x) or x < 0:
        raise ConfigError(name, v, "a finite number >= 0")
    return x


def _bool(flags: dict, name: str) -> bool:
    v = flags.get(name)
    if v is None:
        return False
    if v is True:
        return True
    raise ConfigError(name, v, "a switch without a value")


def _choice(flags: dict, name: str, allowed: dict[str, Any], default: Any) -> Any:
    v = _one(flags, name)
    if v is None:
        return default
    if v not in allowed:
        raise ConfigError(name, v, f"one of {sorted(allowed)} (other values are not modelled)")
    return allowed[v]


def _refusal(name: str) -> str:
    for key, why in REFUSED_WHY.items():
        if name == key or (key.endswith("-") and name.startswith(key)):
            return why
    return "not modelled by dcpsim, and not in its list of flags known not to change the step"


def check_known(flags: dict[str, Any]) -> list[str]:
    """Refuse the first flag that is neither modelled, approximated nor ignorable; return the ignorable ones."""
    for name in flags:
        if name not in MODELLED and name not in APPROXIMATED and name not in IGNORABLE:
            raise ConfigError(name, flags[name], f"a flag dcpsim can model ({_refusal(name)})")
    return sorted(n for n in flags if n in IGNORABLE)
