#!/usr/bin/env bash
# The rules proposer's rewrites against torch.compile, on the GPU machine: `optiml optimize --budget
# 60 --proposer rules` on four first kernels with literal launches (bench/templates/rewrites/: a
# long-row softmax, an RMSNorm over a strided dimension, a block-reduction sum, a 1-D elementwise
# SiLU), each spec's [baseline] being torch.compile of the same operation, verified and timed in the
# same process with the same method as the kernels.
# Usage: OUT=dir bash bench/templates/optimize_rewrites.sh [extra optimize flags, e.g. --no-profile --time-limit 100]
#   TASKS (default: all four) picks some, among them histogram and block_partial (outside the
#   template families; their baselines torch.bincount and torch.compile); the table comes from
#   bench/limits/table.py.
set -uo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/templates/optimize_rewrites.sh: no GPU was found (nvidia-smi is missing or lists none); run it on the GPU machine." >&2
    exit 1
fi
cd "$(dirname "$0")/../.."
OUT="${OUT:-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
python3 -m optiml calibrate | tail -7
python3 -m optiml calibrate --json > "$OUT/calibration.json"
for t in ${TASKS:-softmax_long rmsnorm_strided block_sum silu}; do
    echo "== $t $(date +%T)"
    python3 -m optiml optimize "bench/templates/rewrites/$t.cu" --budget 60 --proposer rules --sanitize off \
        --db "$OUT/$t.db" -o "$OUT/$t.best.cu" "$@" 2>&1 | grep -E "^run |limit|baseline|Error|rror:" | tail -5
    python3 -m optiml show --db "$OUT/$t.db" 2>&1 | grep -E "^(step|  edit|final|limit|candidates|rewrites|  [a-z_-]+: )" | cut -c1-240
done
python3 bench/limits/table.py "$OUT"/*.db --calibration "$OUT/calibration.json" | tee "$OUT/table.md"
[[ -n "${COMPILED:-1}" ]] && python3 bench/templates/time_torch_compile.py       # torch.compile alone, plain CUDA events
