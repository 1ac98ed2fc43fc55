#!/usr/bin/env bash
# Issue 26 on the GPU machine: `optiml optimize --budget 100 --proposer rules` from the first kernels of
# an nn.Linear + bias + ReLU and an fp16 GEMM (bench/issue26), whose [baseline]s are cuBLAS through torch
# (TF32 off), and of a long-row softmax and an RMSNorm (bench/issue25), whose [baseline]s are torch.compile;
# each verified and timed in the same process with the same method; then the path (`optiml show`).
# Usage: OUT=dir bash bench/issue26_gpu.sh [extra optimize flags]; TASKS (kernel paths) picks some.
set -uo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/issue26_gpu.sh: no GPU was found (nvidia-smi is missing or lists none); run it on the GPU machine." >&2
    exit 1
fi
cd "$(dirname "$0")/.."
OUT="${OUT:-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m optiml calibrate | tail -7
python3 -m optiml calibrate --json > "$OUT/calibration.json"
for k in ${TASKS:-bench/issue26/linear_relu.cu bench/issue26/hgemm.cu bench/issue25/softmax_long.cu bench/issue25/rmsnorm_strided.cu}; do
    t=$(basename "$k" .cu)
    echo "== $t $(date +%T)"
    python3 -m optiml optimize "$k" --budget "${BUDGET:-100}" --proposer rules --sanitize off \
        --db "$OUT/$t.db" -o "$OUT/$t.best.cu" "$@" 2>&1 | grep -E "^run |limit|baseline|Error|rror:" | tail -5
    python3 -m optiml show --db "$OUT/$t.db" 2>&1 | grep -E "^(step|  edit|final|limit|candidates|rewrites|  [a-z_-]+: )" | cut -c1-240
done
python3 bench/issue19_table.py "$OUT"/*.db --calibration "$OUT/calibration.json" | tee "$OUT/table.md"
