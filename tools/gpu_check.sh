#!/usr/bin/env bash
# The CUDA checks of docs/engine.md ("On a GPU"), one stage per call, on a machine with a CUDA
# GPU and a Python that has torch (the project's other dependencies on its path, e.g. through
# PYTHONPATH). Logs go to $LOG_DIR (default ./gpu-logs).
#
#   tools/gpu_check.sh env        # GPU, driver, torch; NCCL with two ranks on one GPU
#   tools/gpu_check.sh tests      # tests/test_cuda.py
#   tools/gpu_check.sh suite      # the default suite (on the CPU)
#   tools/gpu_check.sh bench      # bench_compile.py --device cuda, ResNet-20 x 8 at 32 px
#   tools/gpu_check.sh bench_large  # VGG-11 x 16 at 32 px, ResNet-18 x 8 at 64 px
#   tools/gpu_check.sh epochs     # 2 epochs of the Table 3 ResNet-20 cell at paper scale
#   tools/gpu_check.sh bench_gpu  # benchmarks/bench_gpu.py's default call (steps and k jobs)
#   tools/gpu_check.sh tests_8bit # the compiled 8-bit CUDA tests of tests/test_cuda.py and the lowered quantisers
#   tools/gpu_check.sh combo      # the batched step with and without inductor's combo kernels
#   tools/gpu_check.sh graphs     # the batched step with and without CUDA graphs, fp32 and 8-bit
#   tools/gpu_check.sh graphs_jobs  # graphs, then k = 1, 4, 8 batched jobs of each precision (one call)
#   tools/gpu_check.sh threads    # one fp32 Table 3 job with 16, 4, 1 (the grid's train_threads) and again 16 threads
#   tools/gpu_check.sh models     # VGG-11 (hashed dropout: batched too), ResNet-18 (64 px), ResNet-54 steps
#   tools/gpu_check.sh fused      # the eager 8-bit step with the fused quantiser against without, and its test
set -uo pipefail
cd "$(dirname "$0")/.."
LOG_DIR=${LOG_DIR:-gpu-logs}
mkdir -p "$LOG_DIR"
PY=${PY:-python3}
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export MLFLOW_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 PYTHONHASHSEED=0

stage_env() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0),
torch.cuda.device_count(), 'GPUs; cpu cores', __import__('os').cpu_count())"
  # NCCL refuses two ranks on one GPU in one communicator; lpdt then uses gloo (decentral/peer.py)
  timeout 120 $PY -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 \
    --master-port 29511 tools/nccl_probe.py > "$LOG_DIR/nccl_probe.log" 2>&1
  grep -E "^rank|Error|error|Duplicate" "$LOG_DIR/nccl_probe.log" | sort -u | head -8
}

stage_tests() {
  timeout 420 $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py -rs --durations 5 2>&1 \
    | tee "$LOG_DIR/test_cuda.log" | tail -25
}

stage_suite() {  # the default suite, on the CPU of the GPU machine
  timeout 420 $PY -m pytest -q -p no:cacheprovider -n 14 --deselect tests/test_cuda.py 2>&1 \
    | tee "$LOG_DIR/suite.log" | tail -30
}

# Benchmarks log to a file as they go (a stage killed by a timeout keeps what it printed).
stage_bench() {
  $PY benchmarks/bench_compile.py --device cuda --cases resnet20:8 --batch 32 --size 32 \
    --iters 20 --rounds 3 --precisions "${BENCH_PRECISIONS:-fp32,int8}" 2>&1 \
    | grep --line-buffered -v Warning | tee "$LOG_DIR/bench.log"
}

stage_bench_large() {
  $PY benchmarks/bench_compile.py --device cuda --cases vgg11:16 --batch 16 --size 32 \
    --iters 10 --rounds 3 2>&1 | grep --line-buffered -v Warning | tee "$LOG_DIR/bench_large.log"
  $PY benchmarks/bench_compile.py --device cuda --cases resnet18:8 --batch 32 --size 64 \
    --iters 10 --rounds 3 2>&1 | grep --line-buffered -v Warning | tee -a "$LOG_DIR/bench_large.log"
}

stage_epochs() {
  # CIFAR-10 in its on-disk format at the real size (50,000 + 10,000 random images: timing only)
  $PY -c "from pathlib import Path; from tests.data.test_readers import write_cifar10;
import shutil; shutil.rmtree('/tmp/cifar', ignore_errors=True); write_cifar10(Path('/tmp/cifar'), 10000)"
  for prec in ${EPOCH_PRECISIONS:-fp32 int8}; do
    norm=evonorm; [ $prec = int8 ] && norm=rangeen
    $PY -m lpdt.cli train --config examples/cifar10_resnet20_lp_choco.yaml --out "/tmp/epochs-$prec" \
      --set data.root=/tmp/cifar --set precision.mode=$prec --set model.norm=$norm \
      --set train.epochs=2 --set train.compile=true --set device=cuda --set tracking.mlflow=false \
      --force > "$LOG_DIR/epochs-$prec.log" 2>&1
    grep -v Warning "$LOG_DIR/epochs-$prec.log" | tail -8
    cp "/tmp/epochs-$prec/history.csv" "$LOG_DIR/epochs-$prec.csv"
    $PY -c "import csv; r = list(csv.DictReader(open('/tmp/epochs-$prec/history.csv')));
print('$prec wall_s per row:', [(x['epoch'], x['wall_s']) for x in r])"
  done
}

# The prepared call of issue 51 (item 8): fp32 and 8-bit, node by node and batched, compiled and
# eager, then k = 1, 4, 8 concurrent jobs of each precision (BENCH_BUDGET seconds in all).
stage_bench_gpu() {
  local out=/tmp/bench-gpu
  rm -rf "$out"
  timeout $(( ${BENCH_BUDGET:-300} + 15 )) $PY benchmarks/bench_gpu.py --out "$out" \
    --force-int8-compile --budget "${BENCH_BUDGET:-300}" 2>&1 \
    | grep --line-buffered -v Warning | tee "$LOG_DIR/bench_gpu.log"
  cp "$out"/*.tsv "$LOG_DIR"/ 2>/dev/null
  tar -czf "$LOG_DIR/job-logs.tgz" -C "$out" job-logs 2>/dev/null
}

# The compiled 8-bit step on CUDA: really compiled, equal to eager. On the H200 of 2026-11-28 the
# batched tests took 31 + 21 s and a compiled 8-bit run 78 s; the node-by-node ones (which decide
# whether lpdt.engine.steps may compile the node-by-node 8-bit step on CUDA) have not run yet.
stage_tests_8bit() {
  timeout "${TESTS_TIMEOUT:-300}" $PY -m pytest -q -p no:cacheprovider \
    tests/test_cuda.py -rs --durations 8 \
    -k "lowered_operators or (equals_eager and int8) or batched_8bit or unless_told or (learns_like and int8)" 2>&1 \
    | tee "$LOG_DIR/test_cuda_8bit.log" | tail -25
}

# Inductor's combo kernels (independent small kernels launched as one) on the batched compiled
# step, fp32 and 8-bit, and also without split reductions: most of the 8-bit step's extra
# kernels are a few elements each (counted without a GPU: 863 -> 529 -> 429 for 8-bit).
stage_combo() {
  timeout 290 $PY benchmarks/bench_gpu.py --out /tmp/bench-combo --parts steps \
    --variants batched,batched-combo,batched-combo-nosplit --budget 280 --steps-share 1 2>&1 \
    | grep --line-buffered -v Warning | tee "$LOG_DIR/combo.log"
  cp /tmp/bench-combo/steps.tsv "$LOG_DIR/combo-steps.tsv" 2>/dev/null
}

# CUDA graphs (train.compile_mode: reduce-overhead) on the batched compiled step, fp32 and 8-bit
# (issue 51). On the H200 of 2026-11-28 the 8-bit round took 25.75 ms for 906 kernels, 28 us a
# kernel, where fp32's took 10.03 ms for 222 (45 us a kernel); on the H100 the batched fp32 round
# took the same time with CUDA graphs asked for (whether inductor used them was not recorded; the
# rows now say). If the 8-bit round waits on the host's launches, replaying them as one graph
# removes that wait (docs/notebook/2026-11-30-kernel-levers-not-kept.md).
# GRAPHS_VARIANTS=batched-graphs times the CUDA-graph rounds alone (issue 51's 8-bit / fp32
# ratio at the best of each), about 200 s: each compile is a first one (fp32 about 37 s, 8-bit
# 137 s on the H200 of 2026-11-28), and the plain rows need as long again.
stage_graphs() {
  timeout $(( ${BENCH_BUDGET:-280} + 15 )) $PY benchmarks/bench_gpu.py --out /tmp/bench-graphs \
    --parts steps --variants "${GRAPHS_VARIANTS:-batched,batched-graphs}" --budget "${BENCH_BUDGET:-280}" \
    --steps-share 1 2>&1 | grep --line-buffered -v Warning | tee "$LOG_DIR/graphs.log"
  cp /tmp/bench-graphs/steps.tsv "$LOG_DIR/graphs-steps.tsv" 2>/dev/null
}

# graphs and bench_gpu's jobs in one call (one machine start; the jobs load the steps part's
# graphs from its cache): the batched step with and without CUDA graphs, fp32 and 8-bit, then
# k = 1, 4, 8 concurrent batched Table 3 jobs, 8-bit first. About 9.5 minutes with the defaults.
stage_graphs_jobs() {
  local out=/tmp/bench-graphs-jobs
  rm -rf "$out"
  timeout $(( ${BENCH_BUDGET:-575} + 15 )) $PY benchmarks/bench_gpu.py --out "$out" \
    --variants batched,batched-graphs --budget "${BENCH_BUDGET:-575}" \
    --steps-share "${STEPS_SHARE:-0.7}" 2>&1 | grep --line-buffered -v Warning \
    | tee "$LOG_DIR/graphs_jobs.log"
  cp "$out"/*.tsv "$out"/env.txt "$LOG_DIR"/ 2>/dev/null
  tar -czf "$LOG_DIR/job-logs.tgz" -C "$out" job-logs 2>/dev/null
}

# One fp32 job alone took 375 ms an iteration at 16 threads where four at once took 29 ms each
# at 4 (H200, 2026-11-30, docs/notebook/2026-11-30-h200-fused-quantiser-broke-the-compile.md):
# the same job with 16, 4, 1 (what the grid runs: train_threads) and again 16 threads says whether the thread count is the cause.
# The host's share (a CPU quota, steal time, pressure) first; then the same with OpenMP's idle
# threads sleeping instead of spinning (a 16-thread team of tiny parallel regions, the data
# path's 34 or so an iteration, waits for any member whose core another thread took). About 5.5
# minutes.
stage_threads() {
  local out=/tmp/bench-threads
  { echo "cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"; echo "cpu pressure: $(cat /proc/pressure/cpu 2>/dev/null)"
    echo "affinity: $(nproc) of $(getconf _NPROCESSORS_ONLN)"; head -1 /proc/stat; } | tee "$LOG_DIR/threads-host.txt"
  for policy in default PASSIVE; do
    rm -rf "$out"
    local threads=16,4,1,16
    [ $policy = PASSIVE ] && threads=16
    local envs=()
    [ $policy = PASSIVE ] && envs=(OMP_WAIT_POLICY=PASSIVE)
    env "${envs[@]}" timeout 165 $PY benchmarks/bench_gpu.py \
      --out "$out" --parts jobs --jobs 1 --job-threads $threads --job-precisions fp32 --budget 150 \
      2>&1 | grep --line-buffered -v Warning | tee "$LOG_DIR/threads-$policy.log"
    cp "$out"/jobs.tsv "$LOG_DIR/threads-$policy-jobs.tsv" 2>/dev/null
    cp "$out"/job-logs/fp32-0.log "$LOG_DIR/threads-$policy-job.log" 2>/dev/null
  done
  head -1 /proc/stat | tee -a "$LOG_DIR/threads-host.txt"
}

stage_models() {  # the other models' steps (VGG-11 with hashed dropout, as the paper scale runs it)
  timeout 150 $PY benchmarks/bench_gpu.py --out /tmp/bench-models --parts steps \
    --cases vgg11:16:16:32,resnet18:8:32:64,resnet54:8:32:32 --variants eager,batched-eager,batched \
    --iters 5 --rounds 2 --budget 140 --steps-share 1 2>&1 \
    | grep --line-buffered -v Warning | tee "$LOG_DIR/models.log"
  cp /tmp/bench-models/steps.tsv "$LOG_DIR/models-steps.tsv" 2>/dev/null
}

# The eager 8-bit step with each rounding one compiled kernel (lpdt.layers.quant.fused, the
# default on CUDA) against the tensor operations (1,353 ms a round on the H100 of 2026-11-27),
# node by node, and batched with the fused quantiser; then the fused quantiser's CUDA test.
stage_fused() {
  timeout 200 $PY benchmarks/bench_gpu.py --out /tmp/bench-fused --parts steps --precisions int8 \
    --variants eager,eager-unfused,batched-eager --budget 190 --steps-share 1 2>&1 \
    | grep --line-buffered -v Warning | tee "$LOG_DIR/fused.log"
  cp /tmp/bench-fused/steps.tsv "$LOG_DIR/fused-steps.tsv" 2>/dev/null
  timeout 120 $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py -k fused 2>&1 | tail -5
}

for s in "$@"; do echo "=== $s"; "stage_$s"; done
