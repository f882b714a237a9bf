#!/usr/bin/env bash
# One device run (H100/H200 lent machine): host dispatch costs (dcpsim.profiling.host) and a measured
# kernel profile (dcpsim profile, collectives copied from the public base: one GPU cannot measure them), then the
# memory-bound kernel curve (membound_curve.py).
# Usage on the device, from the repository root, with wheels for simpy/pydantic in .whl/:
#   bash benchmarks/device/h100_host_and_profile.sh "$OUT"
# Everything lands in $OUT/results.tgz (and host.json beside it), even when a step times out.
set -u
OUT=${1:?output folder}
W=$OUT/w
mkdir -p "$W"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
{
  date -u; nvidia-smi; nvidia-smi -q | head -80; lscpu
  python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'numpy', numpy.__version__)"
  python3 -m pip list 2>/dev/null | grep -iE "transformer|flash|apex|triton|numpy|cudnn"
} > "$W/env.txt" 2>&1
timeout "${HOST_TIMEOUT:-200}" python3 -m dcpsim.profiling.host --out "$W/host" > "$W/host.log" 2>&1
echo "host rc $?"
cp "$W/host/host.json" "$OUT/host.json" 2>/dev/null
timeout "${PROFILE_TIMEOUT:-270}" python3 -m dcpsim.cli profile --out "$W/prof" --model llama-13b --no-collectives > "$W/prof.log" 2>&1
echo "profile rc $?"
# the device time of memory-bound kernels against their size (64 KiB .. 1 GiB): what the HBM-rate pricing of small
# elementwise kernels misses (benchmarks/device/membound_curve.py docstring); torch only
timeout "${MEMBOUND_TIMEOUT:-120}" python3 benchmarks/device/membound_curve.py --out "$W/membound.json" > "$W/membound.log" 2>&1
echo "membound rc $?"
tar czf "$OUT/results.tgz" -C "$OUT" w
tail -n 5 "$W"/*.log
