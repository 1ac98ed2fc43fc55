#!/usr/bin/env bash
# `optiml generate` with scripted answers, on the GPU machine (about 5-8 minutes on an H100; writes
# to OUT): `optiml generate` on the softmax_rows and reduce_sum examples' specs against the project's
# local Chat Completions test server (tests/chat_server.py, started here: no network needed) with
# scripted answers: three strategies each (one deliberately slow, one broken and then repaired), real
# CUDA kernels from bench/generate/TASK/, then --then-optimize --budget 20 with the rules proposer;
# then `optiml show` of each run and the figures it is judged by: the verified best against the
# worst verified strategy, timed interleaved.
# Usage: bash bench/generate/scripted_generate.sh [--arch sm_90]   (OUT, BUDGET=20, PROFILE=1 from the environment)
#        bash bench/generate/scripted_generate.sh --check           only compile the scripted kernels (no GPU)
set -uo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "--check" ]]; then exec python3 bench/generate/scripted_task.py --check; fi
ARCH=()
if [[ "${1:-}" == "--arch" ]]; then ARCH=(--arch "$2"); fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/generate/scripted_generate.sh: no GPU was found (nvidia-smi is missing or lists none); run it on the GPU machine." >&2
    exit 1
fi
OUT="${OUT:-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PROFILE_FLAG=(--no-profile)
[[ -n "${PROFILE:-}" ]] && PROFILE_FLAG=()
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
python3 bench/generate/scripted_task.py --check | tee "$OUT/compile_check.txt" | tail -1
status=0
for task in softmax_rows reduce_sum; do
    echo "== generate $task $(date +%T)"
    timeout "${TASK_TIMEOUT:-280}" python3 bench/generate/scripted_task.py "$task" "$OUT" -- --then-optimize \
        --budget "${BUDGET:-20}" --proposer rules "${PROFILE_FLAG[@]}" "${ARCH[@]}" 2>&1 | tee "$OUT/$task.log" | tail -n 30
    [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
    echo "== optiml show $task"
    python3 -m optiml show --db "$OUT/$task.db" > "$OUT/$task.show.txt" 2>&1
    grep -E '^(run|description|strategies|  node|root|seed|step|  (why|edit|metrics)|final|limit|sanitize|candidates)' "$OUT/$task.show.txt"
done
date +%T
exit $status
