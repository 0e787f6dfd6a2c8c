#!/usr/bin/env bash
# Every GPU check and GPU figure of docs/performance.md ("On a GPU") in one go, on a machine
# with a CUDA device: the gpu-marked tests, W2 of bench_peers.py on the GPU (fedshare's modes
# and the peers that are installed), W2 with 1, 2 and 4 processes on the one GPU (serial and
# batched), and FLea's / FedAA's GPU paths (bench_gpu.py). Each step has a time limit and
# writes its log and JSON to OUT_DIR as it finishes, so a step cut off loses only itself; with
# ARCHIVE, OUT_DIR is also packed into that .tar.gz after every step.
#
#   FEDSHARE_DATA=/path/to/datasets bash scripts/gpu_checks.sh OUT_DIR [ARCHIVE]
set -u
out=${1:?usage: gpu_checks.sh OUT_DIR [ARCHIVE]}
archive=${2:-}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS COMMAND...: run with a limit, log to OUT_DIR/NAME.log
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "== $name: exit $? after $((SECONDS - start)) s" | tee -a "$out/steps.txt"
    tail -n 25 "$out/$name.log"
    if [ -n "$archive" ]; then tar -czf "$archive" -C "$out" .; fi
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
    --format=csv >"$out/steps.txt" 2>&1
python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" \
    >>"$out/steps.txt" 2>&1
step pytest_gpu 150 python -m pytest -m gpu -p no:cacheprovider -q -n 4 tests
step bench_peers_W2 200 python scripts/bench_peers.py --device cuda --workloads W2 \
    --frameworks fedshare fedshare+amp fedshare+batched fedshare+batched50 fedlab pfl blazefl \
    --rounds 2 --cycles 1 --out "$out/bench_peers_W2.json" --logs "$out/peer_logs"
step bench_gpu 90 python scripts/bench_gpu.py --rounds 5 --out "$out/bench_gpu.json"
step bench_workers_W2 100 python scripts/bench_workers.py --device cuda --workloads W2 \
    --workers 1 2 4 --rounds 2 --cycles 1 --out "$out/bench_workers_W2.json"
step bench_workers_W2_batched 80 python scripts/bench_workers.py --device cuda --workloads W2 \
    --workers 1 2 4 --rounds 2 --cycles 1 --batched 10 --out "$out/bench_workers_W2_b10.json"
cat "$out/steps.txt"
