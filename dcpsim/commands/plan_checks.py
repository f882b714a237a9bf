"""``dcpsim plan --config FILE``: fields of FILE that the plan sets itself are refused, not silently overwritten."""

from __future__ import annotations


def check_config_fields(args, cfg, owned_fields: dict[str, str], named: bool) -> None:
    """A --config field the plan sets itself (cluster.gpus, hardware.gpu, policy.name, the layout, a workload
    field when the file names no workload) at a value other than its default is refused, naming the flag to use
    (a value at its default states nothing: the shipped examples/simulate_default.toml, every field written out,
    still plans); a workload.gbs the file states may not be overridden by --gbs or --gbs-tokens either.
    owned_fields: field (or 'section.' prefix) -> the flag that sets it; named: the file names its workload."""
    from dcpsim.errors import ConfigError
    from dcpsim.run.config import RunConfig

    if cfg is None:
        return
    default = RunConfig()
    for owned, flag in owned_fields.items():
        section, _, field = owned.partition(".")
        fields = [field] if field else ([] if named else list(type(getattr(cfg, section)).model_fields))
        for name in fields:
            value = getattr(getattr(cfg, section), name)
            if value != getattr(getattr(default, section), name):
                why = ("the file names no workload.name, so the data comes from the flags" if not field else
                       "plan sets it itself per GPU type, size, policy and layout")
                raise ConfigError(f"--config {section}.{name}", value, f"{flag} instead, or no {section}.{name} in "
                                  f"{args.config} ({why}; the value would be ignored)")
    from dcpsim.schema import read_toml

    if named and "gbs" in read_toml(args.config, "--config").get("workload", {}):
        for flag, given in (("--gbs", args.gbs), ("--gbs-tokens", args.gbs_tokens)):
            if given is not None and (flag == "--gbs-tokens" or given != cfg.workload.gbs):
                raise ConfigError(flag, given, f"agreement with the --config's workload.gbs = {cfg.workload.gbs} "
                                               "sequences or only one of them (they disagree)")
