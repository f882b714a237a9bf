"""The Megatron-LM constraints a configuration is checked against before export (split out of
:mod:`dcpsim.export.megatron`, which re-exports these names; :func:`~dcpsim.export.megatron.check_megatron` calls them).

Each check raises :class:`~dcpsim.errors.ConfigError` naming the field that breaks a Megatron rule.
"""

from __future__ import annotations

from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.run.config import RunConfig

SCHEDULERS = {"packing": "dp_balanced", "dynamic": "default_dynamic_cp"}
"""Megatron-LM's sequence-packing scheduler for each exportable policy."""


def _pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


# Policy options Megatron's schedulers fix (no flag sets them): export refuses any other value.
MEGATRON_POLICY_OPTIONS: dict[str, dict[str, Any]] = {"dynamic": {"cap_delta": 0.05}, "packing": {}}


def _check_vp(cfg: RunConfig, m) -> None:
    """Interleaved pipeline: an even split (Megatron's --num-layers-per-virtual-pipeline-stage is one count for
    every chunk), ``vp`` dividing the layers of each stage."""
    from dcpsim.run.single import check_vp_layers

    p = cfg.parallel
    if p.vp == 1:
        return
    if p.first_stage_layers or p.last_stage_layers:
        raise ConfigError("parallel.vp", p.vp, "1 with uneven pipeline stages (parallel.first_stage_layers / "
                          "last_stage_layers): Megatron's --num-layers-per-virtual-pipeline-stage needs an even split")
    check_vp_layers(p.vp, [m.n_layers // p.pp] * p.pp)


def _check_policy_options(cfg: RunConfig, policy: str) -> None:
    """Policy options the Megatron scheduler has no flag for must keep Megatron's value (``too_long`` never acts:
    the M×CP / M×DP×CP checks above leave no sequence too long)."""
    if cfg.policy.name != policy:  # an approximation: the options belong to the simulated policy, not Megatron's
        return
    fixed = MEGATRON_POLICY_OPTIONS.get(policy, {})
    for key, value in cfg.policy.options.items():
        if key in fixed and value != fixed[key]:
            raise ConfigError(f"policy.options.{key}", value,
                              f"{fixed[key]!r}, the value Megatron's {SCHEDULERS[policy]} scheduler uses (no flag "
                              "changes it, so the exported run would not be the simulated one)")


def _check_shapes(cfg: RunConfig, m) -> None:
    """Layers over PP, heads over TP, global batch over DP: Megatron's divisibility rules."""
    p, dp = cfg.parallel, cfg.dp
    if m.n_layers % p.pp:
        raise ConfigError("parallel.pp", p.pp, f"a divisor of the model's {m.n_layers} layers")
    if m.n_heads % p.tp or m.n_kv_heads % p.tp:
        raise ConfigError("parallel.tp", p.tp, f"a divisor of the {m.n_heads} attention heads and {m.n_kv_heads} KV heads")
    if cfg.workload.gbs % dp:
        raise ConfigError("workload.gbs", cfg.workload.gbs,
                          f"a multiple of DP = {dp} (Megatron needs global batch % (micro-batch 1 × DP) == 0)")
    if cfg.sim.grad_reduce_bytes_per_param not in (2, 4):
        raise ConfigError("sim.grad_reduce_bytes_per_param", cfg.sim.grad_reduce_bytes_per_param,
                          "2 (--grad-reduce-in-bf16) or 4 (Megatron's FP32 default for BF16)")


def _check_dynamic(cfg: RunConfig) -> list[str]:
    """Dynamic CP: a power-of-two domain DP×CP > 1, min_cp within it, M×DP×CP holding the longest sequence."""
    p, dp, cp = cfg.parallel, cfg.dp, cfg.parallel.cp
    M, max_len = cfg.max_tokens_per_rank, cfg.workload.max_len
    domain = dp * cp
    if domain < 2:
        raise ConfigError("cluster.gpus", cfg.cluster.gpus, f"DP×CP > 1 for dynamic CP (dp={dp}, cp={cp})")
    if p.min_cp > domain:
        raise ConfigError("parallel.min_cp", p.min_cp, f"at most DP×CP = {domain}")
    if p.min_cp != domain:
        if not _pow2(domain):
            raise ConfigError("parallel.cp", cp, f"a layout whose dynamic domain DP×CP = {dp}×{cp} = {domain} "
                              "is a power of two (Megatron builds CP groups of power-of-two sizes)")
        if not _pow2(p.min_cp):
            raise ConfigError("parallel.min_cp", p.min_cp, "a power of two (--min-dynamic-context-parallel-size)")
    if M * domain < max_len:
        raise ConfigError("parallel.max_tokens_per_rank", M,
                          f"M×DP×CP ≥ maximum length {max_len} (M={M}, DP×CP={domain} gives {M * domain})")
    return []


def _check_static(cfg: RunConfig) -> list[str]:
    """Static packing: M×CP holds the longest sequence; min_cp does not carry over."""
    p, M, max_len = cfg.parallel, cfg.max_tokens_per_rank, cfg.workload.max_len
    if M * p.cp < max_len:
        raise ConfigError("parallel.max_tokens_per_rank", M,
                          f"M×CP ≥ maximum length {max_len} for static packing (M={M}, CP={p.cp} gives {M * p.cp})")
    return [f"parallel.min_cp={p.min_cp} has no meaning for static CP; not exported"] if p.min_cp != 1 else []


def _check_a2a(cfg: RunConfig, m, dynamic: bool) -> None:
    """All-to-all CP splits heads: TP × (largest CP) must divide them."""
    p = cfg.parallel
    if p.cp_comm != "a2a":
        return
    largest = cfg.dp * p.cp if dynamic else p.cp
    need = p.tp * largest
    if m.n_heads % need:
        raise ConfigError("parallel.cp_comm", "a2a",
                          f"heads ({m.n_heads}) divisible by TP×CP = {p.tp}×{largest} = {need} "
                          f"({'largest dynamic CP' if dynamic else 'CP'}); use p2p or all_gather")


def vocab_padding_note(cfg: RunConfig, m) -> list[str]:
    """Megatron pads the vocabulary to a multiple of 128 x TP (``--make-vocab-size-divisible-by``); the exported
    ``--vocab-size`` is the model's, so a vocabulary that is not such a multiple trains a wider output layer than
    expected.json prices (``dcpsim simulate --megatron-args`` on the arguments prices the padded one)."""
    from dcpsim.export.flags import MEGATRON_VOCAB_DIVISOR

    q = MEGATRON_VOCAB_DIVISOR * cfg.parallel.tp
    padded = -(-m.vocab // q) * q
    if padded == m.vocab:
        return []
    return [f"Megatron pads --vocab-size {m.vocab} to {padded} (a multiple of {MEGATRON_VOCAB_DIVISOR} x TP "
            f"{cfg.parallel.tp}); expected.json simulates the model's {m.vocab}: the real run's output layer is "
            f"{padded} wide (`dcpsim simulate --megatron-args megatron_args.txt` prices that)"]
