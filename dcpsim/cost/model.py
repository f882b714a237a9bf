"""Per-microbatch time and memory of one CP group on one pipeline stage: the :class:`CostModel` facade.

The cost of a *pack* (the sequences one CP group trains in one microbatch) is
computed per rank of the group. Every rank of a group does the same work: the
load-balanced causal split (rank i of c holds chunks i and 2c−1−i of every
document, each document padded to a multiple of 2c) gives each rank exactly
1/c of every document's causal attention and of its tokens.

The mechanisms live in their own modules, each a set of functions of the
model's :class:`~dcpsim.cost.settings.CostSettings`:

* :mod:`~dcpsim.cost.compute` — device kernels: GEMMs, attention (flash or
  unfused), element-wise work, FP8 casts, the output layer and embedding;
* :mod:`~dcpsim.cost.communication` — CP K/V exchange (ring, all-gather,
  all-to-all), TP collectives, collectives over several NVLink domains;
* :mod:`~dcpsim.cost.memory` — peak memory per GPU and the largest pack that fits;
* :mod:`~dcpsim.cost.fixed` — fixed per-step work: kernels per layer and per
  microbatch, and the launch floor they set (0 with a profile's ``[host]``);
* :mod:`~dcpsim.cost.host` — the host timeline: what the CPU issues per op
  (kernels, NCCL calls, Python) and where it syncs; the simulator's two
  evaluators run it beside the device (:mod:`dcpsim.sim.durations` builds the
  ops from these kernel counts).

:meth:`CostModel.batch_cost` adds them up (all seconds, for the
``layers_per_stage`` layers of one stage):

* Recompute: ``full`` repeats the forward (GEMM, attention, communication)
  before the backward; ``selective`` repeats the attention forward only.
* The output layer (logits GEMM, final norm, cross-entropy) is reported
  separately (``head_*``), since only the last pipeline stage runs it; the
  embedding (``embed_*``) runs on the first stage only.
* Precision: with ``precision="fp8"`` the block GEMMs run at the profile's FP8
  rate and pay their casts (``fp8_cast_*``); attention and the output layer
  stay BF16. Weight casts are once per iteration
  (:func:`~dcpsim.cost.compute.fp8_weight_cast_bytes`, priced by the simulator).
* Uneven pipeline stages (``first_stage_layers``, ``last_stage_layers``):
  ``stage_layers`` holds every stage's layer count; batch costs are for
  ``layers_per_stage`` = the largest count, and :attr:`BatchCost.layer_fwd_s`
  scales linearly to any other stage (:mod:`dcpsim.sim.durations` does so per stage).

A variant of a cost model (another DP×CP, a profile with scaled network
bandwidth) is :meth:`CostModel.derive`: ``dataclasses.replace`` on its
settings, every other setting carried.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import dcpsim.cost.communication as communication
import dcpsim.cost.compute as compute
import dcpsim.cost.determinism as determinism
import dcpsim.cost.fixed as fixed
import dcpsim.cost.memory as memory
from dcpsim.cost.breakdown import BatchCost, PackCost
from dcpsim.cost.settings import CostSettings
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.hardware import HardwareProfile, get_profile
from dcpsim.model import ModelSpec, get_model
from dcpsim.padding import padded_lengths
from dcpsim.units import check_token_counts


class CostModel:
    """Cost of packs for one :class:`~dcpsim.cost.settings.CostSettings` (hardware, model, layout, kernels).

    ``CostModel(settings)`` takes the settings whole; :meth:`build` makes them from names and keywords
    (the fields of :class:`CostSettings`), :meth:`derive` makes a variant.
    """

    def __init__(self, settings: CostSettings) -> None:
        if not isinstance(settings, CostSettings):
            raise TypeError(f"CostModel takes a CostSettings (got {type(settings).__name__}); "
                            "use CostModel.build(profile, model, **settings) for names and keywords")
        self.settings = settings
        self.stage_layers = settings.stage_layers()
        self.layers_per_stage = int(self.stage_layers.max())
        self.memory_limit_bytes = settings.usable_memory_bytes

    @classmethod
    def build(cls, profile: HardwareProfile | str, model: ModelSpec | str, **settings) -> CostModel:
        """A cost model from a profile and a model (objects or names) and :class:`CostSettings` keywords."""
        return cls(CostSettings(get_profile(profile), get_model(model), **settings))

    def derive(self, **changes) -> CostModel:
        """A cost model whose settings are this one's with ``changes`` (``dataclasses.replace``)."""
        return CostModel(replace(self.settings, **changes))

    # the settings, read through (a cost model never changes them: derive a new one)
    @property
    def profile(self) -> HardwareProfile:
        return self.settings.profile

    @property
    def model(self) -> ModelSpec:
        return self.settings.model

    @property
    def tp(self) -> int:
        return self.settings.tp

    @property
    def pp(self) -> int:
        return self.settings.pp

    @property
    def dp_cp(self) -> int:
        return self.settings.dp_cp

    @property
    def cp_comm(self) -> str:
        return self.settings.cp_comm

    @property
    def recompute(self) -> str:
        return self.settings.recompute

    @property
    def precision(self) -> str:
        return self.settings.precision

    @property
    def tp_comm_overlap(self) -> bool:
        return self.settings.tp_comm_overlap

    @property
    def attention(self) -> str:
        return self.settings.attention

    @property
    def cross_entropy(self) -> str:
        return self.settings.cross_entropy

    @property
    def rope_fusion(self) -> bool:
        return self.settings.rope_fusion

    @property
    def transformer_impl(self) -> str:
        return self.settings.transformer_impl

    @property
    def attention_mask(self) -> bool:
        return self.settings.attention_mask

    @property
    def microbatches_in_flight(self) -> float | None:
        return self.settings.microbatches_in_flight

    @property
    def grad_bytes_per_param(self) -> float:
        return self.settings.grad_bytes_per_param

    # ------------------------------------------------------------------ API
    def pack_cost(self, lengths, cp: int = 1, *, spans_network: bool = False, check_memory: bool = True) -> PackCost:
        """Breakdown of one pack of ``lengths`` on a ``cp``-rank group.

        Raises :class:`InfeasibleError` when the pack does not fit in memory
        (``check_memory``) or the CP size does not divide the heads (``a2a``).
        """
        # checked before the int64 cast, which truncated 4096.7 and 2.5 silently and failed on nan/inf in numpy
        lengths = check_token_counts(lengths, "lengths", non_empty=True)
        if not isinstance(cp, int | np.integer) or isinstance(cp, bool):
            raise ConfigError("cp", cp, "an integer CP size >= 1")
        out = self.batch_cost(lengths, np.zeros(lengths.size, dtype=np.int64), np.array([cp]), np.array([spans_network]))
        pc = out.pack(0)
        if check_memory and not pc.fits_memory:
            raise InfeasibleError(
                "memory",
                f"pack of {int(lengths.sum())} tokens on cp={cp} needs {pc.peak_memory_bytes / 2**30:.1f} GiB "
                f"per GPU > limit {self.memory_limit_bytes / 2**30:.1f} GiB",
            )
        return pc

    def doc_terms(self, lengths, cp_doc) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-document part of :meth:`batch_cost`: each document's padded length (tokens, float) and its
        attention forward and backward seconds (one layer), for documents of ``lengths`` tokens on ``cp_doc``
        ranks (one CP size per document). A caller that costs the same documents on groups of the same sizes
        many times (a planner scoring candidate packings) computes these once and passes them as ``docs``.

        Integer lengths of many documents are padded and timed once per distinct (length, CP size) and spread
        (each document's numbers are computed by the same operations: the same values)."""
        cp_doc = np.asarray(cp_doc, dtype=np.int64)
        lengths = np.asarray(lengths)
        if lengths.dtype.kind not in "iu":  # (padded_lengths counts whole tokens: floats are truncated to int64)
            lengths = lengths.astype(np.float64)
        elif lengths.size > compute._DISTINCT_MIN and lengths.shape == cp_doc.shape:
            got = compute.distinct_pairs(lengths.astype(np.int64, copy=False), cp_doc)
            if got is not None:
                return self._spread_doc_terms(*got)
        padded = padded_lengths(lengths, cp_doc).astype(np.float64)
        return (padded, *compute.attention_doc_terms(self.settings, padded, cp_doc))

    def _pack_doc_terms(self, lengths, pack_ids: np.ndarray, cp: np.ndarray) -> tuple[np.ndarray, ...]:
        """:meth:`doc_terms` of ``lengths`` on ``cp[pack_ids]`` ranks, the CP sizes told apart on the packs."""
        lengths = np.asarray(lengths)
        if lengths.dtype.kind in "iu" and lengths.size > compute._DISTINCT_MIN and lengths.shape == pack_ids.shape:
            cp_u, code = compute.distinct_codes(cp)
            got = compute.coded_pairs(lengths.astype(np.int64, copy=False), cp_u, code.take(pack_ids))
            if got is not None:
                return self._spread_doc_terms(*got)
        return self.doc_terms(lengths, cp.take(pack_ids))

    def _spread_doc_terms(self, len_u: np.ndarray, cp_u: np.ndarray, inv: np.ndarray) -> tuple[np.ndarray, ...]:
        """:meth:`doc_terms` of the documents ``(len_u[inv], cp_u[inv])``, computed on the distinct pairs
        ``(len_u, cp_u)`` (int64) and spread."""
        padded = padded_lengths(len_u, cp_u).astype(np.float64)
        t_fwd, t_bwd = compute.attention_doc_terms(self.settings, padded, cp_u)
        return padded.take(inv), t_fwd.take(inv), t_bwd.take(inv)

    def batch_cost(self, lengths, pack_ids, cp, spans_network=None, *, docs=None) -> BatchCost:
        """Vectorised cost of many packs.

        ``lengths`` (int, one per document) and ``pack_ids`` (same size, the
        pack each document belongs to, 0..P−1) describe the packs; ``cp`` and
        ``spans_network`` have one entry per pack. ``docs``: :meth:`doc_terms` of
        ``lengths`` on ``cp[pack_ids]`` when the caller has it (the same result).
        """
        st = self.settings
        pack_ids = np.asarray(pack_ids, dtype=np.int64)
        cp = np.asarray(cp, dtype=np.int64)
        npk = cp.size
        spans = self._check_packs(cp, spans_network)
        L = self.layers_per_stage

        padded, t_fwd_doc, t_bwd_doc = self._pack_doc_terms(lengths, pack_ids, cp) if docs is None else docs
        s = np.bincount(pack_ids, weights=padded, minlength=npk) / np.maximum(cp, 1)  # local tokens per rank

        gemm_fwd, cast_fwd, cast_bwd, head_fwd, head_bwd, emb_fwd, emb_bwd = compute.token_terms(st, s)
        gemm_bwd = compute.gemm_bwd_factor(st) * gemm_fwd
        attn_fwd = np.bincount(pack_ids, weights=t_fwd_doc, minlength=npk)  # each pack's documents, summed
        attn_bwd = np.bincount(pack_ids, weights=t_bwd_doc, minlength=npk)
        cp_fwd, cp_bwd, cp_total, cp_fwd_comm = communication.cp_terms(st, s, cp, spans, attn_fwd, attn_bwd)
        tp_fwd, tp_bwd = communication.tp_terms(st, s, gemm_fwd, gemm_bwd)
        ew_fwd, ew_bwd = compute.elementwise_terms(st, s)
        sq = np.bincount(pack_ids, weights=padded * padded, minlength=npk) if st.attention == "unfused" else None
        if st.deterministic_fill:  # --deterministic-mode's NaN fill of uninitialised allocations (device bytes)
            ew_fwd, ew_bwd, head_fwd, head_bwd = _with_fills(st, s, sq, ew_fwd, ew_bwd, head_fwd, head_bwd)
        if st.recompute == "full":
            recompute = gemm_fwd + attn_fwd + cp_fwd + tp_fwd + ew_fwd + cast_fwd
        elif st.recompute == "selective":
            recompute = attn_fwd.copy()
        else:
            recompute = np.zeros(npk)

        gpu_fwd = gemm_fwd + attn_fwd + cp_fwd + tp_fwd + ew_fwd + cast_fwd
        gpu_bwd = gemm_bwd + attn_bwd + cp_bwd + tp_bwd + ew_bwd + cast_bwd + recompute
        launch_fwd, launch_bwd = fixed.launch_terms(st, cp, gpu_fwd, gpu_bwd)
        overhead = fixed.microbatch_overhead(st, npk)

        mem = self.peak_memory_bytes(s, sq)
        per_layer = _PerLayer(L)  # the per-layer terms times the stage's layers (each array once: the same values)
        return BatchCost(
            local_tokens=s,
            gemm_fwd_s=per_layer(gemm_fwd),
            attn_fwd_s=per_layer(attn_fwd),
            cp_fwd_exposed_s=per_layer(cp_fwd),
            tp_fwd_s=per_layer(tp_fwd),
            gemm_bwd_s=per_layer(gemm_bwd),
            attn_bwd_s=per_layer(attn_bwd),
            cp_bwd_exposed_s=per_layer(cp_bwd),
            tp_bwd_s=per_layer(tp_bwd),
            elementwise_fwd_s=per_layer(ew_fwd),
            elementwise_bwd_s=per_layer(ew_bwd),
            recompute_s=per_layer(recompute),
            cp_comm_total_s=per_layer(cp_total),
            head_fwd_s=head_fwd,
            head_bwd_s=head_bwd,
            peak_memory_bytes=mem,
            fits_memory=mem <= self.memory_limit_bytes,
            fp8_cast_fwd_s=per_layer(cast_fwd),
            fp8_cast_bwd_s=per_layer(cast_bwd),
            launch_fwd_s=per_layer(launch_fwd),
            launch_bwd_s=per_layer(launch_bwd),
            overhead_fwd_s=overhead,
            overhead_bwd_s=overhead.copy(),
            embed_fwd_s=emb_fwd,
            embed_bwd_s=emb_bwd,
            cp_fwd_comm_s=per_layer(cp_fwd_comm),
        )

    def _check_packs(self, cp: np.ndarray, spans_network) -> np.ndarray:
        npk = cp.size
        spans = np.zeros(npk, dtype=bool) if spans_network is None else np.asarray(spans_network, dtype=bool)
        if spans.size != npk:
            raise ConfigError("spans_network", spans.size, f"one entry per pack ({npk})")
        if (cp < 1).any():
            raise ConfigError("cp", int(cp.min()), "CP sizes >= 1")
        if self.attention == "unfused" and (cp > 1).any():
            raise ConfigError("parallel.attention", self.attention,
                              "'flash' when cp > 1 (context parallelism runs fused attention kernels)")
        if self.cp_comm == "a2a":
            m = self.model
            bad = (m.n_heads % (cp * self.tp) != 0) | (m.n_kv_heads % np.minimum(cp * self.tp, m.n_kv_heads) != 0)
            if bad.any():
                c = int(cp[bad][0])
                raise InfeasibleError("divisibility", f"a2a needs n_heads ({m.n_heads}) divisible by cp*tp ({c}*{self.tp})")
        return spans

    def kernels_per_layer(self, cp) -> tuple[np.ndarray, np.ndarray]:
        """Kernels one layer launches forward and backward (recompute excluded), per pack of CP size ``cp``."""
        return fixed.kernels_per_layer(self.settings, cp)

    def elementwise_bytes_per_token_layer(self) -> float:
        """HBM bytes moved per token per layer by the forward element-wise ops (bf16)."""
        return compute.elementwise_bytes_per_token_layer(self.settings)

    def peak_memory_bytes(self, local_tokens, sum_sq_lengths=None) -> np.ndarray:
        """Peak bytes per GPU with ``local_tokens`` per microbatch (:func:`dcpsim.cost.memory.peak_memory_bytes`)."""
        return memory.peak_memory_bytes(self.settings, local_tokens, sum_sq_lengths)

    def max_tokens_per_rank(self) -> int:
        """Largest local token count per microbatch that fits in ``memory_limit_bytes``."""
        return memory.max_tokens_per_rank(self.settings)

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
            "stage_layers": self.stage_layers.tolist(),
            "precision": self.precision,
            "tp_comm_overlap": self.tp_comm_overlap,
            "attention": self.attention,
            "cross_entropy": self.cross_entropy,
            "rope_fusion": self.rope_fusion,
            "transformer_impl": self.transformer_impl,
            "attention_mask": self.attention_mask,
            "memory_limit_bytes": self.memory_limit_bytes,
            "grad_bytes_per_param": self.grad_bytes_per_param,
        }


def _with_fills(st: CostSettings, s, sq, ew_fwd, ew_bwd, head_fwd, head_bwd):
    """Element-wise and head device seconds with ``--deterministic-mode``'s fills added (seconds per pack;
    :func:`dcpsim.cost.determinism.fill_device_terms` per layer, ``fill_head_device_terms`` per microbatch)."""
    f_f, f_b = determinism.fill_device_terms(st, s, sq)
    h_f, h_b = determinism.fill_head_device_terms(st, s)
    return ew_fwd + f_f, ew_bwd + f_b, head_fwd + h_f, head_bwd + h_b


class _PerLayer:
    """``x * L`` of the per-layer terms :meth:`CostModel.batch_cost` made (float64 arrays of its own, read
    nowhere else after): each array multiplied in place the first time (the same operation, the same values,
    no new array); an array met again (a term that is another's object) gets a copy of its product."""

    def __init__(self, L: int) -> None:
        self.L, self.done = L, {}

    def __call__(self, x: np.ndarray) -> np.ndarray:
        got = self.done.get(id(x))
        if got is not None:
            return got[1].copy()
        if x.dtype != np.float64 or not x.flags.writeable or x.base is not None:
            out = x * self.L
        else:
            x *= self.L
            out = x
        self.done[id(x)] = (x, out)  # (x kept: its id stays its own)
        return out
