"""The layout search space: enumerate candidates, prune by divisibility and memory.

A :class:`Candidate` is one way to run the model on ``gpus`` GPUs: TP, PP,
virtual pipeline stages (VP), static CP, tokens per rank per microbatch
(for fixed windows: micro-batch size × ``seq_len`` / CP), recompute, and,
where the run configuration has them, precision and communication-overlap
flags. Dimensions the configuration does not have yet (``parallel.vp``,
``precision``, overlap flags are being added to the time model) are found by
name in :class:`~dcpsim.run.config.RunConfig` (:func:`optional_field`) and
searched as soon as they exist; until then they stay at their single value.

Memory is checked with the simulator's own memory model: the cost model that
``run_simulation`` builds for the configuration
(:func:`dcpsim.run.single.build_cost_model`), its ``peak_memory_bytes`` at
the candidate's tokens per rank against its ``memory_limit_bytes``. A forced
layout goes through the same check.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

from dcpsim.choices import RECOMPUTE_MODES
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.hardware.placement import check_tp_in_domain
from dcpsim.padding import pad_multiple, per_rank_tokens_int
from dcpsim.planning.configs import _cost_key, light_config
from dcpsim.planning.inputs import DataSpec
from dcpsim.run.config import RunConfig

RECOMPUTE = RECOMPUTE_MODES  # the choice set of dcpsim.choices (its order: least memory saved first)
OVERLAP_FLAGS = ("overlap_grad_sync", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")
# flags the closed-form screen models (their variants are screened on the shortlist; others are simulated)
SCREENED_FLAGS = ("overlap_grad_sync", "overlap_param_gather", "tp_comm_overlap")
POW2 = (1, 2, 4, 8, 16, 32, 64)
MAX_PP = 64
MAX_VP = 12  # Megatron runs use up to 12 virtual stages per rank (Nemotron-4 340B: PP 8 x VP 12)


@cache
def optional_field(leaf: str) -> str | None:
    """Dotted path of the first RunConfig field named ``leaf`` (``"vp"`` -> ``"parallel.vp"``), or None."""
    for sec_name, sec in RunConfig.model_fields.items():
        ann = sec.annotation
        if isinstance(ann, type) and hasattr(ann, "model_fields") and leaf in ann.model_fields:
            return f"{sec_name}.{leaf}"
    return None


@cache
def flag_default(leaf: str) -> bool:
    """RunConfig's default value of an overlap flag."""
    sec, name = optional_field(leaf).split(".")
    return bool(getattr(getattr(RunConfig(), sec), name))


def field_choices(path: str) -> tuple[Any, ...]:
    """The Literal choices of a RunConfig field (``"parallel.recompute"`` -> ``("none", "selective", "full")``)."""
    sec, leaf = path.split(".")
    ann = RunConfig.model_fields[sec].annotation.model_fields[leaf].annotation
    args = typing.get_args(ann)
    return tuple(args) if typing.get_origin(ann) is typing.Literal else ()


@dataclass(frozen=True)
class Candidate:
    """One layout. ``tokens_per_rank``: Megatron's max tokens per DP×CP rank per microbatch (``M``)."""

    tp: int
    pp: int
    cp: int
    tokens_per_rank: int
    recompute: str
    vp: int = 1
    mbs: int | None = None  # sequences per microbatch (fixed windows only)
    precision: str | None = None
    flags: tuple[tuple[str, bool], ...] = ()
    first_stage_layers: int = 0  # uneven pipeline: layers on the first / last stage (0 = even split)
    last_stage_layers: int = 0

    def updates(self, gpus: int) -> dict[str, Any]:
        """``RunConfig.with_updates`` entries for this layout on ``gpus`` GPUs."""
        return {"cluster.gpus": gpus, **self._layout_updates}

    @cached_property
    def _layout_updates(self) -> dict[str, Any]:
        """:meth:`updates` less the GPU count, in its order; once per candidate (the searches of every cluster
        size check the same candidate objects)."""
        u: dict[str, Any] = {"parallel.tp": self.tp, "parallel.pp": self.pp,
                             "parallel.cp": self.cp, "parallel.max_tokens_per_rank": self.tokens_per_rank,
                             "parallel.recompute": self.recompute, "parallel.mbs": self.mbs or 1}
        vp = optional_field("vp")
        if vp:
            u[vp] = self.vp
        prec = optional_field("precision")
        if prec and self.precision is not None:
            u[prec] = self.precision
        for name, on in self.flags:
            u[optional_field(name)] = on
        for name in ("first_stage_layers", "last_stage_layers"):
            path = optional_field(name)
            if path:
                u[path] = getattr(self, name)
        return u

    def label(self) -> str:
        s = f"TP{self.tp} PP{self.pp}"
        if self.vp > 1:
            s += f" VP{self.vp}"
        if self.first_stage_layers or self.last_stage_layers:
            s += f" first/last {self.first_stage_layers}/{self.last_stage_layers} layers"
        s += f" CP{self.cp}"
        s += f" mbs{self.mbs}" if self.mbs else f" M{self.tokens_per_rank // 1024}K"
        s += f" rc:{self.recompute}"
        if self.precision:
            s += f" {self.precision}"
        changed = [(n, on) for n, on in self.flags if on != flag_default(n)]  # flags off their defaults
        s += "".join(f" {'+' if on else 'no-'}{n}" for n, on in changed)
        return s

    def layout_key(self) -> tuple:
        """Everything but the overlap flags."""
        return (self.tp, self.pp, self.vp, self.first_stage_layers, self.last_stage_layers, self.cp,
                self.tokens_per_rank, self.recompute, self.precision)

    @cached_property
    def prune_order(self) -> tuple[int, tuple]:
        """(the recompute mode's place in :data:`RECOMPUTE`, 9 if not there; the layout less its recompute: what
        :func:`dcpsim.planning.search.prune` orders and dominates by), once per candidate."""
        return (RECOMPUTE.index(self.recompute) if self.recompute in RECOMPUTE else 9,
                (self.layout_key()[:-2], self.precision, self.flags))


@dataclass
class SearchSpace:
    """Values tried per dimension; ``None`` means "all that make sense" (see :func:`default_space`)."""

    tp: Sequence[int] | None = None
    pp: Sequence[int] | None = None
    vp: Sequence[int] | None = None
    cp: Sequence[int] | None = None
    mbs: Sequence[int] | None = None
    tokens_per_rank: Sequence[int] | None = None
    recompute: Sequence[str] | None = None
    precision: Sequence[str] | None = None
    flags: dict[str, Sequence[bool]] = field(default_factory=dict)

    def forced(self) -> bool:
        """True when the user fixed TP and PP (a forced layout)."""
        return self.tp is not None and self.pp is not None and len(self.tp) == 1 and len(self.pp) == 1


def _gpu_domain(gpu: str) -> int:
    from dcpsim.hardware import get_profile

    return int(get_profile(gpu).nvlink_domain_gpus)


def _model(base: RunConfig):
    from dcpsim.model import get_model

    return get_model(base.model.name)


def _tp_options(space: SearchSpace, base: RunConfig) -> list[int]:
    """TP sizes to search: the user's or 1, 2, 4, 8 that split the model; only those that divide the NVLink
    domain (the config's ``hardware.nvlink_domain_gpus`` or the profile's), so every TP group stays inside
    one domain as the cost model requires (:func:`dcpsim.sim.topology.check_tp_in_domain`)."""
    n = base.hardware.nvlink_domain_gpus
    doms = [_gpu_domain(base.hardware.gpu)] + ([] if n == "profile" else [int(n)])
    if space.tp is not None:  # the user's sizes: one that leaves a domain is refused with its reason (check_candidate)
        return list(space.tp)
    m = _model(base)
    return [t for t in (1, 2, 4, 8) if all(d % t == 0 for d in doms) and m.n_heads % t == 0
            and m.n_kv_heads % t == 0 and m.ffn_hidden % t == 0]


def uneven_stages(n_layers: int, pp: int) -> list[tuple[int, int]]:
    """(first, last) stage layer counts worth trying on ``pp`` stages (Megatron's uneven pipeline).

    The first and last stages also hold the embedding and the output layer, so
    giving them one layer fewer than the others (or the even share when the layers
    do not divide) balances the pipeline, e.g. 126 layers on 16 stages: 7 + 14 x 8 + 7.
    """
    if pp < 3 or not optional_field("first_stage_layers"):
        return []
    out = []
    for k in (n_layers // pp, n_layers // pp - 1):
        rest = n_layers - 2 * k
        if k >= 1 and rest % (pp - 2) == 0 and rest // (pp - 2) > k:
            out.append((k, k))
    return out


def _pp_vp_options(space: SearchSpace, base: RunConfig) -> list[tuple[int, int, int, int]]:
    """(pp, vp, first-stage layers, last-stage layers) choices."""
    n_layers = _model(base).n_layers
    # every divisor of the layers up to 64 stages (PP 6 for 96 layers, PP 35 for 105 ...), and powers of two
    # (uneven first/last stages make those usable when they do not divide)
    pps = list(space.pp) if space.pp is not None else sorted(
        {p for p in range(1, min(n_layers, MAX_PP) + 1) if n_layers % p == 0} | {p for p in POW2 if p <= n_layers})
    out = []
    for p in pps:
        if space.vp is not None:
            vps = list(space.vp)
        elif optional_field("vp") and p > 1:  # every split of a stage's layers into up to MAX_VP chunks
            vps = [v for v in range(1, MAX_VP + 1) if n_layers % (p * v) == 0]
        else:
            vps = [1]
        if n_layers % p == 0:
            out += [(p, v, 0, 0) for v in vps if v == 1 or (p > 1 and n_layers % (p * v) == 0)]
        if space.vp is None or 1 in space.vp:  # uneven stages have no virtual stages: not when --vp excludes 1
            out += [(p, 1, f, last) for f, last in uneven_stages(n_layers, p)]
    return out


def _precisions(space: SearchSpace) -> list[str | None]:
    if space.precision is not None:
        return list(space.precision)
    path = optional_field("precision")
    return list(field_choices(path)) if path else [None]


def _flag_options(space: SearchSpace, base: RunConfig) -> list[tuple[tuple[str, bool], ...]]:
    """Overlap-flag settings to enumerate: the space's values, else the base configuration's own."""
    names = [n for n in OVERLAP_FLAGS if optional_field(n)]

    def base_value(n: str) -> bool:
        sec, leaf = optional_field(n).split(".")
        return bool(getattr(getattr(base, sec), leaf))

    per = [[(n, v) for v in space.flags.get(n, (base_value(n),))] for n in names]
    return [tuple(c) for c in itertools.product(*per)] if per else [()]


def _cp_mbs(space: SearchSpace, data: DataSpec, policy_dynamic: bool) -> list[tuple[int, int, int | None]]:
    """(cp, tokens_per_rank, mbs) choices for the data."""
    out: list[tuple[int, int, int | None]] = []
    if data.fixed:
        L = int(data.seq_len)
        cps = list(space.cp) if space.cp is not None else [c for c in (1, 2, 4, 8, 16) if L % pad_multiple(c) == 0]
        if policy_dynamic and space.cp is None:
            cps = [1]
        mbss = list(space.mbs) if space.mbs is not None else [1, 2, 4, 8, 16]
        for c in cps:
            for b in mbss:
                out.append((c, b * per_rank_tokens_int(L, c), b))  # each window padded to a multiple of 2*cp
        return out
    longest = data.longest
    Ms = list(space.tokens_per_rank) if space.tokens_per_rank is not None else [4096 * 2**k for k in range(6)]
    if policy_dynamic:
        cps = list(space.cp) if space.cp is not None else [1]
        return [(c, M, None) for c in cps for M in Ms]
    for M in Ms:
        need = -(-longest // M)
        cps = list(space.cp) if space.cp is not None else [c for c in (1, 2, 4, 8, 16, 32) if c >= need][:2]
        out += [(c, M, None) for c in cps if c * M >= longest or space.cp is not None]
    return out


def enumerate_candidates(base: RunConfig, gpus: int, data: DataSpec, space: SearchSpace,
                         policy_dynamic: bool) -> Iterator[Candidate]:
    """Every combination of the space's values (divisibility is checked by :func:`check_candidate`).

    The combinations are built once per process for equal option lists (the searches of every cluster size
    share them; a candidate is immutable) and filtered here by the GPU count, in the same order."""
    recs = tuple(space.recompute) if space.recompute is not None else tuple(RECOMPUTE)
    key = (tuple(_tp_options(space, base)), tuple(_pp_vp_options(space, base)),
           tuple(_cp_mbs(space, data, policy_dynamic)), recs, tuple(_precisions(space)),
           tuple(_flag_options(space, base)))
    combos = _COMBOS.get(key)
    if combos is None:
        if len(_COMBOS) > 256:
            _COMBOS.clear()
        combos = _COMBOS[key] = _combinations(*key)
    for per, cands in combos:
        if not gpus % per:
            yield from cands


_COMBOS: dict[tuple, list[tuple[int, tuple[Candidate, ...]]]] = {}


def _combinations(tps, pp_vps, cp_mbs, recs, precs, flags) -> list[tuple[int, tuple[Candidate, ...]]]:
    """The candidates of :func:`enumerate_candidates` in its order, in runs of one (tp, pp, vp, cp, tokens) with
    their ``tp·pp·cp`` (a run is kept when it divides the GPU count)."""
    out = []
    for tp in tps:
        for pp, vp, first, last in pp_vps:
            for cp, M, mbs in cp_mbs:
                out.append((tp * pp * cp, tuple(
                    Candidate(tp=tp, pp=pp, cp=cp, tokens_per_rank=M, recompute=rc, vp=vp, mbs=mbs, precision=prec,
                              flags=fl, first_stage_layers=first, last_stage_layers=last)
                    for rc, prec, fl in itertools.product(recs, precs, flags))))
    return out


@dataclass
class Checked:
    """A candidate that passed (``cfg`` set) or its reason (``reason``); memory figures in bytes."""

    cand: Candidate
    cfg: RunConfig | None = None
    reason: str = ""
    kind: str = ""
    memory_bytes: float = float("nan")
    limit_bytes: float = float("nan")


def batch_check(cand: Candidate, gpus: int, data: DataSpec, gbs: int) -> str:
    """Why the global batch cannot be split over this layout ('' when it can)."""
    dp = gpus // (cand.tp * cand.pp * cand.cp)
    if gbs < dp:
        return f"batch: {gbs} sequences per global batch < DP {dp} (every replica needs at least one)"
    if data.fixed:
        mbs = cand.mbs or 1
        if gbs % (dp * mbs):
            return f"batch: {gbs} sequences not divisible by DP x micro-batch = {dp} x {mbs}"
        m = gbs // (dp * mbs)
        if cand.vp > 1 and m % cand.pp:
            return f"batch: interleaved schedule needs microbatches ({m}) divisible by PP ({cand.pp})"
    return ""


def dynamic_capacity_check(cand: Candidate, gpus: int, data: DataSpec) -> str:
    """Why a dynamic policy's largest CP group cannot hold the data's longest sequence on this layout ('' when it
    can): the group of the largest power of two <= DP x CP ranks, ``tokens_per_rank`` each, the sequence padded to a
    multiple of 2*cp (:func:`dcpsim.policies.fit.dynamic_fit`, which refuses such a batch)."""
    if data.fixed:
        return ""
    ranks = gpus // (cand.tp * cand.pp)
    largest = 1 << (ranks.bit_length() - 1)
    if per_rank_tokens_int(data.longest, largest) <= cand.tokens_per_rank:
        return ""
    return (f"capacity: the longest sequence ({data.longest:,} tokens) does not fit the largest dynamic CP group "
            f"({largest} ranks x {cand.tokens_per_rank:,} tokens per rank; {cand.label()})")


def check_candidate(base: RunConfig, cand: Candidate, gpus: int, data: DataSpec, gbs: int,
                    common: dict[str, Any] | None = None) -> Checked:
    """Divisibility, batch and memory (the simulator's cost model) of one candidate.

    ``common``: updates applied with the layout's (the data, the policy), so that ``base`` need not be
    valid on ``gpus`` GPUs by itself.
    """
    why = batch_check(cand, gpus, data, gbs)
    if why:
        return Checked(cand, reason=why, kind="batch")
    try:
        cfg = light_config(base, {**(common or {}), **cand.updates(gpus)})
        cost = _cached_cost(cfg, key=(_base_token(base), cand.tp, cand.pp, cand.vp, cand.first_stage_layers,
                                      cand.last_stage_layers, cand.recompute, cand.precision, cand.flags),
                            dp_cp=cfg.dp * cand.cp)
        n = cfg.hardware.nvlink_domain_gpus
        check_tp_in_domain(cand.tp, cost.profile.nvlink_domain_gpus if n == "profile" else int(n))
    except (ConfigError, InfeasibleError) as exc:
        return Checked(cand, reason=f"layout: {exc}", kind="divisibility")
    mem, limit = memory_of(cost, cfg)
    if not mem <= limit:
        return Checked(cand, reason=f"memory: needs {mem / 2**30:.1f} GiB per GPU > limit {limit / 2**30:.1f} GiB "
                                    f"({cand.label()})", kind="memory", memory_bytes=mem, limit_bytes=limit)
    return Checked(cand, cfg=cfg, memory_bytes=mem, limit_bytes=limit)


def memory_of(cost, cfg: RunConfig) -> tuple[float, float]:
    """(peak bytes per GPU at the layout's tokens per rank, limit) from the simulator's cost model."""
    from dcpsim.cost.memory import peak_memory_one
    from dcpsim.run.single import microbatch_sum_sq

    mem = peak_memory_one(cost.settings, cfg.max_tokens_per_rank, microbatch_sum_sq(cfg))  # = peak_memory_bytes
    return mem, float(cost.memory_limit_bytes)


_COST_CACHE: dict[str, Any] = {}


_BASE_TOKENS: dict[int, tuple[RunConfig, str]] = {}
_COST_BY_CFG: dict[int, tuple[RunConfig, Any]] = {}


def _base_token(base: RunConfig) -> str:
    """``_cost_key(base)``, computed once per base configuration object (held, so its id is not reused)."""
    hit = _BASE_TOKENS.get(id(base))
    if hit is None or hit[0] is not base:
        if len(_BASE_TOKENS) > 256:
            _BASE_TOKENS.clear()
        hit = _BASE_TOKENS[id(base)] = (base, _cost_key(base, drop=("dp",)))
    return hit[1]


def _cached_cost(cfg: RunConfig, key: tuple | None = None, dp_cp: int | None = None):
    """The cost model ``run_simulation`` builds for ``cfg`` (:func:`dcpsim.run.single.build_cost_model`).

    Built once per layout without DP (``key``: what ``build_cost_model`` reads, from the candidate -- VP
    included, it sets the activations in flight; default: from ``cfg``); for each DP a derived model with its ``dp_cp`` (:meth:`CostModel.derive`) (the cost model uses ``dp_cp`` only to shard
    the optimizer state in its memory figure, so it is the model ``build_cost_model`` would return;
    tested). The cost model of a configuration checked here is found again by the configuration object.
    """
    from dcpsim.run.single import build_cost_model

    hit = _COST_BY_CFG.get(id(cfg))
    if hit is not None and hit[0] is cfg:
        return hit[1]
    if key is None:
        key = (_cost_key(cfg, drop=("dp", "cp", "mbs", "max_tokens_per_rank", "min_cp")),)
    dp_cp = dp_cp or cfg.dp * cfg.parallel.cp
    cost = _COST_CACHE.get((key, dp_cp))
    if cost is None:
        if len(_COST_CACHE) > 8192:
            _COST_CACHE.clear()
        proto = _COST_CACHE.get(key)
        if proto is None:
            proto = _COST_CACHE[key] = build_cost_model(cfg, profile=_profile(cfg.hardware.gpu))
        cost = proto.derive(dp_cp=dp_cp)
        _COST_CACHE[(key, dp_cp)] = cost
    if len(_COST_BY_CFG) > 16384:
        _COST_BY_CFG.clear()
    _COST_BY_CFG[id(cfg)] = (cfg, cost)
    return cost


_PROFILES: dict[str, Any] | None = None  # GPU name -> profile while a search runs (profiles_once)


@contextmanager
def profiles_once() -> Iterator[None]:
    """Within it, the cost models built here resolve each GPU's profile once (``get_profile`` looks the name up in
    the profile folders and stats the file each time; the profile is the same object while the file is unchanged)."""
    global _PROFILES
    outer = _PROFILES
    _PROFILES = {} if outer is None else outer
    try:
        yield
    finally:
        _PROFILES = outer


def _profile(name: str):
    from dcpsim.hardware import get_profile

    if _PROFILES is None:
        return get_profile(name)
    hit = _PROFILES.get(name)
    if hit is None:
        hit = _PROFILES[name] = get_profile(name)
    return hit
