#!/usr/bin/env bash
# The templates against cuBLAS and torch.compile, on the GPU machine: `optiml optimize --budget 100
# --proposer rules` from the first kernels of an nn.Linear + bias + ReLU and an fp16 GEMM
# (bench/templates/operations), whose [baseline]s are cuBLAS through torch (TF32 off), and of a long-row
# softmax and an RMSNorm (bench/templates/rewrites), whose [baseline]s are torch.compile;
# each verified and timed in the same process with the same method; then the path (`optiml show`).
# Usage: OUT=dir bash bench/templates/optimize_first_kernels.sh [extra optimize flags]; TASKS (kernel paths) picks some.
set -uo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/templates/optimize_first_kernels.sh: no GPU was found (nvidia-smi is missing or lists none); run it on the GPU machine." >&2
    exit 1
fi
cd "$(dirname "$0")/../.."
OUT="${OUT:-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m optiml calibrate | tail -7
python3 -m optiml calibrate --json > "$OUT/calibration.json"
for k in ${TASKS:-bench/templates/operations/linear_relu.cu bench/templates/operations/hgemm.cu bench/templates/rewrites/softmax_long.cu bench/templates/rewrites/rmsnorm_strided.cu}; do
    t=$(basename "$k" .cu)
    echo "== $t $(date +%T)"
    python3 -m optiml optimize "$k" --budget "${BUDGET:-100}" --proposer rules --sanitize off \
        --db "$OUT/$t.db" -o "$OUT/$t.best.cu" "$@" 2>&1 | grep -E "^run |limit|baseline|Error|rror:" | tail -5
    python3 -m optiml show --db "$OUT/$t.db" 2>&1 | grep -E "^(step|  edit|final|limit|candidates|rewrites|  [a-z_-]+: )" | cut -c1-240
done
python3 bench/limits/table.py "$OUT"/*.db --calibration "$OUT/calibration.json" | tee "$OUT/table.md"
