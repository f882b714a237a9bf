"""Export configurations for real training runs (Megatron-LM: arguments, launch template, mock data, expectations)."""

from dcpsim.export.megatron import (
    SCHEDULERS,
    MegatronExport,
    build_export,
    check_megatron,
    export_megatron,
    megatron_args,
    resolve_policy,
    varlen_config,
)

__all__ = [
    "SCHEDULERS",
    "MegatronExport",
    "build_export",
    "check_megatron",
    "export_megatron",
    "megatron_args",
    "resolve_policy",
    "varlen_config",
]
