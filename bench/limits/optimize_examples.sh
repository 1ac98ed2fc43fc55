#!/usr/bin/env bash
# How close each example gets to its limits, on the GPU machine (about 9 minutes on an H100; writes
# to OUT): `optiml calibrate`, then one `optiml optimize --budget 40` per example (each stopped at
# TIME_LIMIT seconds of search, default 30, so that all fit in one call; compute-sanitizer off), then
# the table of seed and best times, fraction of speed of light and ratio to the spec's baseline
# (bench/limits/table.py).
# Usage: bash bench/limits/optimize_examples.sh [--arch sm_90]     (OUT, TIME_LIMIT, EXAMPLES, DEADLINE from the environment)
# OPTIMIZE_ARGS: more options for each `optiml optimize` (e.g. "--focus 0"); BUDGET (default 40).
# DEADLINE (seconds, default 540): no example starts after it, so the table always comes out within
# one 10-minute device call (on an H100 each example took 35-50 s with TIME_LIMIT=20).
set -uo pipefail
ARCH=()
if [[ "${1:-}" == "--arch" ]]; then ARCH=(--arch "$2"); fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/limits/optimize_examples.sh: no GPU was found (nvidia-smi is missing or lists none); run it on the GPU machine." >&2
    exit 1
fi
cd "$(dirname "$0")/../.."
OUT="${OUT:-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m optiml calibrate "${ARCH[@]}" | tail -8
python3 -m optiml calibrate --json "${ARCH[@]}" > "$OUT/calibration.json"
START=$SECONDS
for ex in ${EXAMPLES:-$(ls examples)}; do
    [[ -f "examples/$ex/$ex.cu" ]] || continue
    if (( SECONDS - START > ${DEADLINE:-540} - 60 )); then echo "== $ex: not started (deadline)"; continue; fi
    echo "== $ex $(date +%T)"
    timeout 120 python3 -m optiml optimize "examples/$ex/$ex.cu" --budget "${BUDGET:-40}" --time-limit "${TIME_LIMIT:-30}" \
        --sanitize off --db "$OUT/$ex.db" -o "$OUT/$ex.best.cu" "${ARCH[@]}" ${OPTIMIZE_ARGS:-} 2>&1 | grep -E "^run |limit|baseline|Error" | tail -4
done
python3 bench/limits/table.py "$OUT"/*.db --calibration "$OUT/calibration.json" | tee "$OUT/table.md"
date +%T
