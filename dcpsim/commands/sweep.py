"""``dcpsim sweep SPEC --out DIR``: run (or resume) a sweep; results land in DIR/results as parquet parts."""

from __future__ import annotations

import sys

from dcpsim.commands._common import POS_FLOAT, POS_INT, add_force, print_json, print_table, profile_label


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run many configurations (grid / zip / random axes) into a resumable parquet dataset",
        description="Run a sweep spec (see dcpsim/run/sweep.py or experiments/sweeps/example_sweep.toml). "
        "Finished runs are written as they finish; starting the same command again resumes. "
        "Ctrl-C writes the tasks that finish within a second, abandons the rest (they run again on resume) and "
        "exits with status 130.",
    )
    p.add_argument("spec", help="sweep spec TOML ([base] + [[axes]])")
    p.add_argument("--out", required=True, help="output directory (results/, figures/, spec.toml, sweep.json)")
    p.add_argument("-j", "--jobs", type=POS_INT, default=None, help="local worker processes (default: all cores; 1 = in this process)")
    p.add_argument("--batch-size", type=POS_INT, default=None, help="runs per task (default: adaptive, tasks of ~1.5 s)")
    p.add_argument("--dask-address", default=None, metavar="tcp://HOST:PORT", help="send tasks to this running Dask scheduler")
    p.add_argument("--dask-wait", type=POS_FLOAT, default=None, metavar="SECONDS",
                   help="with --dask-address: seconds to wait for the scheduler's first worker (default 60)")
    p.add_argument("--dask-local", type=POS_INT, default=None, metavar="N", help="start a Dask LocalCluster of N single-threaded worker processes (127.0.0.1)")
    s = p.add_argument_group("SLURM (via dask-jobqueue; workers must be able to import dcpsim)")
    s.add_argument("--slurm", action="store_true", help="start Dask workers as SLURM jobs")
    s.add_argument("--slurm-jobs", type=POS_INT, default=1, help="number of SLURM jobs (default 1)")
    s.add_argument("--slurm-cores", type=POS_INT, default=16, help="cores per job (default 16)")
    s.add_argument("--slurm-processes", type=POS_INT, default=None, help="worker processes per job (default: one per core)")
    s.add_argument("--slurm-memory", default="32GB", help="memory per job (default 32GB)")
    s.add_argument("--slurm-walltime", default="01:00:00", help="time limit per job (default 01:00:00)")
    s.add_argument("--slurm-queue", default=None, help="partition (#SBATCH -p)")
    s.add_argument("--slurm-account", default=None, help="account (#SBATCH -A)")
    s.add_argument("--slurm-interface", default=None, help="network interface for the workers, e.g. ib0")
    s.add_argument("--slurm-extra", action="append", default=[], help="extra #SBATCH directive (repeatable), e.g. --slurm-extra=--gres=none")
    s.add_argument("--slurm-prologue", action="append", default=[], help="shell line run before the worker (repeatable), e.g. 'source .venv/bin/activate'")
    s.add_argument("--slurm-python", default=None, help="python on the compute nodes (default: this one)")
    p.add_argument("--no-figures", action="store_true", help="do not write the standard figures")
    p.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show the progress bar")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="never show the progress bar (default: only on a terminal)")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("--yes", action="store_true", help="confirm a sweep above the size limit (100,000 runs)")
    add_force(p)
    p.set_defaults(func=run)


_SLURM_DEFAULTS = {"jobs": 1, "cores": 16, "processes": None, "memory": "32GB", "walltime": "01:00:00", "queue": None,
                   "account": None, "interface": None, "extra": [], "prologue": [], "python": None}


def slurm_options(args):
    from dcpsim.errors import ConfigError
    from dcpsim.run.executors import SlurmOptions

    if not args.slurm:
        given = [f"--slurm-{k.replace('_', '-')}" for k, default in _SLURM_DEFAULTS.items() if getattr(args, f"slurm_{k}") != default]
        if given:
            raise ConfigError("--slurm", False, f"--slurm when {', '.join(given)} is given")
        return None
    return SlurmOptions(jobs=args.slurm_jobs, cores=args.slurm_cores, processes=args.slurm_processes,
                        memory=args.slurm_memory, walltime=args.slurm_walltime, queue=args.slurm_queue,
                        account=args.slurm_account, interface=args.slurm_interface, job_extra=tuple(args.slurm_extra),
                        prologue=tuple(args.slurm_prologue), python=args.slurm_python)


def run(args) -> int:
    from dcpsim.report.plots import standard_figures
    from dcpsim.run.executors import make_executor
    from dcpsim.run.sweep import (
        SweepInterrupted,
        SweepOptions,
        check_sweep_out,
        check_sweep_size,
        describe_counts,
        load_sweep_spec,
        run_sweep,
    )

    spec = with_default_profiles(load_sweep_spec(args.spec))
    if not args.json:
        for gpu in sweep_gpus(spec):
            print(f"profile {profile_label(gpu)}")
    check_sweep_out(args.out, force=args.force, spec=spec)  # before any executor starts
    check_sweep_size(spec, confirmed=args.yes)
    slurm = slurm_options(args)
    ex = make_executor(jobs=args.jobs, dask_address=args.dask_address, dask_local=args.dask_local,
                       slurm=slurm, dask_wait_s=args.dask_wait)
    try:
        res = run_sweep(spec, args.out, SweepOptions(executor=ex, batch_size=args.batch_size, progress=args.progress,
                        figures=None if args.no_figures else standard_figures, force=args.force,
                        confirm_large=args.yes))
    except SweepInterrupted as exc:
        print(f"dcpsim: {exc}", file=sys.stderr)
        return 130
    finally:
        ex.close()
    d = res.as_dict()
    if args.json:
        print_json(d)
    else:
        rate = f"{d['runs_per_min']:.0f} runs/min" if d["runs_per_min"] else "-"
        print(f"{spec.name}: {res.n_runs} runs; {res.n_skipped} already done; ran {res.n_done} "
              f"({describe_counts(res.counts)}) in {res.wall_s:.1f} s on {res.workers} worker(s), {rate}")
        print(f"results: {res.out_dir / 'results'}")
        if res.n_other:
            print(f"note: {res.n_other} rows in this directory come from an earlier spec (kept; filter on config_hash "
                  "with sweep.json to drop them)")
        figs = [{"figure": k, "written": ", ".join(v) if isinstance(v, list) else v} for k, v in res.figures.items()]
        if figs:
            print_table(figs, title="figures")
    if res.counts.get("error"):
        print(error_note(res), file=sys.stderr)
    failed = res.counts.get("failed", 0)
    if failed:
        print(f"dcpsim: {failed} run(s) failed with an unexpected error (see the reason column); "
              "they are retried when the sweep is started again", file=sys.stderr)
        return 1
    return 0


def error_note(res) -> str:
    """One line on the runs this call found invalid (status error) and their most frequent reasons."""
    from dcpsim.run.sweep import load_results

    reasons = load_results(res.out_dir, status="error", warn=False)["reason"].astype(str).value_counts()
    top = "; ".join(f"{n} x {r}" for r, n in reasons.head(3).items())
    return (f"dcpsim: {res.counts['error']} run(s) of this sweep are invalid configurations (status 'error', the "
            f"reason column says why): {top}")


def with_default_profiles(spec):
    """The spec with every GPU name (base and list-valued axes) read as the calibrated profile where one exists."""
    import dataclasses

    from dcpsim.commands._common import with_default_profile
    from dcpsim.hardware.defaults import resolve_gpu

    groups = []
    for g in spec.groups:
        if "hardware.gpu" in g.fields:
            i = g.fields.index("hardware.gpu")
            vals = list(g.values)
            names = _gpu_names(vals[i])  # a random axis's choices too (drawn by index: the same draws)
            resolved = [resolve_gpu(v) if isinstance(v, str) else v for v in names]
            vals[i] = {**vals[i], "choices": resolved} if isinstance(vals[i], dict) else resolved
            g = dataclasses.replace(g, values=tuple(vals))
        groups.append(g)
    return dataclasses.replace(spec, base=with_default_profile(spec.base), groups=tuple(groups))


def _gpu_names(values) -> list:
    """The GPU names of one axis's values: a list (grid, zip, random choices) or a random {choices = [...]} table."""
    return list(values.get("choices", [])) if isinstance(values, dict) else list(values)


def sweep_gpus(spec) -> list[str]:
    """The GPU profiles a sweep names (base and every axis, random choices included), in order."""
    out = [spec.base.hardware.gpu]
    for g in spec.groups:
        if "hardware.gpu" in g.fields:
            out += [v for v in _gpu_names(g.values[g.fields.index("hardware.gpu")]) if isinstance(v, str)]
    return list(dict.fromkeys(out))
