"""Per-microbatch time and memory of one CP group on one pipeline stage.

The cost of a *pack* (the sequences one CP group trains in one microbatch) is
computed per rank of the group. Every rank of a group does the same work: the
load-balanced causal split (rank i of c holds chunks i and 2c−1−i of every
document, each document padded to a multiple of 2c) gives each rank exactly
1/c of every document's causal attention and of its tokens.

Time model (all seconds, for the ``layers_per_stage`` layers of one stage):

* GEMM: each forward GEMM of a block costs 2·s·n·k FLOPs at the profile's
  achieved FLOP/s for ``s`` local tokens; backward is twice the forward FLOPs.
* Attention: per document of padded length L on a c-way group, each rank does
  F/c with F = 2·L²·q/TP forward (causal); with the ring (``p2p``) and
  ``all_gather`` the diagonal 1/c of it runs as a causal block and the rest as
  non-causal blocks, each at the profile's efficiency for L/c tokens; with
  ``a2a`` each rank runs whole sequences for 1/c of the heads (efficiency at
  L). Backward costs 2.5× forward FLOPs (FlashAttention's recomputation).
  Each document is its own causal block, so short documents run at
  short-length efficiency.
* CP communication per layer: ``p2p`` ring of c−1 steps, each moving the
  local K and V (s·2·kv·2 B/TP), hidden behind that step's attention block;
  only the excess is exposed (backward moves twice the bytes). A ring that
  leaves the NVLink domain runs at the slowest hop (one NIC). ``all_gather``
  exposes a K/V all-gather forward and a reduce-scatter backward. ``a2a``
  exposes four all-to-alls each way.
* Element-wise work (RMSNorms, RoPE, SwiGLU, residual adds) is memory-bound:
  per token per layer it moves about (20·h + 6·ffn + 4·(q + 2·kv))·/TP bytes
  forward and twice that backward, at the profile's HBM bandwidth (a
  measured profile carries the measured copy bandwidth; the public ones the
  datasheet figure, so this term is optimistic there).
* TP communication with sequence parallelism: two all-gathers and two
  reduce-scatters of s·h·2 B per layer each way, on NVLink, exposed.
* Recompute: ``full`` repeats the forward (GEMM, attention, communication)
  before the backward; ``selective`` repeats the attention forward only.
* The output layer (logits GEMM) is reported separately (``head_*``), since
  only the last pipeline stage runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from dcpsim.cost.padding import padded_lengths
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.hardware import HardwareProfile, get_profile
from dcpsim.model import RECOMPUTE_MODES, ModelSpec, get_model, memory_per_gpu

CP_COMM_TYPES = ("p2p", "all_gather", "a2a")
ATTN_BWD_FLOPS_FACTOR = 2.5  # FlashAttention backward / forward FLOPs (REFERENCE §6)
GEMM_BWD_FLOPS_FACTOR = 2.0  # dgrad + wgrad
ELEMENTWISE_BWD_FACTOR = 2.0  # backward of an element-wise op reads the saved input and the incoming gradient


@dataclass
class BatchCost:
    """Per-pack cost arrays (one entry per pack; seconds unless named otherwise).

    Times are per rank of the pack's CP group for one pipeline stage of
    ``layers_per_stage`` layers, output layer excluded (see ``head_*``).
    """

    local_tokens: np.ndarray
    gemm_fwd_s: np.ndarray
    attn_fwd_s: np.ndarray
    cp_fwd_exposed_s: np.ndarray
    tp_fwd_s: np.ndarray
    gemm_bwd_s: np.ndarray
    attn_bwd_s: np.ndarray
    cp_bwd_exposed_s: np.ndarray
    tp_bwd_s: np.ndarray
    elementwise_fwd_s: np.ndarray
    elementwise_bwd_s: np.ndarray
    recompute_s: np.ndarray
    cp_comm_total_s: np.ndarray
    head_fwd_s: np.ndarray
    head_bwd_s: np.ndarray
    peak_memory_bytes: np.ndarray
    fits_memory: np.ndarray

    @property
    def fwd_s(self) -> np.ndarray:
        return self.gemm_fwd_s + self.attn_fwd_s + self.cp_fwd_exposed_s + self.tp_fwd_s + self.elementwise_fwd_s

    @property
    def bwd_s(self) -> np.ndarray:
        """Backward time including recomputation."""
        return (self.gemm_bwd_s + self.attn_bwd_s + self.cp_bwd_exposed_s + self.tp_bwd_s + self.elementwise_bwd_s
                + self.recompute_s)

    @property
    def total_s(self) -> np.ndarray:
        return self.fwd_s + self.bwd_s

    def __len__(self) -> int:
        return len(self.local_tokens)

    def pack(self, i: int) -> PackCost:
        return PackCost(**{f.name: float(getattr(self, f.name)[i]) for f in fields(self)})


@dataclass(frozen=True)
class PackCost:
    """Scalar breakdown of one pack (see :class:`BatchCost` for meanings)."""

    local_tokens: float
    gemm_fwd_s: float
    attn_fwd_s: float
    cp_fwd_exposed_s: float
    tp_fwd_s: float
    gemm_bwd_s: float
    attn_bwd_s: float
    cp_bwd_exposed_s: float
    tp_bwd_s: float
    elementwise_fwd_s: float
    elementwise_bwd_s: float
    recompute_s: float
    cp_comm_total_s: float
    head_fwd_s: float
    head_bwd_s: float
    peak_memory_bytes: float
    fits_memory: float

    @property
    def fwd_s(self) -> float:
        return self.gemm_fwd_s + self.attn_fwd_s + self.cp_fwd_exposed_s + self.tp_fwd_s + self.elementwise_fwd_s

    @property
    def bwd_s(self) -> float:
        return (self.gemm_bwd_s + self.attn_bwd_s + self.cp_bwd_exposed_s + self.tp_bwd_s + self.elementwise_bwd_s
                + self.recompute_s)

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(fwd_s=self.fwd_s, bwd_s=self.bwd_s, total_s=self.total_s)
        return d


class CostModel:
    """Cost of packs for one (hardware, model, TP, PP, CP-comm, recompute) setting.

    Parameters
    ----------
    profile, model:
        hardware profile and model spec (objects or names).
    tp, pp:
        tensor- and pipeline-parallel sizes; each stage runs n_layers/pp layers.
    dp_cp:
        ranks per pipeline stage (DP×CP), over which the optimizer state is
        sharded (memory only).
    cp_comm:
        ``p2p`` (ring), ``all_gather`` or ``a2a`` (Ulysses).
    recompute:
        ``none``, ``selective`` or ``full``.
    memory_limit_bytes:
        usable HBM per GPU; default 90% of the profile's HBM.
    """

    def __init__(
        self,
        profile: HardwareProfile | str,
        model: ModelSpec | str,
        *,
        tp: int = 1,
        pp: int = 1,
        dp_cp: int = 1,
        cp_comm: str = "p2p",
        recompute: str = "full",
        memory_limit_bytes: float | None = None,
    ) -> None:
        self.profile = get_profile(profile)
        self.model = get_model(model)
        for name, v in (("tp", tp), ("pp", pp), ("dp_cp", dp_cp)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(name, v, "a positive integer")
        if self.model.n_layers % pp:
            raise ConfigError("pp", pp, f"a divisor of the model's {self.model.n_layers} layers")
        if tp > self.profile.nvlink_domain_gpus:
            raise ConfigError("tp", tp, f"<= the NVLink domain ({self.profile.nvlink_domain_gpus} GPUs)")
        for dim in ("n_heads", "n_kv_heads", "ffn_hidden"):
            if getattr(self.model, dim) % tp:
                raise ConfigError("tp", tp, f"a divisor of model.{dim} ({getattr(self.model, dim)})")
        if cp_comm not in CP_COMM_TYPES:
            raise ConfigError("cp_comm", cp_comm, f"one of {CP_COMM_TYPES}")
        if recompute not in RECOMPUTE_MODES:
            raise ConfigError("recompute", recompute, f"one of {RECOMPUTE_MODES}")
        self.tp, self.pp, self.dp_cp = int(tp), int(pp), int(dp_cp)
        self.cp_comm, self.recompute = cp_comm, recompute
        self.layers_per_stage = self.model.n_layers // pp
        self.memory_limit_bytes = (
            0.9 * self.profile.hbm_bytes if memory_limit_bytes is None else float(memory_limit_bytes)
        )
        if self.memory_limit_bytes <= 0:
            raise ConfigError("memory_limit_bytes", memory_limit_bytes, "a positive number of bytes")
        self._shapes = self.model.gemm_shapes(tp)

    # ------------------------------------------------------------------ API
    def pack_cost(self, lengths, cp: int = 1, *, spans_network: bool = False, check_memory: bool = True) -> PackCost:
        """Breakdown of one pack of ``lengths`` on a ``cp``-rank group.

        Raises :class:`InfeasibleError` when the pack does not fit in memory
        (``check_memory``) or the CP size does not divide the heads (``a2a``).
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.ndim != 1 or lengths.size == 0 or (lengths <= 0).any():
            raise ConfigError("lengths", lengths.tolist()[:8], "a non-empty list of positive token counts")
        out = self.batch_cost(lengths, np.zeros(lengths.size, dtype=np.int64), np.array([cp]), np.array([spans_network]))
        pc = out.pack(0)
        if check_memory and not pc.fits_memory:
            raise InfeasibleError(
                "memory",
                f"pack of {int(lengths.sum())} tokens on cp={cp} needs {pc.peak_memory_bytes / 2**30:.1f} GiB "
                f"per GPU > limit {self.memory_limit_bytes / 2**30:.1f} GiB",
            )
        return pc

    def batch_cost(self, lengths, pack_ids, cp, spans_network=None) -> BatchCost:  # noqa: C901 - temporary, split by costmodel
        """Vectorised cost of many packs.

        ``lengths`` (int, one per document) and ``pack_ids`` (same size, the
        pack each document belongs to, 0..P−1) describe the packs; ``cp`` and
        ``spans_network`` have one entry per pack.
        """
        lengths = np.asarray(lengths, dtype=np.float64)
        pack_ids = np.asarray(pack_ids, dtype=np.int64)
        cp = np.asarray(cp, dtype=np.int64)
        npk = cp.size
        spans = np.zeros(npk, dtype=bool) if spans_network is None else np.asarray(spans_network, dtype=bool)
        if spans.size != npk:
            raise ConfigError("spans_network", spans.size, f"one entry per pack ({npk})")
        if (cp < 1).any():
            raise ConfigError("cp", int(cp.min()), "CP sizes >= 1")
        if self.cp_comm == "a2a":
            bad = (self.model.n_heads % (cp * self.tp) != 0) | (self.model.n_kv_heads % np.minimum(cp * self.tp, self.model.n_kv_heads) != 0)
            if bad.any():
                c = int(cp[bad][0])
                raise InfeasibleError("divisibility", f"a2a needs n_heads ({self.model.n_heads}) divisible by cp*tp ({c}*{self.tp})")
        m, tp, L = self.model, self.tp, self.layers_per_stage
        prof = self.profile

        c_doc = cp[pack_ids].astype(np.float64)
        padded = padded_lengths(lengths, cp[pack_ids]).astype(np.float64)
        tokens = np.bincount(pack_ids, weights=padded, minlength=npk)
        s = tokens / np.maximum(cp, 1)  # local tokens per rank

        # GEMMs (one block, forward)
        gemm_fwd = np.zeros(npk)
        for _, n, k, cnt in self._shapes:
            eff = prof.gemm_flops_per_s(np.maximum(s, 1.0), n, k)
            gemm_fwd += cnt * 2.0 * s * n * k / eff
        # attention per document, per rank
        f_fwd = 2.0 * padded**2 * m.q_dim / tp / c_doc  # causal forward FLOPs on this rank, one layer
        hd = m.head_dim
        if self.cp_comm == "a2a":
            seq = padded
            diag = np.ones_like(c_doc)
        else:
            seq = padded / c_doc
            diag = 1.0 / c_doc
        e = prof.attention_flops_per_s
        t_fwd_doc = f_fwd * (
            diag / e(seq, direction="fwd", causal=True, head_dim=hd)
            + (1 - diag) / e(seq, direction="fwd", causal=False, head_dim=hd)
        )
        f_bwd = ATTN_BWD_FLOPS_FACTOR * f_fwd
        t_bwd_doc = f_bwd * (
            diag / e(seq, direction="bwd", causal=True, head_dim=hd)
            + (1 - diag) / e(seq, direction="bwd", causal=False, head_dim=hd)
        )
        attn_fwd = np.bincount(pack_ids, weights=t_fwd_doc, minlength=npk)
        attn_bwd = np.bincount(pack_ids, weights=t_bwd_doc, minlength=npk)

        # CP communication per layer
        cpf = cp.astype(np.float64)
        cp_fwd = np.zeros(npk)
        cp_bwd = np.zeros(npk)
        cp_total = np.zeros(npk)
        multi = cp > 1
        if multi.any():
            kv_bytes = s * 2.0 * m.kv_dim * 2.0 / tp
            for tier, sel in (("nvlink", multi & ~spans), ("network", multi & spans)):
                if not sel.any():
                    continue
                idx = np.nonzero(sel)[0]
                if self.cp_comm == "p2p":
                    tx = prof.collective_time_s("sendrecv", tier, kv_bytes[idx], 2)
                    tx_b = prof.collective_time_s("sendrecv", tier, 2.0 * kv_bytes[idx], 2)
                    steps = cpf[idx] - 1
                    cp_fwd[idx] = steps * np.maximum(0.0, tx - attn_fwd[idx] / cpf[idx])
                    cp_bwd[idx] = steps * np.maximum(0.0, tx_b - attn_bwd[idx] / cpf[idx])
                    cp_total[idx] = steps * (tx + tx_b)
                else:
                    for c in np.unique(cp[idx]):
                        sub = idx[cp[idx] == c]
                        if self.cp_comm == "all_gather":
                            full = kv_bytes[sub] * c
                            fw = prof.collective_time_s("all_gather", tier, full, int(c))
                            bw = prof.collective_time_s("reduce_scatter", tier, full, int(c))
                        else:  # a2a: Q, K, V, O each way
                            q_b = s[sub] * m.q_dim * 2.0 / tp
                            kv1 = s[sub] * m.kv_dim * 2.0 / tp
                            fw = 2 * prof.collective_time_s("all_to_all", tier, q_b, int(c)) + 2 * prof.collective_time_s(
                                "all_to_all", tier, kv1, int(c)
                            )
                            bw = fw
                        cp_fwd[sub], cp_bwd[sub] = fw, bw
                        cp_total[sub] = fw + bw
        # TP communication (sequence parallel): 2 AG + 2 RS of s*h*2 B each way
        if tp > 1:
            buf = s * m.hidden * 2.0
            tp_one = 2 * prof.collective_time_s("all_gather", "nvlink", buf, tp) + 2 * prof.collective_time_s(
                "reduce_scatter", "nvlink", buf, tp
            )
        else:
            tp_one = np.zeros(npk)

        gemm_bwd = GEMM_BWD_FLOPS_FACTOR * gemm_fwd
        ew_fwd = s * self.elementwise_bytes_per_token_layer() / prof.hbm_bw_bytes_per_s
        ew_bwd = ELEMENTWISE_BWD_FACTOR * ew_fwd
        if self.recompute == "full":
            recompute = gemm_fwd + attn_fwd + cp_fwd + tp_one + ew_fwd
        elif self.recompute == "selective":
            recompute = attn_fwd.copy()
        else:
            recompute = np.zeros(npk)

        # output layer (last stage only)
        v = m.vocab // tp if m.vocab % tp == 0 else m.vocab / tp
        head_fwd = 2.0 * s * m.hidden * v / prof.gemm_flops_per_s(np.maximum(s, 1.0), int(v), m.hidden)
        head_bwd = GEMM_BWD_FLOPS_FACTOR * head_fwd

        mem = self.peak_memory_bytes(s)
        return BatchCost(
            local_tokens=s,
            gemm_fwd_s=gemm_fwd * L,
            attn_fwd_s=attn_fwd * L,
            cp_fwd_exposed_s=cp_fwd * L,
            tp_fwd_s=tp_one * L,
            gemm_bwd_s=gemm_bwd * L,
            attn_bwd_s=attn_bwd * L,
            cp_bwd_exposed_s=cp_bwd * L,
            tp_bwd_s=tp_one * L,
            elementwise_fwd_s=ew_fwd * L,
            elementwise_bwd_s=ew_bwd * L,
            recompute_s=recompute * L,
            cp_comm_total_s=cp_total * L,
            head_fwd_s=head_fwd,
            head_bwd_s=head_bwd,
            peak_memory_bytes=mem,
            fits_memory=mem <= self.memory_limit_bytes,
        )

    def elementwise_bytes_per_token_layer(self) -> float:
        """HBM bytes moved per token per layer by the forward element-wise ops (bf16).

        Two RMSNorms (read + write h: 8h), two residual adds (read 2h, write h: 12h),
        SwiGLU (read 2·ffn, write ffn: 6·ffn) and RoPE on Q and K (read + write: 4·(q + kv)).
        """
        m = self.model
        return (20.0 * m.hidden + 6.0 * m.ffn_hidden + 4.0 * (m.q_dim + m.kv_dim)) / self.tp

    def peak_memory_bytes(self, local_tokens) -> np.ndarray:
        """Peak bytes per GPU with ``local_tokens`` per microbatch (PP microbatches in flight)."""
        s = np.asarray(local_tokens, dtype=np.float64)
        kw = dict(tp=self.tp, pp=self.pp, dp=self.dp_cp, cp=1, recompute=self.recompute)
        m0 = memory_per_gpu(self.model, tokens_per_rank=0, **kw).total_bytes
        m1 = memory_per_gpu(self.model, tokens_per_rank=1, **kw).total_bytes
        return m0 + (m1 - m0) * s

    def max_tokens_per_rank(self) -> int:
        """Largest local token count per microbatch that fits in ``memory_limit_bytes``."""
        from dcpsim.model import max_tokens_per_rank

        return max_tokens_per_rank(
            self.model, memory_limit_bytes=self.memory_limit_bytes, tp=self.tp, pp=self.pp, dp=self.dp_cp, cp=1, recompute=self.recompute
        )

    def flops(self, lengths) -> float:
        """Megatron-counted FLOPs of the sequences (whole model, all stages)."""
        return self.model.flops(lengths)

    def describe(self) -> dict:
        return {
            "gpu": self.profile.name,
            "model": self.model.name,
            "tp": self.tp,
            "pp": self.pp,
            "dp_cp": self.dp_cp,
            "cp_comm": self.cp_comm,
            "recompute": self.recompute,
            "layers_per_stage": self.layers_per_stage,
            "memory_limit_bytes": self.memory_limit_bytes,
        }
