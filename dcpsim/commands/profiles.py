"""``dcpsim profiles [show NAME]``: list and inspect hardware profiles."""

from __future__ import annotations

from dcpsim.commands._common import print_json, print_table
from dcpsim.hardware import get_profile, list_profiles


def register(sub) -> None:
    p = sub.add_parser("profiles", help="list hardware profiles, or show one")
    p.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    p.add_argument("name", nargs="?", help="profile name or folder (for 'show')")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.action == "show":
        if not args.name:
            from dcpsim.errors import ConfigError

            raise ConfigError("name", None, "a profile name after 'show'")
        prof = get_profile(args.name)
        info = prof.summary() | {"description": prof.description, "sources": prof.sources, "measured": prof.measured, "path": str(prof.path)}
        if args.json:
            print_json(info | {"gemm": prof.gemm_rows, "attention": prof.attention_rows, "collectives": prof.collective_rows})
            return 0
        print_table([{"field": k, "value": v} for k, v in prof.summary().items()], title=f"profile {prof.name} ({prof.kind})")
        print_table([{"value": k, "origin": v} for k, v in prof.sources.items()], title="origins")
        if prof.measured:
            print_table([{"key": k, "value": v} for k, v in prof.measured.items()], title="measured on")
        return 0
    rows = [{"name": n, "calibration": status(n)} | {k: v for k, v in get_profile(n).summary().items() if k in LISTED}
            for n in list_profiles()]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, title="hardware profiles (plan, simulate, sweep and demo read a bare GPU name as its "
                                "calibrated profile where one exists; <gpu>-datasheet names the uncalibrated one)")
    return 0


LISTED = ("peak_bf16_tflops", "hbm_gb", "hbm_bw_tb_per_s", "nvlink_gb_per_s", "nic_gb_per_s", "gpus_per_node")


def status(name: str) -> str:
    """What the profile is: calibrated (the default for its GPU), or datasheet (an optimistic upper bound)."""
    from dcpsim.hardware.defaults import CALIBRATED_SUFFIX, is_calibrated, resolve_gpu

    if is_calibrated(name):
        return f"calibrated; the default for {name.removesuffix(CALIBRATED_SUFFIX)}"
    if resolve_gpu(name) != name:
        return f"datasheet: optimistic upper bound; by name {name}-datasheet"
    return "datasheet, not calibrated: optimistic upper bound (the default: nothing better)"
