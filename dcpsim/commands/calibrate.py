"""``dcpsim calibrate --gpu h100-sxm``: fit a profile's timing knobs on the published suite's fit rows.

Fits at most five named ``[timing]`` knobs of one GPU profile on the rows of
``experiments/published_throughput`` declared ``fit`` (suite.toml), reports
error on the fit rows, per left-out model family (leave-one-family-out), and
on the held-out rows, all re-simulated at the fitted values. ``--out DIR``
writes a calibrated profile copy (a new profile named ``--name``, kind
``calibrated``), ``calibration.json`` and ``CALIBRATION.md``; ``--apply`` also
installs it in the user's profile folder so it is found by name. Shipped
profiles are never written. See :mod:`dcpsim.published.calibrate`.
"""

from __future__ import annotations

from dcpsim.commands._common import NONNEG_INT, POS_INT, add_force, print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a profile's timing knobs on the published suite's fit rows")
    p.add_argument("--gpu", required=True, help="profile name (h100-sxm, a100-sxm-80gb)")
    p.add_argument("--params", default=None, help="knobs to fit, comma-separated (default: the GPU's declared set)")
    p.add_argument("--iterations", type=POS_INT, default=2, help="Gauss-Newton steps (default 2)")
    p.add_argument("--no-folds", action="store_true", help="skip the leave-one-family-out cross-validation")
    p.add_argument("--fold-iterations", type=NONNEG_INT, default=1, help="Gauss-Newton steps per fold (default 1)")
    p.add_argument("--no-host", action="store_true", help="skip the host knobs' fit on the Megatron-LM CI suite's fit "
                   "rows (declared for h100-sxm and a100-sxm-80gb: host_module_scale, host_step_s)")
    p.add_argument("--joint", action="store_true", help="fit the timing and host knobs together on both suites' fit "
                   "rows (each suite's mean squared log error counting once) instead of in sequence")
    p.add_argument("--suite", default=None, help="suite folder (default experiments/published_throughput)")
    p.add_argument("--out", default=None, help="folder for the calibrated profile copy and the report")
    p.add_argument("--name", default=None, help="name of the calibrated profile (default <gpu>-calibrated-local; "
                   "not a shipped profile's name)")
    p.add_argument("--apply", action="store_true",
                   help="also install the calibrated profile, by --name, in the user's profile folder (first "
                        "$DCPSIM_PROFILES entry, else ~/.local/share/dcpsim/profiles); shipped profiles are never "
                        "written")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_force(p)
    p.set_defaults(func=run, _parser=p)


def run(args) -> int:
    from dcpsim.errors import ConfigError
    from dcpsim.published.calibrate import calibrate, write_calibration

    if args.apply and not args.out:
        raise ConfigError("--apply", True, "--out DIR too (the report is written there)")
    if args.out:  # before the fit: the folders, the name, and that no shipped data would be written
        from dcpsim.outdir import check_out_dir
        from dcpsim.published.calibrate import (
            check_not_shipped,
            check_profile_name,
            default_profile_name,
            install_target,
        )

        check_out_dir(check_not_shipped(args.out, "--out"), force=args.force)
        name = check_profile_name(args.name or default_profile_name(args.gpu))
        if args.apply:
            check_out_dir(install_target(name), force=args.force, field="--apply")
    elif args.name:
        raise ConfigError("--name", args.name, "--out DIR too (the calibrated profile is written there)")
    params = [s.strip() for s in args.params.split(",") if s.strip()] if args.params is not None else None
    if params == []:  # '' or ',' ran the whole default calibration
        raise ConfigError("--params", args.params, "at least one knob, comma-separated (leave the flag out for the "
                                                   "GPU's declared set)")
    res = calibrate(args.gpu, params=params, iterations=args.iterations, suite_dir=args.suite, folds=not args.no_folds,
                    fold_iterations=args.fold_iterations, progress=False if args.json else None,
                    host=False if args.no_host else ("joint" if args.joint else True))
    written = write_calibration(res, args.out, apply=args.apply, name=args.name, force=args.force) if args.out else []
    if args.json:
        print_json(res.to_json() | {"written": [str(p) for p in written]})
        return 0
    print_table([{"knob": k, "uncalibrated": res.uncalibrated[k], "fitted": res.fitted[k]} for k in res.params],
                title=f"{res.gpu}: fitted on rows {res.fit_rows}")
    rows = [{"rows": name, "n": e["compared"], "mean_abs_error_%": e["mean_abs_error"] * 100,
             "worst_abs_error_%": e["worst_abs_error"] * 100}
            for name, e in (("fit (before)", res.fit_error_before), ("fit (after)", res.fit_error),
                            ("held-out (before)", res.held_out_error_before), ("held-out (after)", res.held_out_error))]
    rows += [{"rows": f"left out: {f['family']}", "n": f["error"]["compared"],
              "mean_abs_error_%": f["error"]["mean_abs_error"] * 100,
              "worst_abs_error_%": f["error"]["worst_abs_error"] * 100} for f in res.folds]
    print_table(rows, title="|error| of tokens/s per GPU (re-simulated at the fitted values)")
    if res.host:
        h = res.host
        print_table([{"knob": k, "uncalibrated": h["uncalibrated"][k], "fitted": h["fitted"][k]} for k in h["params"]],
                    title="host knobs, fitted " + ("jointly with the timing knobs on both suites' fit rows"
                                                   if res.mode == "joint" else "on the Megatron-LM CI suite's fit rows"))
        print_table([{"CI rows": name, "n": e["compared"], "mean_abs_error_%": e["mean_abs_error"] * 100,
                      "worst_abs_error_%": e["worst_abs_error"] * 100}
                     for name, e in (("fit (before)", h["fit_error_before"]), ("fit (after)", h["fit_error"]),
                                     ("held-out (before)", h["held_out_error_before"]),
                                     ("held-out (after)", h["held_out_error"]))],
                    title="|error| of the CI step time (re-simulated at the fitted values)")
        if "published_fit_error" in h:
            print_table([{"rows": name, "n": e["compared"], "mean_abs_error_%": e["mean_abs_error"] * 100,
                          "worst_abs_error_%": e["worst_abs_error"] * 100}
                         for name, e in (("fit", h["published_fit_error"]),
                                         ("held-out", h["published_held_out_error"]))],
                        title="|error| of tokens/s per GPU on the profile as written (timing and host knobs)")
    print(f"{res.n_profile_candidates} candidate profiles, {res.wall_s:.0f} s")
    for p in written:
        print(f"wrote {p}")
    return 0
