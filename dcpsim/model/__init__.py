"""Transformer specs (as data), Megatron FLOPs accounting and per-GPU memory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import Field

from dcpsim.choices import RECOMPUTE_MODES as _RECOMPUTE_MODES
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.schema import InputModel, parse_model, read_toml

SPEC_DIR = Path(__file__).resolve().parent / "specs"
RECOMPUTE_MODES = _RECOMPUTE_MODES  # defined once in dcpsim.choices
BYTES_BF16 = 2


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer (Llama family: RMSNorm, gated MLP, RoPE)."""

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_hidden: int
    vocab: int
    gated_mlp: bool = True
    tied_embeddings: bool = False
    hidden_dropout: float = 0.0
    qk_layernorm: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"model.{f}", v, "a positive integer", where=self.name)
        if self.n_heads % self.n_kv_heads:
            raise ConfigError("model.n_kv_heads", self.n_kv_heads, f"a divisor of n_heads ({self.n_heads})", where=self.name)

    # ---------------------------------------------------------------- shapes
    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    def linear_params_per_layer(self) -> int:
        """Weights of the GEMMs of one block (QKV, output projection, MLP)."""
        h = self.hidden
        return h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h + self.mlp_matrices * h * self.ffn_hidden

    def gemm_shapes(self, tp: int = 1) -> list[tuple[str, int, int, int]]:
        """Forward GEMMs of one block under TP: (name, n, k, count) with Y[tokens×n] = X[tokens×k] W."""
        h = self.hidden
        up = self.ffn_hidden * (2 if self.gated_mlp else 1)
        return [
            ("qkv", (self.q_dim + 2 * self.kv_dim) // tp, h, 1),
            ("proj", h, self.q_dim // tp, 1),
            ("fc1", up // tp, h, 1),
            ("fc2", h, self.ffn_hidden // tp, 1),
        ]

    @property
    def n_params(self) -> int:
        """Total parameter count (norms included)."""
        h = self.hidden
        emb = self.vocab * h * (1 if self.tied_embeddings else 2)
        return self.n_layers * (self.linear_params_per_layer() + 2 * h) + emb + h

    # ---------------------------------------------------------------- FLOPs
    @property
    def linear_flops_per_token(self) -> float:
        """Megatron model FLOPs per token for the linear terms (fwd+bwd = 6×)."""
        return 6.0 * (self.n_layers * self.linear_params_per_layer() + self.hidden * self.vocab)

    @property
    def attn_flops_coeff(self) -> float:
        """Megatron model FLOPs per sequence = coeff × L² (causal, fwd+bwd)."""
        return 6.0 * self.n_layers * self.q_dim

    def flops(self, lengths) -> float:
        """Megatron's counted FLOPs for a set of sequences (recompute not counted)."""
        lengths = np.asarray(lengths, dtype=np.float64)
        if lengths.size and not (np.isfinite(lengths).all() and lengths.min() >= 0):  # else -5 tokens: negative FLOPs
            raise ConfigError("lengths", lengths.ravel()[:8].tolist(), "finite token counts >= 0")
        return float(self.linear_flops_per_token * lengths.sum() + self.attn_flops_coeff * np.square(lengths).sum())

    def to_dict(self) -> dict:
        return asdict(self)


class ModelSpecInput(InputModel):
    """A model spec as a user writes it (TOML file or inline table): strict types, physical bounds.

    ``n_kv_heads`` defaults to ``n_heads`` (no GQA) and ``head_dim`` to
    ``hidden / n_heads``.
    """

    name: str = Field(min_length=1, description="model name")
    n_layers: int = Field(ge=1, le=100_000, description="transformer blocks")
    hidden: int = Field(ge=1, le=1_000_000, description="hidden size")
    n_heads: int = Field(ge=1, le=100_000, description="attention (query) heads")
    n_kv_heads: int | None = Field(None, ge=1, le=100_000, description="key/value heads (GQA); default n_heads")
    head_dim: int | None = Field(None, ge=1, le=100_000, description="dimension per head; default hidden/n_heads")
    ffn_hidden: int = Field(ge=1, le=10_000_000, description="MLP inner size")
    vocab: int = Field(ge=1, le=100_000_000, description="vocabulary size")
    gated_mlp: bool = Field(True, description="gated MLP (SwiGLU: three matrices) or plain (two)")
    tied_embeddings: bool = Field(False, description="input and output embeddings share weights")
    hidden_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout probability after attention and MLP "
                                  "(> 0 stores a 1-byte mask per element: memory only)")
    qk_layernorm: bool = Field(False, description="a norm on the queries and one on the keys in every layer "
                               "(Megatron --qk-layernorm): two more norm kernels each way")
    source: str = Field("", description="where the dimensions come from")


def _spec_from_mapping(data: Mapping, where: str) -> ModelSpec:
    spec = parse_model(ModelSpecInput, data, where=where, prefix="model")
    d = spec.model_dump()
    if d["n_kv_heads"] is None:
        d["n_kv_heads"] = d["n_heads"]
    if d["head_dim"] is None:  # the usual hidden / heads (a divisor, else name it)
        h, a = d["hidden"], d["n_heads"]
        if h % a:
            raise ConfigError("model.head_dim", None, f"given, or hidden ({h}) divisible by n_heads ({a})", where=where)
        d["head_dim"] = h // a
    return ModelSpec(**d)


def list_models() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.toml"))


@lru_cache(maxsize=32)
def _load_spec(path: str, mtime_ns: int = 0) -> ModelSpec:
    return _spec_from_mapping(read_toml(path, "model file"), str(path))


def get_model(name_or_path: str | Path | ModelSpec | Mapping) -> ModelSpec:
    """A model spec by name (``llama-13b``), from a user's TOML file, or from a table of its fields."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    if isinstance(name_or_path, Mapping):
        return _spec_from_mapping(dict(name_or_path), "model.name (inline spec)")
    if not isinstance(name_or_path, str | os.PathLike):  # else Path() raised a bare TypeError
        raise ConfigError("model", name_or_path, f"one of {list_models()}, a path to a spec .toml, a table of "
                          "ModelSpec fields or a ModelSpec")
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return _load_spec(str(p.resolve()), p.stat().st_mtime_ns)
    cand = SPEC_DIR / f"{name_or_path}.toml"
    if not cand.is_file():
        raise ConfigError("model", str(name_or_path), f"one of {list_models()} or a path to a spec .toml")
    return _load_spec(str(cand))


# ---------------------------------------------------------------- memory
@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory of one GPU in bytes."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    transient_bytes: float

    @property
    def states_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes

    @property
    def total_bytes(self) -> float:
        return self.states_bytes + self.activations_bytes + self.transient_bytes


def stage_params(model: ModelSpec, tp: int, stage_layers) -> np.ndarray:
    """Parameters per GPU of each pipeline stage (float array, one entry per stage): the one parameter count.

    ``stage_layers``: transformer blocks on each stage (``pp`` entries). A
    block holds its GEMM weights split over TP and two RMSNorm weight vectors;
    the first stage adds the word embedding (split over TP), the last the
    output layer (split over TP) and the final norm. Tied embeddings share
    one matrix only when one stage holds both ends; across stages Megatron
    keeps a copy on the last stage. ``stage_params(m, 1, [n_layers]).sum()``
    with untied embeddings is :attr:`ModelSpec.n_params`.
    """
    layers = np.asarray(stage_layers, dtype=np.float64)
    h, emb = model.hidden, model.vocab * model.hidden / tp
    out = layers * (model.linear_params_per_layer() / tp + 2 * h)
    out[0] += emb
    out[-1] += h + (0.0 if (layers.size == 1 and model.tied_embeddings) else emb)
    return out


def params_per_gpu(model: ModelSpec, tp: int, pp: int, stage_layers=None) -> float:
    """Parameters held by the busiest GPU: the largest of :func:`stage_params` (even stages unless ``stage_layers``)."""
    layers = np.full(pp, model.n_layers / pp) if stage_layers is None else stage_layers
    return float(stage_params(model, tp, layers).max())


# Bytes per element of a GEMM input that Transformer Engine saves for the backward pass: a BF16 copy, or the
# FP8 copy it casts to (TransformerEngine Linear/LayerNormLinear keep the quantized input for wgrad).
SAVED_GEMM_INPUT_BYTES = {"bf16": 2.0, "fp8": 1.0}
# Cross-entropy peak per logit: Megatron-Core's vocab-parallel cross-entropy (fused "native" and unfused alike,
# megatron/core/tensor_parallel/cross_entropy.py calculate_logits_max) upcasts the BF16 logits to an FP32
# copy (2 + 4 B alive at the end of the forward); the backward turns the saved FP32 softmax into the FP32
# gradient in place and casts it to BF16 (4 + 2 B).
LOGIT_PEAK_BYTES = 6.0


def activation_terms(model: ModelSpec, precision: str = "bf16") -> dict[str, float]:
    """Bytes per token per layer each stored tensor of one block takes, without TP (divide by TP).

    The Korthikanti et al. 2022 count (Table 2, its 34·s·b·h with sequence parallelism) redone term by
    term for the layers dcpsim models (flash attention, so no s² term; GQA; gated or plain MLP; Transformer
    Engine modules as Megatron-Core builds them):

    * ``norm_inputs``: the inputs of the two norms, BF16 (2·2h);
    * ``gemm_inputs``: the saved inputs of the QKV and fc1 GEMMs (the norm outputs, h each) and of fc2
      (ffn), a BF16 copy, or FP8 under ``precision="fp8"`` (1 B: TE saves the FP8 cast);
    * ``qkv``: Q, K and V that flash attention keeps, BF16 (2·(q + 2·kv));
    * ``attn_out``: the attention output, BF16 (2q): flash attention keeps it and, in BF16, it is also the
      output projection's saved input; in FP8 the projection keeps its own FP8 copy (+1·q);
    * ``lse``: the flash-attention softmax statistics, FP32 per head (4·heads);
    * ``act_input``: the MLP activation's saved input, the fc1 output, BF16 (2·ffn, twice that when gated:
      SwiGLU keeps both halves);
    * ``dropout_masks``: one byte per element after attention and after the MLP (2h) when
      ``model.hidden_dropout`` > 0 (Korthikanti's two s·b·h mask terms).

    BF16, MHA, gated, no dropout: 16h + 6·ffn (REFERENCE §3).
    """
    if precision not in SAVED_GEMM_INPUT_BYTES:
        raise ConfigError("parallel.precision", precision, f"one of {tuple(SAVED_GEMM_INPUT_BYTES)}")
    h, f, q, kv = model.hidden, model.ffn_hidden, model.q_dim, model.kv_dim
    e = SAVED_GEMM_INPUT_BYTES[precision]
    return {
        "norm_inputs": 4.0 * h,
        "gemm_inputs": e * (2 * h + f),
        "qkv": 2.0 * (q + 2 * kv),
        "attn_out": 2.0 * q + (e * q if precision != "bf16" else 0.0),
        "lse": 4.0 * model.n_heads,
        "act_input": 2.0 * f * (2 if model.gated_mlp else 1),
        "dropout_masks": 2.0 * h if model.hidden_dropout > 0 else 0.0,
    }


def activation_bytes_per_token_layer(model: ModelSpec, tp: int, recompute: str, precision: str = "bf16") -> float:
    """Stored activation bytes per token per layer (sequence parallel, flash attention): see :func:`activation_terms`.

    none: every term, divided by TP.
    selective: Megatron's core-attention recompute (``--recompute-granularity selective``) drops what
    flash attention alone keeps (its statistics, and its output copy when the projection keeps an FP8 one);
    with flash attention the s² terms it was made for are already gone, so it saves little.
    full: only the layer input, 2h/TP (``--recompute-granularity full --recompute-method uniform``).
    """
    terms = activation_terms(model, precision)
    if recompute == "none":
        return sum(terms.values()) / tp
    if recompute == "selective":
        fa_only = terms["lse"] + (2.0 * model.q_dim if precision != "bf16" else 0.0)
        return (sum(terms.values()) - fa_only) / tp
    if recompute == "full":
        return 2 * model.hidden / tp
    raise ConfigError("recompute", recompute, f"one of {RECOMPUTE_MODES}")


def attention_score_bytes(model: ModelSpec, tp: int, sum_sq_lengths: float) -> float:
    """Bytes one layer stores for unfused attention's score matrices (Megatron before fused kernels): per score
    element the softmax output (2 B), the attention-dropout mask (1 B) and its output (2 B), Korthikanti et al.
    2022 Table 2's 5·a·s²·b, over the heads of one TP rank; ``sum_sq_lengths`` = Σ L² of the microbatch's
    sequences (each its own L × L block; unfused attention runs on CP = 1)."""
    return 5.0 * model.n_heads / tp * float(sum_sq_lengths)


def output_layer_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """Last-stage bytes per token for the loss: logits at their cross-entropy peak (``LOGIT_PEAK_BYTES`` per
    logit, s × V/TP with sequence parallelism) plus the final norm's input and the output GEMM's input (BF16)."""
    return (model.vocab * LOGIT_PEAK_BYTES + 4.0 * model.hidden) / tp


@dataclass(frozen=True)
class MemorySettings:
    """The layout and options the memory model depends on (a variant is ``dataclasses.replace``): TP, PP, DP and
    CP degrees, the recompute mode, microbatches in flight on stage 0 (None: PP, as in 1F1B), the precision and the
    gradient buffer's bytes per parameter."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    recompute: str = "full"
    microbatches_in_flight: float | None = None
    precision: str = "bf16"
    grad_bytes: float = 4.0


def memory_per_gpu(model: ModelSpec, settings: MemorySettings, *, tokens_per_rank: float,
                   score_bytes: float = 0.0) -> MemoryBreakdown:
    """Peak bytes on the busiest GPU (pipeline stage 0 holds ``microbatches_in_flight`` microbatches, default
    PP for 1F1B; the last stage holds one plus the loss).

    ``tokens_per_rank`` is the local token count of one microbatch on this GPU (after CP splitting).
    Model states follow Megatron-Core's distributed optimizer (docs/source/api-guide/dist_optimizer.md;
    megatron/training/theoretical_memory_usage.py ``6 + 12/d``): 2 B weights per parameter (BF16, or FP8
    plus its transpose with ``--fp8-param-gather``), ``grad_bytes`` of gradient buffer (4: FP32, Megatron-LM's
    default for BF16; 2: BF16 with ``grad_reduce_in_fp32=False``), and 12 B of FP32 master weights and Adam
    moments sharded over the DP×CP group (pass ``dp`` = DP×CP, or both).

    ``score_bytes``: attention scores one layer keeps for one microbatch with unfused attention
    (:func:`attention_score_bytes`; 0 with flash attention): stored by every layer without recompute,
    rebuilt for one layer at a time with selective (core-attention) or full recompute.

    The layout comes as ``settings`` (:class:`MemorySettings`; a variant is ``dataclasses.replace``).
    """
    st = settings
    tp, pp, dp, cp, recompute = st.tp, st.pp, st.dp, st.cp, st.recompute
    microbatches_in_flight, precision, grad_bytes = st.microbatches_in_flight, st.precision, st.grad_bytes
    n = params_per_gpu(model, tp, pp)
    layers = model.n_layers / pp
    per_tok = activation_bytes_per_token_layer(model, tp, recompute, precision) * layers * tokens_per_rank
    transient = 0.0
    if recompute == "none":
        per_tok += score_bytes * layers
    else:
        transient = score_bytes
    if recompute == "full":
        # one layer's full activations are rebuilt during its backward pass
        transient += activation_bytes_per_token_layer(model, tp, "none", precision) * tokens_per_rank
    logits = tokens_per_rank * output_layer_bytes_per_token(model, tp)
    inflight = pp if microbatches_in_flight is None else microbatches_in_flight
    if pp == 1:
        act, trans = per_tok * inflight, transient + logits
    else:
        # stage 0 holds `inflight` microbatches; the last stage holds one plus the logits
        first, last = per_tok * inflight + transient, per_tok + transient + logits
        act, trans = (per_tok * inflight, transient) if first >= last else (per_tok, transient + logits)
    return MemoryBreakdown(
        weights_bytes=2.0 * n,
        grads_bytes=float(grad_bytes) * n,
        optimizer_bytes=12.0 * n / (dp * cp),
        activations_bytes=act,
        transient_bytes=trans,
    )


def max_tokens_per_rank(model: ModelSpec, settings: MemorySettings, *, memory_limit_bytes: float) -> int:
    """Largest local token count per microbatch that fits (Megatron's ``max_seqlen_per_dp_cp_rank``).

    Memory is affine in tokens, so this is solved exactly. Raises
    :class:`InfeasibleError` when the model states alone do not fit. The layout is given as in
    :func:`memory_per_gpu`.
    """
    st = settings
    tp, pp, dp, cp = st.tp, st.pp, st.dp, st.cp
    m0 = memory_per_gpu(model, st, tokens_per_rank=0).total_bytes
    m1 = memory_per_gpu(model, st, tokens_per_rank=1).total_bytes
    if m0 >= memory_limit_bytes:
        raise InfeasibleError(
            "memory",
            f"model states need {m0 / 2**30:.1f} GiB per GPU > limit {memory_limit_bytes / 2**30:.1f} GiB "
            f"(tp={tp}, pp={pp}, dp={dp}, cp={cp})",
        )
    return int((memory_limit_bytes - m0) // (m1 - m0))


__all__ = [
    "MemorySettings",
    "RECOMPUTE_MODES",
    "MemoryBreakdown",
    "ModelSpec",
    "LOGIT_PEAK_BYTES",
    "SAVED_GEMM_INPUT_BYTES",
    "activation_bytes_per_token_layer",
    "activation_terms",
    "attention_score_bytes",
    "get_model",
    "list_models",
    "max_tokens_per_rank",
    "memory_per_gpu",
    "output_layer_bytes_per_token",
    "params_per_gpu",
    "stage_params",
]
