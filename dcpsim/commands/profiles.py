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
    from dcpsim.errors import ConfigError

    if args.action == "list" and args.name is not None:  # it would be dropped without a word
        raise ConfigError("name", args.name, f"nothing after 'list' (did you mean 'dcpsim profiles show {args.name}'?)")
    if args.action == "show":
        if not args.name:
            raise ConfigError("name", None, "a profile name after 'show'")
        prof = get_profile(args.name)
        info = prof.summary() | {"description": prof.description, "sources": prof.sources, "measured": prof.measured, "path": str(prof.path)}
        if args.json:
            print_json(info | {"gemm": prof.gemm_rows, "attention": prof.attention_rows, "collectives": prof.collective_rows})
            return 0
        print_table(_flat_rows(prof.summary()), title=f"profile {prof.name} ({prof.kind})")
        print_table([{"value": k, "origin": v} for k, v in prof.sources.items()], title="origins")
        if prof.measured:
            print_table([{"key": k, "value": v} for k, v in prof.measured.items()], title="measured on")
        return 0
    rows = [{"name": n, "calibration": status(n)} | {k: v for k, v in get_profile(n).summary().items() if k in LISTED}
            for n in list_profiles()]
    if args.json:
        print_json(rows)
    else:
        print_table([_list_row(r) for r in rows], title="hardware profiles (a bare GPU name reads its calibrated "
                    "profile where one exists; <gpu>-datasheet the uncalibrated one; profiles show NAME: all of one)")
    return 0


LISTED = ("peak_bf16_tflops", "hbm_gb", "hbm_bw_tb_per_s", "nvlink_gb_per_s", "nic_gb_per_s", "gpus_per_node")
_SHORT = {"peak_bf16_tflops": "bf16 TFLOPS", "hbm_gb": "HBM GB", "hbm_bw_tb_per_s": "HBM TB/s",
          "nvlink_gb_per_s": "NVLink GB/s", "nic_gb_per_s": "NIC GB/s", "gpus_per_node": "GPUs/node"}


def _list_row(r: dict) -> dict:
    """One profile in the table: short headers; the calibration status early (it wraps), link figures after."""
    figures = {_SHORT[k]: r[k] for k in LISTED if k in r}
    first = dict(list(figures.items())[:3])
    return {"name": r["name"]} | first | {"calibration": r["calibration"]} | {k: v for k, v in figures.items()
                                                                              if k not in first}


def _flat_rows(summary: dict) -> list[dict]:
    """``field, value`` rows, nested tables (timing, host) one row per entry (``timing.sms``)."""
    rows = []
    for k, v in summary.items():
        if isinstance(v, dict):
            rows += [{"field": f"{k}.{kk}", "value": vv} for kk, vv in v.items()]
        else:
            rows.append({"field": k, "value": v})
    return rows


def status(name: str) -> str:
    """What the profile is: calibrated (the default for its GPU), or datasheet (an optimistic upper bound)."""
    from dcpsim.hardware.defaults import CALIBRATED_SUFFIX, is_calibrated, resolve_gpu

    if is_calibrated(name):
        return f"calibrated; the default for {name.removesuffix(CALIBRATED_SUFFIX)}"
    kind = get_profile(name).kind
    if kind in ("measured", "mixed"):
        return f"measured kernel tables ({kind}); not calibrated against published runs"
    if resolve_gpu(name) != name:
        return f"datasheet: optimistic upper bound; by name {name}-datasheet"
    return "datasheet, not calibrated: optimistic upper bound (the default: nothing better)"
