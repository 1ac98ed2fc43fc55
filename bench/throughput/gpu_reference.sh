#!/usr/bin/env bash
# A torch reference on the GPU, on the GPU machine (about 6 minutes on an H100; writes to OUT):
#   1. a KernelBench task end to end: `optiml init --kernelbench` on examples/kb_softmax's task and
#      hand-written kernel in a fresh folder, then `optiml optimize --budget 20` on what it wrote
#   2. reduce_sum's throughput (candidates fully evaluated per minute, bench/throughput/candidates_per_minute.py,
#      budget BUDGET, default 20) with its NumPy reference (reduce_sum.toml) and with its torch reference on
#      the GPU (reduce_sum_torch.toml), alternated, on GPU 0 and, where there are two, on GPUs 0,1
# Usage: bash bench/throughput/gpu_reference.sh [--arch sm_90]     (OUT, BUDGET from the environment)
set -uo pipefail
ARCH=()
if [[ "${1:-}" == "--arch" ]]; then ARCH=(--arch "$2"); fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/throughput/gpu_reference.sh: no GPU was found (nvidia-smi is missing or lists none); run it on the GPU machine." >&2
    exit 1
fi
cd "$(dirname "$0")/../.."
OUT="${OUT:-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== init --kernelbench, then optimize $(date +%T)"
KB="$OUT/kb_softmax"; mkdir -p "$KB"
cp examples/kb_softmax/kb_softmax.cu examples/kb_softmax/softmax_task.py "$KB/"
python3 -m optiml init "$KB/kb_softmax.cu" --kernelbench "$KB/softmax_task.py" 2>&1 | tail -3
grep -n "TODO\|torch =" "$KB/kb_softmax.toml" | head -12
# what a user checks by hand before a run: the drafted launch (one block per row here)
timeout 240 python3 -m optiml optimize "$KB/kb_softmax.cu" --budget 20 --db "$OUT/kb_softmax.db" \
    -o "$OUT/kb_softmax_best.cu" "${ARCH[@]}" 2>&1 | tail -5
echo "== reduce_sum throughput, NumPy vs torch reference $(date +%T)"
GPUS=(0)
[[ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 2 ]] && GPUS=(0 0,1)
for g in "${GPUS[@]}"; do
    for spec in reduce_sum.toml reduce_sum_torch.toml reduce_sum.toml reduce_sum_torch.toml; do
        timeout 200 python3 bench/throughput/candidates_per_minute.py --example reduce_sum --spec "$spec" --budget "${BUDGET:-20}" \
            --gpus "$g" "${ARCH[@]}" 2>&1 | grep -E "candidates fully evaluated|python ref|gpu ref" | head -3
    done
done
date +%T
