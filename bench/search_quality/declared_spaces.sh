#!/usr/bin/env bash
# The declared tuning spaces on the GPU, in one call (about 9 minutes on an H100; write to OUT):
#   1. record the four declared spaces of the examples into OUT/spaces/ (copy them to tests/data/spaces/)
#   2. optimize --budget 40 on cuda-samples' matrixMul_kernel.cu (unchanged), its spec declaring block_size
#      (MATRIXMUL: a folder holding matrixMul_kernel.cu and the spec of docs/spec.md as matrixMul_kernel.toml)
#   3. optimize --budget 200 on examples/stencil2d: how many evaluations were flag variants
#   4. the final speedup's stability on a pair 200x apart (bench/timing/final_timing.py, 3 rounds)
# Usage: bash bench/search_quality/declared_spaces.sh [spaces|runs|all] [--arch sm_90]   (OUT and MATRIXMUL from the environment)
#   spaces: part 1 only (about 5 minutes); runs: parts 2-4 (about 8 minutes); all (default): both
set -uo pipefail
PART=all
case "${1:-}" in spaces|runs|all) PART=$1; shift ;; esac
ARCH=()
if [[ "${1:-}" == "--arch" ]]; then ARCH=(--arch "$2"); fi
optiml() { python3 -m optiml "$@"; }     # the checkout's optiml, installed or not
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/search_quality/declared_spaces.sh: no GPU was found (nvidia-smi is missing or lists none); run it on the GPU machine." >&2
    exit 1
fi
cd "$(dirname "$0")/../.."
OUT="${OUT:-out}"; mkdir -p "$OUT/spaces"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
if [[ "$PART" != runs ]]; then
for k in transpose_tiled stencil2d softmax_tuned sgemm_regblock; do
    echo "== record $k $(date +%T)"
    timeout 240 python3 bench/search_quality/record_space.py "examples/$k/$k.cu" "${ARCH[@]}" -o "$OUT/spaces/$k.json" 2>&1 | tail -3
done
fi
[[ "$PART" == spaces ]] && { date +%T; exit 0; }
if [[ -n "${MATRIXMUL:-}" && -f "$MATRIXMUL/matrixMul_kernel.cu" ]]; then
    echo "== matrixMul $(date +%T)"
    timeout 150 python3 -m optiml optimize "$MATRIXMUL/matrixMul_kernel.cu" --budget 40 --db "$OUT/matrixmul.db" \
        -o "$OUT/matrixMul_best.cu" "${ARCH[@]}" 2>&1 | tail -4
fi
echo "== stencil2d budget 200 $(date +%T)"
timeout ${STENCIL_TIMEOUT:-400} python3 -m optiml optimize examples/stencil2d/stencil2d.cu --budget 200 --db "$OUT/stencil.db" \
    -o "$OUT/stencil_best.cu" "${ARCH[@]}" 2>&1 | tail -3
optiml export --db "$OUT/stencil.db" -o "$OUT/stencil.csv" >/dev/null 2>&1 && python3 - "$OUT/stencil.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("edit") not in ("root", "")]
flags = [r for r in rows if (r.get("edit") or "").startswith("flag")]
print(f"stencil2d: {len(rows)} candidates, {len(flags)} flag variants ({100 * len(flags) / max(len(rows), 1):.1f} %)")
PY
[[ -n "${SKIP_FINAL:-}" ]] && exit 0
echo "== final timing $(date +%T)"
timeout 120 python3 bench/timing/final_timing.py tests/data/kernels/pair_fast.cu tests/data/kernels/pair_slow.cu \
    --rounds 3 --json "$OUT/final_timing.json" "${ARCH[@]}" 2>&1 | tail -12
date +%T
