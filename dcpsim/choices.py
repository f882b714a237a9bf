"""Every fixed set of choices in dcpsim's inputs, defined once.

Each choice set is a ``Literal`` type (used by the config models, so the
validation and the error message come from it) plus a tuple of its values
(``get_args``) for code, CLI ``choices=`` and documentation. Add a choice
here and every layer that reads it (config, CLI, docs) follows.
"""

from __future__ import annotations

from typing import Literal, get_args

from dcpsim.registry import Registry

CpComm = Literal["p2p", "all_gather", "a2a"]
"""How a CP group exchanges K/V: ring of point-to-point sends, all-gather, or all-to-all (Ulysses)."""

Recompute = Literal["none", "selective", "full"]
"""Activation recomputation: none, selective (attention core), or full (every layer)."""

Planning = Literal["hidden", "stall", "ignore", "sampler"]
"""Where the (modelled) planning time goes: hidden behind the previous iteration, stalls each iteration, ignored, or
overlapped as Megatron PR #2959's forked prefetching sampler does (:mod:`dcpsim.sim.sampler`)."""

Clip = Literal["drop", "truncate"]
"""What happens to sampled lengths outside [min_len, max_len]: redraw (drop) or clamp (truncate)."""

ParamGatherLaunch = Literal["first_forward", "step_start"]
"""When the distributed optimizer's overlapped parameter all-gather dispatches its first bucket (vp = 1):
at each stage's first forward pre-hook (Megatron-Core r0.9.0 on) or at the start of the training step on every
stage (Megatron-Core v0.6.0 .. r0.8.0, ``DistributedOptimizer.zero_grad``)."""

DynamicCpExchange = Literal["none", "async", "sync"]
"""Per-iteration scheduler communication of a dynamic plan: none, async (one small all-reduce), sync (lengths
all-gather and token all-to-all)."""

Precision = Literal["bf16", "fp8"]
"""GEMM precision of the transformer blocks (fp8 needs a profile with FP8 figures)."""

AttentionKernel = Literal["flash", "unfused"]
"""Attention kernels: fused (flash) or unfused (batched GEMMs + softmax + dropout over the L x L scores)."""

CrossEntropy = Literal["fused", "unfused"]
"""Loss kernels: one fused cross-entropy kernel, or Megatron-Core's unfused fp32 vocab-parallel passes."""

CP_COMM_TYPES: tuple[str, ...] = get_args(CpComm)
PRECISIONS: tuple[str, ...] = get_args(Precision)
ATTENTION_KERNELS: tuple[str, ...] = get_args(AttentionKernel)
CROSS_ENTROPY_KINDS: tuple[str, ...] = get_args(CrossEntropy)
CudaGraphs = Literal["none", "local", "transformer_engine"]
"""Megatron --cuda-graph-impl: no CUDA graphs, Megatron's local graphs, or Transformer Engine's."""

TransformerImpl = Literal["transformer_engine", "local"]
"""Megatron --transformer-impl: Transformer Engine modules or Megatron's local ones."""

RECOMPUTE_MODES: tuple[str, ...] = get_args(Recompute)
PLANNING_MODES: tuple[str, ...] = get_args(Planning)
CLIP_MODES: tuple[str, ...] = get_args(Clip)
PARAM_GATHER_LAUNCHES: tuple[str, ...] = get_args(ParamGatherLaunch)
CUDA_GRAPH_IMPLS: tuple[str, ...] = get_args(CudaGraphs)
TRANSFORMER_IMPLS: tuple[str, ...] = get_args(TransformerImpl)
EXCHANGES: tuple[str, ...] = get_args(DynamicCpExchange)

# Choices that name an extension (a class): registries (dcpsim.registry) whose built-ins are lazy
# "module:Class" paths, so the configuration checks a name without importing the simulator. The
# packages set each registry's base class (dcpsim.sim.networks, dcpsim.sim.engines). One line per built-in.
BUILTIN_POLICIES: dict[str, str] = {
    "packing": "dcpsim.policies.static:PackingPolicy",
    "packing-balanced": "dcpsim.policies.static:BalancedPackingPolicy",
    "dynamic": "dcpsim.policies.dynamic:DynamicPolicy",
    "dynamic-solver": "dcpsim.policies.solver:DynamicSolverPolicy",
    "bound": "dcpsim.policies.bound_policy:BoundPolicy",
    "milp": "dcpsim.policies.milp:MilpPolicy",
    "dynamic-pr2959": "dcpsim.policies.pr2959:Pr2959Policy",
    "packing-pr2959": "dcpsim.policies.static:NaivePackingPolicy",
}
POLICIES: Registry = Registry("policy.name", BUILTIN_POLICIES)
"""Scheduling policies (``policy.name``): :mod:`dcpsim.policies` (which sets the base class)."""

NETWORKS: Registry = Registry("sim.network", {
    "ideal": "dcpsim.sim.networks.ideal:IdealNetwork",
    "shared": "dcpsim.sim.networks.shared:SharedNetwork",
})
"""Network models (``sim.network``): :mod:`dcpsim.sim.networks`."""

ENGINES: Registry = Registry("sim.engine", {
    "auto": "dcpsim.sim.engines.auto:AutoEngine",
    "events": "dcpsim.sim.engines.events:EventEngine",
    "fast": "dcpsim.sim.engines.fast:FastEngine",
})
"""Engines (``sim.engine``): :mod:`dcpsim.sim.engines`."""
