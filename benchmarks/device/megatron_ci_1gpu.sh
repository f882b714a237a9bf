#!/usr/bin/env bash
# One lent-GPU run: Megatron-LM's own pretrain_gpt.py (source at NVIDIA/Megatron-LM d98e8a64, the commit the
# CI suite was read at) on ONE GPU with the flags of the functional-test case
# gpt3_mcore_tp1_pp1_resume_torch_dist_dist_optimizer_overlap_grad_reduce_param_gather (benchmarks/device/
# megatron_ci_1gpu.args: checkpoint/tensorboard/data-file flags dropped, --mock-data + NullTokenizer instead,
# --no-masked-softmax-fusion since apex's fused softmax is not installed), plus variants of it.
# Megatron-LM is not part of dcpsim: its tree is carried in .devwork/mlm (git archive d98e8a64 megatron
# pretrain_gpt.py gpt_builders.py model_provider.py) with the dataset helpers built by megatron-core 0.19.2's
# wheel from the same helpers.cpp (.devwork/whl). Logs come back in $OUT/logs.tgz; parse with
# benchmarks/device/megatron_ci_1gpu_parse.py. Prepare .devwork with benchmarks/device/megatron_ci_1gpu_prepare.sh.
# ONLY="a_mb8 g_mb8_nofill" runs just the named runs (default: all; h_mb8_altfill, the fill switched inside one
# run, is described where it runs; next lent GPU: ONLY="h_mb8_altfill fill_host" ITERS=150 RUN_TIMEOUT=175
# DCPSIM_ALT_S=8, about 4 minutes, settles the fill's in-run/alone factor on one machine). g_mb8_nofill is a_mb8 with PyTorch's
# deterministic NaN fill of empty tensors switched off (torch.utils.deterministic.fill_uninitialized_memory =
# False right after Megatron's torch.use_deterministic_algorithms(True), through a sitecustomize written below):
# the one switch Megatron-LM PR #7093 flips, so a - g is the fill's measured cost per step, which
# dcpsim/cost/determinism.py prices from a count of allocations (experiments/megatron_ci/README.md).
set -u
OUT=${1:?output folder}
R=$PWD
W=$OUT/w
mkdir -p "$W" /tmp/stub "$W/site"
cat > "$W/site/sitecustomize.py" <<'PY'
import os
if os.environ.get("DCPSIM_DET_FILL") == "0":
    import torch
    _use = torch.use_deterministic_algorithms
    def _use_no_fill(mode, *, warn_only=False):
        _use(mode, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = False
    torch.use_deterministic_algorithms = _use_no_fill
elif os.environ.get("DCPSIM_DET_FILL") == "alt":  # fill switched on and off every DCPSIM_ALT_S seconds in ONE run
    # One switching thread per process, started at the process's first call: torch.compile (dynamo) calls
    # torch.use_deterministic_algorithms again on every frame it compiles, and compile workers are processes of
    # their own, so each line of the log names its pid (the parser keeps the training process's lines only).
    import datetime, threading, time, torch
    _use = torch.use_deterministic_algorithms
    _started = []
    def _toggle(period, log):
        on = True
        while True:
            torch.utils.deterministic.fill_uninitialized_memory = on
            with open(log, "a") as f:  # the clock and format of Megatron's log lines
                f.write(f"{datetime.datetime.now()} {int(on)} {os.getpid()}\n")
            time.sleep(period)
            on = not on
    def _use_alt(mode, *, warn_only=False):
        _use(mode, warn_only=warn_only)
        if mode and os.getpid() not in _started:
            _started.append(os.getpid())
            threading.Thread(target=_toggle, daemon=True,
                             args=(float(os.environ.get("DCPSIM_ALT_S", "4")), os.environ["DCPSIM_FILL_LOG"])).start()
    torch.use_deterministic_algorithms = _use_alt
PY
cp .devwork/whl/megatron/core/datasets/helpers_cpp*.so .devwork/mlm/megatron/core/datasets/
printf '#!/bin/sh\nexit 0\n' > /tmp/stub/make; chmod +x /tmp/stub/make   # helpers already built: no compile
export PATH=/tmp/stub:$PATH PYTHONUNBUFFERED=1 PYTHONPATH=$R/.devwork/mlm
export CUDA_DEVICE_MAX_CONNECTIONS=1 NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 NCCL_ALGO=Ring CUBLAS_WORKSPACE_CONFIG=:4096:8
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
{ date -u; nvidia-smi; lscpu; python3 -c "import torch, numpy, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'numpy', numpy.__version__, 'triton', triton.__version__)"; } > "$W/env.txt" 2>&1
BASE=$(grep -v '^#' "$R/benchmarks/device/megatron_ci_1gpu.args" | tr '\n' ' ')
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
run() {  # name, extra sed edits on the base args (DCPSIM_DET_FILL=0 in the environment: fill off)
  local name=$1; shift
  want "$name" || return 0
  echo "DCPSIM_DET_FILL=${DCPSIM_DET_FILL:-1}" > "$W/$name.env"
  local args; args=$(echo "$BASE" | sed "$@")
  echo "$args" > "$W/$name.args"
  local t0=$(date +%s)
  (cd .devwork/mlm && PYTHONPATH=$W/site:$PYTHONPATH MASTER_PORT=$((29500 + RANDOM % 1000)) timeout "${RUN_TIMEOUT:-80}" python3 pretrain_gpt.py $args --train-iters "${ITERS:-60}" --no-masked-softmax-fusion --no-persist-layer-norm) > "$W/$name.log" 2>&1
  echo "$name rc $? $(( $(date +%s) - t0 )) s"
  tar czf "$OUT/logs.tgz" -C "$OUT" w
}
run b1_mb1 -e 's/--global-batch-size 32/--global-batch-size 4/'
if want b1_mb1 && ! grep -q "elapsed time per iteration" "$W/b1_mb1.log"; then SKIP=1; echo "b1 failed: later Megatron runs skipped"; fi
[ -z "${SKIP:-}" ] && run a_mb8 -e 's/^//'
[ -z "${SKIP:-}" ] && DCPSIM_DET_FILL=0 run g_mb8_nofill -e 's/^//'
# h: a_mb8 with the fill switched on and off every DCPSIM_ALT_S s inside one run (switch times in h_mb8_altfill.fill,
# local datetime as Megatron logs it, and state), so machine-to-machine and run-to-run drift cancel: megatron_ci_1gpu_parse.py --alt
[ -z "${SKIP:-}" ] && DCPSIM_DET_FILL=alt DCPSIM_FILL_LOG=$W/h_mb8_altfill.fill run h_mb8_altfill -e 's/^//'
# i: h with 24 layers instead of 12, so the fill's cost per layer pass can be told from its cost per step
[ -z "${SKIP:-}" ] && DCPSIM_DET_FILL=alt DCPSIM_FILL_LOG=$W/i_24l_altfill.fill run i_24l_altfill -e 's/--num-layers 12/--num-layers 24/'
# j, k: a_mb8 with Megatron's own PyTorch profiler over one step (13; ITERS=14 is enough), the fill on (j) and off
# (k). Megatron writes the chrome trace to <tensorboard dir>/../torch_profile, here (no --tensorboard-dir) the run's
# working folder .devwork/mlm (and an empty None/): prof_counts counts its ops into $W (trace_op_counts.py) and
# removes both, so the next run's trace is its own
PROF="--profile --use-pytorch-profiler --profile-step-start 12 --profile-step-end 13"
prof_counts() {
  local t=.devwork/mlm/torch_profile/rank-0.json.gz
  [ -f "$t" ] && python3 "$R/benchmarks/device/trace_op_counts.py" "$t" --out "$W/$1.counts.json" > "$W/$1.counts.log" 2>&1
  rm -rf .devwork/mlm/torch_profile .devwork/mlm/None
  tar czf "$OUT/logs.tgz" -C "$OUT" w
}
[ -z "${SKIP:-}" ] && want j_prof_fill && run j_prof_fill -e "s/$/ $PROF/" && prof_counts j_prof_fill
[ -z "${SKIP:-}" ] && want k_prof_nofill && DCPSIM_DET_FILL=0 run k_prof_nofill -e "s/$/ $PROF/" && prof_counts k_prof_nofill
# the same machine's plain-torch host figures (dcpsim.profiling.host), so Megatron's host cost per layer can be
# compared with plain modules measured on the same CPU
if want host; then
  ( python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && \
    PYTHONPATH=/tmp/site:$R timeout 120 python3 -m dcpsim.profiling.host --out "$W/host" ) > "$W/host.log" 2>&1
  echo "host rc $?"; tar czf "$OUT/logs.tgz" -C "$OUT" w
fi
# the host cost of one fill alone (an op in a loop, fill on/off alternating) and of a tiny kernel launch, on the SAME
# machine as the in-run A/B above: the in-run/alone factor of the fill without machine-to-machine spread
if want fill_host; then
  timeout 120 python3 "$R/benchmarks/device/fill_host.py" --out "$W/fill_host.json" > "$W/fill_host.log" 2>&1
  echo "fill_host rc $?"; tar czf "$OUT/logs.tgz" -C "$OUT" w
fi
[ -z "${SKIP:-}" ] && run c_mb8_nosync -e 's/--log-params-norm//; s/--log-num-zeros-in-grad//; s/--deterministic-mode//'
[ -z "${SKIP:-}" ] && run d_mb8_24l -e 's/--num-layers 12/--num-layers 24/'
[ -z "${SKIP:-}" ] && run f_mb8_bf16 -e 's/--fp16/--bf16/; s/--apply-query-key-layer-scaling//'
[ -z "${SKIP:-}" ] && run e_h2048 -e 's/--hidden-size 512/--hidden-size 2048/; s/--num-attention-heads 8/--num-attention-heads 16/; s/--global-batch-size 32/--global-batch-size 16/'
tail -n 3 "$W"/*.log
