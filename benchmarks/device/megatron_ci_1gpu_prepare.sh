#!/usr/bin/env bash
# Prepare what benchmarks/device/megatron_ci_1gpu.sh carries to the lent GPU machine (run here, where git and pip
# reach their sources; the device machine has no network). Megatron-LM is not part of dcpsim: its tree goes into
# the ignored folder .devwork/ and is only run on the device.
#   bash benchmarks/device/megatron_ci_1gpu_prepare.sh /path/to/Megatron-LM-clone
# Then, with the device tool: run `bash benchmarks/device/megatron_ci_1gpu.sh $OUT` with carry [".devwork", ".whl"]
# (.whl: simpy/pydantic wheels for dcpsim.profiling.host, see benchmarks/device/h100_host_and_profile.sh).
set -euo pipefail
MLM=${1:?path to a clone of NVIDIA/Megatron-LM}
COMMIT=${COMMIT:-d98e8a64}   # the commit the Megatron-LM CI suite (experiments/megatron_ci) was read at
ROOT=$(git rev-parse --show-toplevel)
EXCLUDE=$(git rev-parse --path-format=absolute --git-common-dir)/info/exclude
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx '/.devwork/' "$EXCLUDE" 2>/dev/null || echo '/.devwork/' >> "$EXCLUDE"
rm -rf "$ROOT/.devwork" && mkdir -p "$ROOT/.devwork/mlm" "$ROOT/.devwork/whl"
git -C "$MLM" archive "$COMMIT" megatron pretrain_gpt.py gpt_builders.py model_provider.py | tar x -C "$ROOT/.devwork/mlm"
# the dataset helpers, prebuilt for CPython 3.12 (the device's python3): megatron-core 0.19.2's wheel compiles the
# same helpers.cpp as d98e8a64 (checked with diff)
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$tmp" megatron-core==0.19.2
unzip -q -o "$tmp"/megatron_core-*.whl 'megatron/core/datasets/helpers_cpp*' 'megatron/core/datasets/helpers.cpp' -d "$tmp/x"
diff -q "$tmp/x/megatron/core/datasets/helpers.cpp" "$ROOT/.devwork/mlm/megatron/core/datasets/helpers.cpp"
mkdir -p "$ROOT/.devwork/whl/megatron/core/datasets"
cp "$tmp"/x/megatron/core/datasets/helpers_cpp* "$ROOT/.devwork/whl/megatron/core/datasets/"
rm -rf "$tmp"
du -sh "$ROOT/.devwork"
