"""Hardware profiles: on-disk format, validation, loading and interpolation.

Format (``format_version = 1``), one folder per GPU::

    profiles/<name>/profile.toml      metadata, one origin per value
    profiles/<name>/gemm.csv          n,k,tokens,tflops,source
    profiles/<name>/attention.csv     direction,causal,layout,head_dim,seqlen,tflops,source
    profiles/<name>/collectives.csv   op,tier,bytes,busbw_gb_per_s,ranks,source

Units are in the column names: ``tflops`` is 1e12 FLOP/s, ``busbw_gb_per_s``
is 1e9 bytes/s of nccl-tests *bus* bandwidth, ``bytes`` is the nccl-tests
message size (the full buffer: for all-gather the gathered output, for
reduce-scatter the input). ``profile.toml`` holds the scalar device values in
``[device]`` and a sentence naming where each came from in ``[sources]``
(measured: device, date, versions; or a public source). Measured profiles add
a ``[measured]`` table (device name, driver, torch, CUDA, NCCL, date, command).

Optional ``[timing]`` table (format 1, added later; a profile without it
loads and behaves as before: GEMM from the table alone, no FP8, no fixed
costs, every scale 1). Every value present needs ``sources."timing.<name>"``::

    peak_fp8_flops              dense FP8 peak (datasheet); 0 = no FP8
    fp8_gemm_best_tflops        best achieved FP8 GEMM at the table's anchor shape
    sms, gemm_tile_m, gemm_tile_n, gemm_k_half
                                the GEMM shape model (see :meth:`HardwareProfile.gemm_shape_factor`)
    per_kernel_overhead_s       host launch floor per kernel (CPU-bound regime)
    iteration_overhead_s        fixed per-iteration host time (data loading, logging)
    gemm_efficiency_scale, fp8_gemm_efficiency_scale, attention_efficiency_scale,
    nvlink_efficiency, network_efficiency
                                calibration knobs (1.0 = uncalibrated); a calibrated
                                profile names its fit data and commit in their sources

Optional ``[host]`` table: the host CPU's dispatch costs (kernel launch, module and
collective calls, syncs), one value per mechanism with ``sources."host.<name>"``;
see :mod:`dcpsim.hardware.host`. With it, ``timing.per_kernel_overhead_s`` must
be 0: the host timeline (:mod:`dcpsim.cost.host`) prices every launch.

Interpolation is linear in log(size)–log(throughput) between rows. Outside
the measured range:

* above the largest size the last throughput is held (kernels and links are
  saturated there);
* below the smallest size, GEMM and collectives keep the *time* of the
  smallest row (a latency floor: a smaller call is not faster than the
  smallest one measured), while attention keeps the *efficiency* of the
  smallest row (a packed varlen kernel tiles many short documents into one
  launch, so there is no per-document latency floor).
"""

from __future__ import annotations

# The profile in memory lives in spec, the file I/O in profile_io; every name stays importable from here.
from dcpsim.hardware.profile_io import (  # noqa: F401
    ATTN_COLUMNS,
    COLL_COLUMNS,
    CSV_MAX,
    GEMM_COLUMNS,
    DeviceValues,
    ProfileMeta,
    _cell,
    _check_below_peak,
    _check_scaled_peaks,
    _check_sorted_unique,
    _num,
    _read_csv,
    _read_meta,
    _read_tables,
    _read_timing,
    _table_path,
    _write_table,
    load_profile,
    write_profile,
)
from dcpsim.hardware.spec import (  # noqa: F401
    ATTN_LAYOUTS,
    COLLECTIVE_OPS,
    DEVICE_FIELDS,
    FORMAT_VERSION,
    GEMM_SPLIT_K,
    GEMM_TILES,
    HOST_CPUS,
    TIERS,
    TIMING_FIELDS,
    TIMING_INT_FIELDS,
    TIMING_MAX,
    TIMING_ZERO_OK,
    Curve,
    HardwareProfile,
    Timing,
    bus_factor,
)
