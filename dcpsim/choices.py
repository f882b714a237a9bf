"""Every fixed set of choices in dcpsim's inputs, defined once.

Each choice set is a ``Literal`` type (used by the config models, so the
validation and the error message come from it) plus a tuple of its values
(``get_args``) for code, CLI ``choices=`` and documentation. Add a choice
here and every layer that reads it (config, CLI, docs) follows.
"""

from __future__ import annotations

from typing import Literal, get_args

CpComm = Literal["p2p", "all_gather", "a2a"]
"""How a CP group exchanges K/V: ring of point-to-point sends, all-gather, or all-to-all (Ulysses)."""

Recompute = Literal["none", "selective", "full"]
"""Activation recomputation: none, selective (attention core), or full (every layer)."""

Planning = Literal["hidden", "stall", "ignore"]
"""Where the (modelled) planning time goes: hidden behind the previous iteration, stalls each iteration, or ignored."""

Clip = Literal["drop", "truncate"]
"""What happens to sampled lengths outside [min_len, max_len]: redraw (drop) or clamp (truncate)."""

ParamGatherLaunch = Literal["first_forward", "step_start"]
"""When the distributed optimizer's overlapped parameter all-gather dispatches its first bucket (vp = 1):
at each stage's first forward pre-hook (Megatron-Core r0.9.0 on) or at the start of the training step on every
stage (Megatron-Core v0.6.0 .. r0.8.0, ``DistributedOptimizer.zero_grad``)."""

CP_COMM_TYPES: tuple[str, ...] = get_args(CpComm)
RECOMPUTE_MODES: tuple[str, ...] = get_args(Recompute)
PLANNING_MODES: tuple[str, ...] = get_args(Planning)
CLIP_MODES: tuple[str, ...] = get_args(Clip)
PARAM_GATHER_LAUNCHES: tuple[str, ...] = get_args(ParamGatherLaunch)
