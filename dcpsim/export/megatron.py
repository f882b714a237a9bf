"""Export a run configuration as what a Megatron-LM run of the same policy and layout needs.

:func:`export_megatron` writes, into one directory:

``megatron_args.txt``   the arguments, one flag (with its value) per line
``megatron_args.json``  the same as a token list and as a {flag: value} table
``launch.sh``           a torchrun + ``pretrain_gpt.py`` TEMPLATE using them (edit paths and nodes)
``lengths.csv``         one sampled global batch of sequence lengths (header ``length``; seeded)
``varlen_config.json``  the ``--varlen-mock-dataset-config-json`` value (file mode, THD format)
``expected.json``       what dcpsim predicts for this configuration (iteration time, TFLOPS/GPU, tokens/s)
``README.md``           how to run it and how to compare

Flags follow REFERENCE §1 and Megatron-LM's dev branch (its Dynamic-CP
benchmark example): policy ``packing`` maps to
``--sequence-packing-scheduler dp_balanced`` (static CP), ``dynamic`` to
``default_dynamic_cp`` with ``--dynamic-context-parallel``. The other
policies have no Megatron scheduler: export refuses them and names the
closest one, unless ``allow_approximate`` is set.

Before writing anything, the configuration is checked against Megatron's
constraints (micro-batch size 1 is implied; the dynamic domain DP×CP and the
minimum CP size must be powers of two; M·DP·CP ≥ maximum length for dynamic
CP and M·CP ≥ maximum length for static packing; global batch divisible by DP;
heads divisible by TP, and by TP×CP for ``a2a``; layers divisible by PP;
``parallel.vp`` > 1 only with an even split and dividing each stage's layers,
exported as ``--num-layers-per-virtual-pipeline-stage``; a variable-length
workload; policy options at the values Megatron's scheduler fixes).
A violation raises :class:`~dcpsim.errors.ConfigError` naming the field.
:data:`EXPORT_FIELDS` lists how every configuration field reaches the
exported run (a flag, the lengths, the layout, a check, or a named note).

The mock dataset reads ``lengths.csv`` with ``pandas.read_csv`` (the first
line is a header), so the file has a ``length`` header line.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.export.checks import (  # noqa: F401  (re-exported: these names stay importable from here)
    MEGATRON_POLICY_OPTIONS,
    SCHEDULERS,
    _check_a2a,
    _check_dynamic,
    _check_policy_options,
    _check_shapes,
    _check_static,
    _check_vp,
    _pow2,
    vocab_padding_note,
)
from dcpsim.run.config import RunConfig
from dcpsim.run.load import load_config
from dcpsim.serialize import to_jsonable as _plain

CLOSEST = {"packing-balanced": "packing", "dynamic-solver": "dynamic", "milp": "dynamic"}
DYNAMIC_SCHEDULERS = ("default_dynamic_cp",)
DEFAULT_TRAIN_ITERS = 30


@dataclass(frozen=True)
class MegatronExport:
    """The pieces of an export (also what :func:`export_megatron` wrote, in ``files``)."""

    policy: str
    megatron_policy: str
    scheduler: str
    approximate: bool
    args: list[str]
    lengths: np.ndarray
    varlen_config: dict[str, Any]
    expected: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    def flag_lines(self) -> list[str]:
        """The arguments grouped as one ``--flag [value]`` per line (shell-quoted)."""
        lines: list[list[str]] = []
        for tok in self.args:
            if tok.startswith("--") or not lines:
                lines.append([tok])
            else:
                lines[-1].append(tok)
        return [shlex.join(x) for x in lines]

    def flag_table(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for line in self.flag_lines():
            parts = shlex.split(line)
            out[parts[0]] = True if len(parts) == 1 else (parts[1] if len(parts) == 2 else parts[1:])
        return out


def resolve_policy(cfg: RunConfig, allow_approximate: bool = False) -> tuple[str, bool]:
    """The Megatron policy (``packing`` or ``dynamic``) for ``cfg.policy.name``, and whether it is an approximation."""
    name = cfg.policy.name
    if name in SCHEDULERS:
        return name, False
    if name in CLOSEST:
        close = CLOSEST[name]
        if allow_approximate:
            return close, True
        raise ConfigError("policy.name", name,
                          f"a policy Megatron-LM implements ({sorted(SCHEDULERS)}); the closest Megatron scheduler is "
                          f"{SCHEDULERS[close]} (policy {close!r}); pass --allow-approximate to export that instead")
    raise ConfigError("policy.name", name,
                      f"a policy Megatron-LM implements ({sorted(SCHEDULERS)}); {name!r} has no Megatron equivalent")


def train_iters_for(cfg: RunConfig, train_iters: int | None = None) -> int:
    """``--train-iters`` of the exported run: ``train_iters``, else ``max(30, 3 × step.log_interval)`` so that
    Megatron logs the iteration time at least three times (its log lines average over ``--log-interval``)."""
    return int(train_iters) if train_iters is not None else max(DEFAULT_TRAIN_ITERS, 3 * cfg.step.log_interval)


def check_megatron(cfg: RunConfig, policy: str, train_iters: int | None = None) -> list[str]:
    """Refuse (ConfigError naming the field) what Megatron would reject; return notes on what does not carry over."""
    from dcpsim.model import get_model

    m = get_model(cfg.model.name)
    if cfg.is_fixed:
        raise ConfigError("workload.name", "fixed", "a variable-length workload (a preset, lengths file or table): the "
                          "export drives Megatron's variable-length mock dataset and sequence-packing scheduler; a "
                          "fixed-length run is plain Megatron pre-training (--seq-length, --micro-batch-size)")
    if cfg.workload.max_len is None:
        raise ConfigError("workload.max_len", None, "a maximum sequence length (Megatron's --seq-length)")
    _check_shapes(cfg, m)
    dynamic = policy == "dynamic"
    notes = _check_dynamic(cfg) if dynamic else _check_static(cfg)
    _check_a2a(cfg, m, dynamic)
    _check_vp(cfg, m)
    _check_policy_options(cfg, policy)
    return notes + vocab_padding_note(cfg, m) + _carry_over_notes(cfg, dynamic, train_iters_for(cfg, train_iters))


def param_gather_rule_note(cfg: RunConfig) -> str | None:
    """Which Megatron-Core version's parameter all-gather launch the timing assumes (``sim.param_gather_launch``;
    no flag selects it: it is a property of the Megatron version), or ``None`` when it does not apply (no
    --overlap-param-gather, vp > 1, or one pipeline stage, where both rules give the same times)."""
    s, p = cfg.sim, cfg.parallel
    if not (s.overlap_grad_sync and s.overlap_param_gather) or p.vp != 1 or p.pp == 1:
        return None
    if s.param_gather_launch == "step_start":
        return ("the timing assumes Megatron-Core core_v0.6.0 .. core_r0.8.0's parameter all-gather launch "
                "(sim.param_gather_launch = 'step_start': DistributedOptimizer.zero_grad dispatches the first bucket "
                "at the step's start on every stage); Megatron-Core core_r0.9.0 and later (the dev branch this export "
                "targets) dispatches it from each stage's first forward pre-hook, so stages > 0 wait for their whole "
                "all-gather on the pipeline fill: simulate with sim.param_gather_launch = 'first_forward' to compare")
    return ("the timing assumes the parameter all-gather launch of Megatron-Core core_r0.9.0 and later "
            "(sim.param_gather_launch = 'first_forward': each stage's first forward pre-hook dispatches its first "
            "bucket); on Megatron-Core "
            "core_r0.8.0 or older (launched at the step's start) simulate with sim.param_gather_launch = 'step_start'")


def _carry_over_notes(cfg: RunConfig, dynamic: bool, train_iters: int = DEFAULT_TRAIN_ITERS) -> list[str]:
    """What the simulation includes that a Megatron flag cannot express."""
    s, notes = cfg.sim, []
    rule = param_gather_rule_note(cfg)
    if rule:
        notes.append(rule)
    if s.noise_cv or (s.straggler_fraction and s.straggler_slowdown != 1.0) or s.degraded_link_scale != 1.0 or cfg.hardware.network_scale != 1.0:
        notes.append("simulated variability/degradation (noise, stragglers, degraded links, network_scale) "
                     "has no Megatron flag: expected.json includes it, the real run does not")
    if dynamic and s.planning == "sampler":
        notes.append(f"the simulation overlaps planning as Megatron PR #2959's forked prefetching sampler does "
                     f"(sim.planning='sampler', {s.sampler_prefetch} microbatch indices prefetched); Megatron's dev "
                     "branch plans synchronously, so a real run may be slower by the planning time")
    if dynamic and s.planning == "hidden":
        notes.append("the simulation hides planning time (sim.planning='hidden'); Megatron's dev branch plans "
                     "synchronously, so a real run may be slower by the planning time")
    h = cfg.hardware
    if h.pod_gpus != "flat" or h.oversubscription != 1.0 or h.nvlink_domain_gpus != "profile":
        notes.append("network topology (pod_gpus, oversubscription, nvlink_domain_gpus) is a property of the "
                     "cluster, not a flag: run on a cluster that has it")
    if dynamic and not s.dynamic_cp_padding:
        notes.append("the simulation does not pad samples as Megatron's dynamic-CP data path does "
                     "(sim.dynamic_cp_padding = false); set it true to time the padding the real run pays")
    if dynamic and s.dynamic_cp_exchange != "none":
        notes.append(f"sim.dynamic_cp_exchange = {s.dynamic_cp_exchange!r} models the scheduler's per-iteration "
                     "exchange of the Megatron version; no flag selects it")
    if s.cp_switch_s or s.microbatch_overhead_s:
        notes.append("sim.cp_switch_s / sim.microbatch_overhead_s are assumed overheads added to the timing "
                     "(sensitivity settings), not flags")
    st = cfg.step
    if train_iters < 2 * st.log_interval:
        notes.append(f"--log-interval {st.log_interval} (step.log_interval) with --train-iters {train_iters}: "
                     f"Megatron logs {train_iters // st.log_interval} time(s); to compare per-iteration times set "
                     "step.log_interval = 1 (simulated with its per-step sync) or raise --train-iters")
    if not s.host_timeline:
        notes.append("sim.host_timeline = false times the step without its host (CPU) dispatch costs: a what-if; "
                     "the real run pays them (CUDA graphs, --cuda-graph-impl, remove part of them)")
    if s.long_run_hours > 0:
        notes.append("the long-run goodput figures (sim.long_run_hours and the failure settings) describe the "
                     "cluster's failures; the short exported run measures none of them")
    return notes


# How every RunConfig field reaches the exported run (tests/test_export.py checks each field is listed):
#   flag   - a Megatron argument in megatron_args.txt
#   data   - lengths.csv (the sampled global batches the mock dataset reads)
#   layout - launch.sh / the parallel sizes (dp = gpus / (tp*pp*cp))
#   check  - only values Megatron accepts are exported; others raise ConfigError naming the field
#   note   - no flag can express it (a property of the cluster or of the Megatron version); a non-default value
#            is named under "What does not carry over" in README.md and in the command's output
#   cluster- the hardware the exported run needs (README.md names it)
#   model  - how the simulator models what the real run does anyway (sim.network = "shared": links are shared)
#   none   - does not change the simulated iteration (how it is computed, or the summary's extras)
EXPORT_FIELDS: dict[str, str] = {
    "model.name": "flag",
    "hardware.gpu": "cluster", "hardware.network_scale": "note", "hardware.pod_gpus": "note",
    "hardware.oversubscription": "note", "hardware.nvlink_domain_gpus": "note",
    "cluster.gpus": "layout",
    "parallel.tp": "flag", "parallel.pp": "flag", "parallel.cp": "flag", "parallel.min_cp": "flag",
    "parallel.max_tokens_per_rank": "flag", "parallel.cp_comm": "flag", "parallel.recompute": "flag",
    "parallel.mbs": "check", "parallel.vp": "flag", "parallel.precision": "flag",
    "parallel.first_stage_layers": "flag", "parallel.last_stage_layers": "flag", "parallel.cross_entropy": "flag",
    "parallel.attention": "flag", "parallel.rope_fusion": "flag",
    "workload.name": "data", "workload.gbs": "flag", "workload.min_len": "data", "workload.max_len": "flag",
    "workload.clip": "data", "workload.seq_len": "check", "workload.documents": "check",
    "policy.name": "flag", "policy.options": "check",
    "sim.iterations": "data", "sim.seed": "data", "sim.noise_cv": "note", "sim.straggler_fraction": "note",
    "sim.straggler_slowdown": "note", "sim.degraded_link_scale": "note", "sim.overlap_grad_sync": "flag",
    "sim.overlap_param_gather": "flag", "sim.param_gather_launch": "note", "sim.tp_comm_overlap": "flag",
    "sim.grad_bucket_params": "flag", "sim.planning": "note", "sim.grad_reduce_bytes_per_param": "flag",
    "sim.sampler_prefetch": "note",
    "sim.fp8_param_gather": "flag", "sim.dynamic_cp_padding": "note", "sim.dynamic_cp_exchange": "note",
    "sim.cp_switch_s": "note", "sim.microbatch_overhead_s": "note", "sim.host_timeline": "note", "sim.engine": "none", "sim.network": "model",
    "sim.long_run_hours": "note", "sim.long_run_seeds": "none", "sim.gpu_mtbf_h": "none", "sim.checkpoint_s": "none",
    "sim.restart_s": "none", "sim.checkpoint_interval_s": "none", "sim.slow_gpu_per_day": "none",
    "sim.slow_gpu_episode_s": "none", "sim.slow_gpu_slowdown": "none", "sim.degraded_link_per_day": "none",
    "sim.degraded_link_episode_s": "none", "sim.degraded_link_episode_scale": "none",
    **{f"step.{f}": "flag" for f in ("log_interval", "log_params_norm", "log_num_zeros_in_grad", "log_memory",
                                     "log_timers", "timing_log_level", "deterministic", "cuda_graphs", "clip_grad",
                                     "transformer_impl", "grad_accumulation_fusion", "manual_gc",
                                     "check_for_nan_in_loss_and_grad", "overlap_p2p_comm", "test_mode_qk_checks")},
    # the export is a packed (variable-length) run, which always sets --no-create-attention-mask-in-dataloader; the
    # time model reads the dataloader mask of fixed-length runs only (cost_settings, StepFlags.packed)
    "step.attention_mask_in_dataloader": "none",
}


def cost_mechanism_flags(cfg: RunConfig) -> list[str]:
    """Flags of the mechanisms the cost model prices: attention kernels, precision, uneven stages, overlap."""
    p, sim = cfg.parallel, cfg.sim
    unfused = p.attention == "unfused"
    # unfused attention is priced with Megatron's default attention dropout (dcpsim.cost.model)
    a = ["--attention-dropout", "0.1" if unfused else "0.0", "--attention-backend", "unfused" if unfused else "flash"]
    if p.precision == "fp8":  # FP8 weights (+ transpose) in place of BF16: the 2 B per parameter the memory model counts
        a += ["--fp8-format", "hybrid"]
        if cfg.sim.fp8_param_gather:  # the time model all-gathers the block weights at 1 B (dcpsim.sim.durations)
            a += ["--fp8-param-gather"]
    if p.cross_entropy == "fused":
        a += ["--cross-entropy-loss-fusion"]
    if not p.rope_fusion:  # the export writes --position-embedding-type rope (Llama family)
        a += ["--no-rope-fusion"]
    if p.first_stage_layers:
        a += ["--decoder-first-pipeline-num-layers", str(p.first_stage_layers)]
    if p.last_stage_layers:
        a += ["--decoder-last-pipeline-num-layers", str(p.last_stage_layers)]
    if sim.overlap_grad_sync:
        a += ["--overlap-grad-reduce"] + (["--overlap-param-gather"] if sim.overlap_param_gather else [])
    if sim.grad_bucket_params:
        a += ["--ddp-bucket-size", str(sim.grad_bucket_params)]
    if sim.grad_reduce_bytes_per_param == 2:  # BF16 gradient buffer and reduce (Megatron-LM, Feb 2025 on)
        a += ["--grad-reduce-in-bf16"]
    if sim.tp_comm_overlap and p.tp > 1:
        a += ["--tp-comm-overlap"]
    return a


def step_flags(cfg: RunConfig) -> list[str]:
    """Flags of the ``[step]`` settings (logging and its syncs, deterministic kernels, CUDA graphs, clipping)."""
    st = cfg.step
    a = ["--clip-grad", f"{st.clip_grad:g}", "--log-interval", str(st.log_interval)]
    for on, name in ((st.log_params_norm, "--log-params-norm"), (st.log_num_zeros_in_grad, "--log-num-zeros-in-grad"),
                     (st.log_memory, "--log-memory-to-tensorboard"), (st.log_timers, "--log-timers-to-tensorboard"),
                     (st.deterministic, "--deterministic-mode"), (not st.grad_accumulation_fusion,
                                                                     "--no-gradient-accumulation-fusion"),
                     (st.manual_gc, "--manual-gc"),
                     (not st.check_for_nan_in_loss_and_grad, "--no-check-for-nan-in-loss-and-grad"),
                     (not st.overlap_p2p_comm, "--no-overlap-p2p-communication"),
                     (st.test_mode_qk_checks, "--test-mode")):
        if on:
            a.append(name)
    from dcpsim.model import get_model

    if get_model(cfg.model.name).qk_layernorm or st.test_mode_qk_checks:  # --test-mode's checks compare q/k norms
        a.append("--qk-layernorm")
    if st.timing_log_level:
        a += ["--timing-log-level", str(st.timing_log_level)]
    if st.cuda_graphs != "none":
        a += ["--cuda-graph-impl", st.cuda_graphs]
    return a


def megatron_args(cfg: RunConfig, *, policy: str | None = None, lengths_path: str = "lengths.csv",
                  train_iters: int | None = None, allow_approximate: bool = False) -> list[str]:
    """The Megatron-LM argument list (tokens) for ``cfg`` (checked first; see :func:`check_megatron`)."""
    from dcpsim.model import get_model

    if policy is None:
        policy, _ = resolve_policy(cfg, allow_approximate)
    check_megatron(cfg, policy)
    m = get_model(cfg.model.name)
    p = cfg.parallel
    max_len = int(cfg.workload.max_len)
    a: list[str] = []

    def flag(name: str, *vals: Any) -> None:
        a.append(name)
        a.extend(str(v) for v in vals)

    # model (Llama family: RMSNorm, SwiGLU, RoPE, no biases)
    flag("--num-layers", m.n_layers)
    flag("--hidden-size", m.hidden)
    flag("--ffn-hidden-size", m.ffn_hidden)
    flag("--num-attention-heads", m.n_heads)
    if m.head_dim * m.n_heads != m.hidden:
        flag("--kv-channels", m.head_dim)
    if m.n_kv_heads != m.n_heads:
        flag("--group-query-attention")
        flag("--num-query-groups", m.n_kv_heads)
    if m.gated_mlp:
        flag("--swiglu")
    flag("--normalization", "RMSNorm")
    flag("--position-embedding-type", "rope")
    flag("--disable-bias-linear")
    if not m.tied_embeddings:
        flag("--untie-embeddings-and-output-weights")
    flag("--seq-length", max_len)
    flag("--max-position-embeddings", max_len)
    flag("--hidden-dropout", m.hidden_dropout)  # the memory model stores its masks when > 0
    flag("--transformer-impl", cfg.step.transformer_impl)
    flag("--bf16")
    # parallelism
    flag("--tensor-model-parallel-size", p.tp)
    flag("--pipeline-model-parallel-size", p.pp)
    flag("--context-parallel-size", p.cp)
    if p.vp > 1:  # interleaved 1F1B: vp chunks of layers/(pp*vp) layers per pipeline rank (even split, _check_vp)
        flag("--num-layers-per-virtual-pipeline-stage", m.n_layers // (p.pp * p.vp))
    flag("--cp-comm-type", p.cp_comm)
    if p.tp > 1:
        flag("--sequence-parallel")
    flag("--use-distributed-optimizer")
    a += cost_mechanism_flags(cfg)
    # variable-length packing and the scheduler
    flag("--sequence-packing-scheduler", SCHEDULERS[policy])
    flag("--max-seqlen-per-dp-cp-rank", cfg.max_tokens_per_rank)
    if policy == "dynamic":
        flag("--dynamic-context-parallel")
        flag("--min-dynamic-context-parallel-size", p.min_cp)
    flag("--calculate-per-token-loss")
    flag("--micro-batch-size", 1)
    flag("--global-batch-size", cfg.workload.gbs)
    # recomputation
    if p.recompute == "full":
        flag("--recompute-granularity", "full")
        flag("--recompute-method", "uniform")
        flag("--recompute-num-layers", 1)
    elif p.recompute == "selective":
        flag("--recompute-granularity", "selective")
    # data: mock variable-length dataset reading the exported lengths
    flag("--use-varlen-dataset")
    flag("--mock-data")
    flag("--varlen-mock-dataset-config-json", json.dumps(varlen_config(lengths_path), separators=(",", ":")))
    flag("--tokenizer-type", "NullTokenizer")
    flag("--vocab-size", m.vocab)
    flag("--null-tokenizer-pad-id", 0)
    flag("--dataloader-type", "single")
    flag("--no-create-attention-mask-in-dataloader")
    flag("--split", "99,1,0")
    # a short benchmark run
    flag("--train-iters", train_iters_for(cfg, train_iters))
    flag("--lr", "1.0e-4")
    flag("--min-lr", "1.0e-5")
    flag("--lr-decay-style", "cosine")
    flag("--lr-warmup-iters", 0)
    flag("--weight-decay", 0.1)
    flag("--seed", cfg.sim.seed)
    a += step_flags(cfg)
    flag("--log-throughput")
    flag("--eval-interval", 1000000)
    flag("--eval-iters", 1)
    return a


def varlen_config(lengths_path: str = "lengths.csv") -> dict[str, Any]:
    """The ``--varlen-mock-dataset-config-json`` value: lengths read from a CSV, THD (packed) format."""
    return {"mode": "file", "format": "thd", "path": lengths_path}


def sample_lengths(cfg: RunConfig, batches: int = 1) -> np.ndarray:
    """``batches`` global batches of lengths, concatenated: the ones ``dcpsim simulate`` draws for ``cfg``
    (:func:`dcpsim.run.single.sample_batches`: same seed, same stream, same order)."""
    from dcpsim.run.single import sample_batches

    return np.concatenate(sample_batches(cfg, batches)).astype(np.int64)


def build_export(cfg: RunConfig, *, allow_approximate: bool = False, simulate: bool = True,
                 lengths_path: str = "lengths.csv", train_iters: int | None = None) -> MegatronExport:
    """Check ``cfg``, and build the arguments, lengths and (if ``simulate``) the simulated expectations."""
    from dcpsim.run.single import check_memory

    policy, approx = resolve_policy(cfg, allow_approximate)
    notes = check_megatron(cfg, policy, train_iters)
    # what the simulator calls infeasible is not exported: model states here, every simulated pack below;
    # without a simulation a full microbatch of max_tokens_per_rank tokens per rank must fit
    check_memory(cfg, full_microbatch=not simulate)
    if approx:
        notes.insert(0, f"policy {cfg.policy.name!r} has no Megatron scheduler; exported as {policy!r} "
                        f"({SCHEDULERS[policy]}), the closest; expected.json still simulates {cfg.policy.name!r}")
    args = megatron_args(cfg, policy=policy, lengths_path=lengths_path, train_iters=train_iters)
    from dcpsim.run.single import sample_batches

    # the batches `dcpsim simulate` draws for this config (same stream): expected.json is its answer
    batches = sample_batches(cfg)
    lengths = np.concatenate(batches).astype(np.int64)
    expected = None
    if simulate:
        from dcpsim.run.single import run_simulation

        # simulate exactly the exported lengths, one global batch per iteration
        res = run_simulation(cfg, batches=batches)
        s = {str(k): v for k, v in dict(res.summary).items()}
        keys = ("iteration_time_s", "tflops_per_gpu", "tokens_per_s", "mfu")
        expected = {k: s.get(k) for k in keys} | {
            "config_hash": cfg.config_hash(),
            "simulated_policy": cfg.policy.name,
            "lengths": "lengths.csv (the simulated global batches, in order)",
            "summary": s,
            "config": cfg.resolved(),
        }
        if approx and policy != cfg.policy.name:
            alt = run_simulation(cfg.with_updates({"policy.name": policy}), batches=batches)
            expected["exported_policy"] = {k: dict(alt.summary).get(k) for k in keys} | {"policy": policy}
    return MegatronExport(cfg.policy.name, policy, SCHEDULERS[policy], approx, args, lengths,
                          varlen_config(lengths_path), expected, notes)


def launch_gpus_per_node(cfg: RunConfig, gpus_per_node: int | None = None) -> int:
    """GPUs per node of the launch template: ``gpus_per_node`` (``--gpus-per-node``), which must divide
    ``cluster.gpus`` (torchrun starts the same number on every node), else the hardware profile's (all the GPUs
    when the run has fewer than one node). ConfigError naming the field when the nodes cannot be filled evenly."""
    gpus = cfg.cluster.gpus
    if gpus_per_node is not None:
        if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1 \
                or gpus % gpus_per_node:
            raise ConfigError("--gpus-per-node", gpus_per_node,
                              f"a divisor of cluster.gpus = {gpus} (every node runs the same number of ranks)")
        return gpus_per_node
    from dcpsim.hardware import get_profile

    per = int(get_profile(cfg.hardware.gpu).gpus_per_node)
    if gpus <= per:
        return gpus
    if gpus % per:
        raise ConfigError("cluster.gpus", gpus, f"a multiple of the {per} GPUs per node of {cfg.hardware.gpu!r} "
                          "for the launch template (or pass --gpus-per-node, a divisor of cluster.gpus)")
    return per


def _launch_script(exp: MegatronExport, cfg: RunConfig, gpus_per_node: int) -> str:
    nnodes = cfg.cluster.gpus // gpus_per_node  # a divisor (launch_gpus_per_node)
    lines = []
    for line in exp.flag_lines():
        if line.startswith("--varlen-mock-dataset-config-json"):
            cfg_json = json.dumps(varlen_config("__LENGTHS__"), separators=(",", ":"))
            q = cfg_json.replace('"', '\\"').replace("__LENGTHS__", "${EXPORT_DIR}/lengths.csv")
            line = f'--varlen-mock-dataset-config-json "{q}"'
        lines.append(f"    {line} \\")
    args = "\n".join(lines)
    note = param_gather_rule_note(cfg)
    rule = "\n# Note: " + note.replace("; ", ";\n#   ") if note else ""
    return f"""#!/usr/bin/env bash
# TEMPLATE written by `dcpsim export` (config {cfg.config_hash()}, policy {exp.policy} -> {exp.scheduler}).
# It is a starting point, not a tested job script: set MEGATRON_DIR, the node list / rendezvous for your
# cluster (or wrap it in srun), and check the arguments against your Megatron-LM version.
# Layout: {cfg.cluster.gpus} GPUs = TP {cfg.parallel.tp} x PP {cfg.parallel.pp} x CP {cfg.parallel.cp} x DP {cfg.dp}.{rule}
set -euo pipefail
EXPORT_DIR="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
MEGATRON_DIR="${{MEGATRON_DIR:?set MEGATRON_DIR to a Megatron-LM checkout (dev branch)}}"
GPUS_PER_NODE="${{GPUS_PER_NODE:-{gpus_per_node}}}"
NNODES="${{NNODES:-{nnodes}}}"
NODE_RANK="${{NODE_RANK:-0}}"
MASTER_ADDR="${{MASTER_ADDR:-localhost}}"
MASTER_PORT="${{MASTER_PORT:-6000}}"
export CUDA_DEVICE_MAX_CONNECTIONS=1

cd "$MEGATRON_DIR"
torchrun --nproc_per_node "$GPUS_PER_NODE" --nnodes "$NNODES" --node_rank "$NODE_RANK" \\
    --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \\
    pretrain_gpt.py \\
{args}
    "$@" 2>&1 | tee "$EXPORT_DIR/megatron_run.log"
"""


def _readme(exp: MegatronExport, cfg: RunConfig) -> str:
    e = exp.expected or {}

    def f(k: str, fmt: str) -> str:
        v = e.get(k)
        return format(v, fmt) if isinstance(v, (int, float)) else "(not simulated)"

    notes = "\n".join(f"- {n}" for n in exp.notes) or "- none"
    return f"""# Megatron-LM run exported by dcpsim

Configuration `{cfg.config_hash()}`: model `{cfg.model.name}`, {cfg.cluster.gpus} × `{cfg.hardware.gpu}`,
TP {cfg.parallel.tp} × PP {cfg.parallel.pp} × CP {cfg.parallel.cp} × DP {cfg.dp}, workload `{cfg.workload.name}`
(global batch {cfg.workload.gbs} sequences, lengths {cfg.workload.min_len}–{cfg.workload.max_len}),
policy `{exp.policy}` → Megatron scheduler `{exp.scheduler}`{" (approximation)" if exp.approximate else ""}.

## Files

- `megatron_args.txt` / `megatron_args.json`: the arguments for `pretrain_gpt.py` (one flag per line).
- `launch.sh`: a torchrun template with those arguments. Set `MEGATRON_DIR` (and `NNODES`, `NODE_RANK`,
  `MASTER_ADDR` on a multi-node cluster); extra arguments are passed through.
- `lengths.csv`: {len(exp.lengths)} sequence lengths ({cfg.sim.iterations} global batch(es), seed {cfg.sim.seed}),
  header `length`. Megatron's mock variable-length dataset reads it in file mode
  (`varlen_config.json`, passed as `--varlen-mock-dataset-config-json`); the path in
  `megatron_args.*` is the one at export time, `launch.sh` uses the file next to itself.
- `expected.json`: what dcpsim predicts for this configuration, simulated on exactly the lengths in
  `lengths.csv` (one global batch per simulated iteration).

## Compare

Predicted: iteration time {f("iteration_time_s", ".3f")} s, {f("tflops_per_gpu", ".1f")} TFLOPS/GPU,
{f("tokens_per_s", ",.0f")} tokens/s.

1. Run `launch.sh` (it logs to `megatron_run.log` with `--log-throughput`, every `--log-interval` steps:
   `step.log_interval`, Megatron's 100 by default, each log line averaging that many iterations; `--train-iters`
   defaults to three log intervals; export with `--set step.log_interval=1` to log each step).
2. Drop the first few iterations (warm-up, NCCL set-up); take the median of
   `elapsed time per iteration (ms)` and of `throughput per GPU (TFLOP/s/GPU)` over the rest.
3. Compare with `iteration_time_s` and `tflops_per_gpu` above. Megatron counts the same model FLOPs
   as dcpsim (REFERENCE §2), so the TFLOPS ratio is the inverse ratio of iteration times.
   The mock dataset visits the lengths in its own sampler order, so compare medians over many
   iterations rather than single iterations.
4. For the Dynamic-CP gain, export the same configuration with `policy.name = "packing"` and
   `"dynamic"` and compare the two ratios (real vs simulated).

## What does not carry over

{notes}
"""


def export_megatron(cfg: RunConfig | str | Path, out_dir: str | Path, *, allow_approximate: bool = False,
                    simulate: bool = True, train_iters: int | None = None,
                    gpus_per_node: int | None = None, force: bool = False) -> MegatronExport:
    """Check ``cfg`` against Megatron's constraints and write the export files into ``out_dir``.

    ``cfg``: a RunConfig or a run TOML path. Raises ConfigError (nothing is
    written) when Megatron would reject the configuration. ``simulate=False``
    skips ``expected.json``. ``gpus_per_node`` for the launch template
    (a divisor of ``cluster.gpus``; default: the hardware profile's, see
    :func:`launch_gpus_per_node`). ``out_dir`` is checked first:
    an existing folder may hold only files dcpsim wrote unless ``force``
    (:mod:`dcpsim.outdir`); every file is written atomically.
    """
    from dcpsim.outdir import check_out_dir, write_text

    if not isinstance(cfg, RunConfig):
        cfg = load_config(cfg)
    out = check_out_dir(out_dir, force=force)
    if train_iters is not None and train_iters < 1:
        raise ConfigError("train_iters", train_iters, "a positive number of iterations")
    gpus_per_node = launch_gpus_per_node(cfg, gpus_per_node)
    exp = build_export(cfg, allow_approximate=allow_approximate, simulate=simulate,
                       lengths_path=str((out / "lengths.csv").resolve()), train_iters=train_iters)
    files: dict[str, str] = {}

    def write(name: str, text: str, mode: int | None = None) -> None:
        files[name] = str(write_text(out / name, text, mode=mode))

    write("megatron_args.txt", "\n".join(exp.flag_lines()) + "\n")
    write("megatron_args.json", json.dumps({"policy": exp.policy, "megatron_policy": exp.megatron_policy,
                                            "scheduler": exp.scheduler, "approximate": exp.approximate,
                                            "args": exp.args, "flags": exp.flag_table()}, indent=2) + "\n")
    write("lengths.csv", "length\n" + "\n".join(str(int(x)) for x in exp.lengths) + "\n")
    write("varlen_config.json", json.dumps(varlen_config("lengths.csv"), indent=2) + "\n")
    if exp.expected is not None:
        write("expected.json", json.dumps(_plain(exp.expected), indent=2) + "\n")
    write("launch.sh", _launch_script(exp, cfg, gpus_per_node), mode=0o755)
    write("README.md", _readme(exp, cfg))
    return MegatronExport(exp.policy, exp.megatron_policy, exp.scheduler, exp.approximate, exp.args, exp.lengths,
                          exp.varlen_config, exp.expected, exp.notes, files)
