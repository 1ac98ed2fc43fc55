#!/usr/bin/env bash
# optimize from level-2 first kernels against torch.compile, on the GPU machine: for each NAME, its
# spec k/NAME.toml with the baseline set to the task's Model through torch.compile
# (k/NAME_ref.py:baseline_compiled, timed in the run's GPU worker after the search), then
# `optiml optimize k/NAME.cu --budget BUDGET --proposer rules --no-profile` (offline, no ncu: ncu
# profiles one GPU of a host at a time), the kernels spread over the GPUs (one run a GPU at a time,
# each GPU's runs in turn), then the limits table (bench/limits/table.py) of every run.
#
#   OUT=dir [GPUS=0,1,2,3] [BUDGET=100] [TIME_LIMIT=150] bash bench/kernelbench/level2/optimize_level2.sh NAME ...
#
# TIME_LIMIT: seconds of search a run (the final timing, the sanitizer and the baseline come after);
# FINAL_LIMIT: seconds allowed for those after it (default 240; a seed of a second a launch needs more).
# OPTIMIZE_ARGS: more options for each `optiml optimize` (e.g. "--focus 0").
# CORPUS=level1: the level-1 first kernels instead (each from k/NAME.gpu.toml where there is one: no
# check at the timing size, whose arrays reach 8 GiB).
set -uo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/kernelbench/level2/optimize_level2.sh: no GPU was found (nvidia-smi is missing or lists none); run it on the GPU machine." >&2
    exit 1
fi
if [[ $# -eq 0 ]]; then
    echo "bench/kernelbench/level2/optimize_level2.sh: name the kernels (k/NAME.cu), e.g. gemm_add_relu linear_mish_mish." >&2
    exit 2
fi
cd "$(dirname "$0")/../../.."
HERE=bench/kernelbench/${CORPUS:-level2}
OUT="${OUT:-out}"; mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PYTHONUNBUFFERED=1
IFS=, read -r -a GPU_LIST <<< "${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}"
nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt"
# the references k/NAME_ref.py, generated as init writes them
python3 -c "import sys; sys.path.insert(0, 'bench/kernelbench'); import corpus; from pathlib import Path; \
corpus.write_references(Path('$HERE'), sys.argv[1:], exact=True)" "$@" || exit 1
for name in "$@"; do
    [[ -f "$HERE/k/$name.cu" ]] || { echo "no kernel $HERE/k/$name.cu" >&2; exit 2; }
    # the spec beside the run's outputs: its reference by absolute path, its baseline torch.compile
    sed -e "s#\"$name\\(_[a-z]*\\)\\?_ref.py:#\"$PWD/$HERE/k/$name\\1_ref.py:#" \
        -e "s#^torch = \"\\(.*\\):baseline\"#torch = \"\\1:baseline_compiled\"#" \
        -e "s#^name = \"PyTorch eager (the Model's forward)\"#name = \"torch.compile(Model)\"#" \
        "$(ls "$HERE/k/$name.gpu.toml" 2>/dev/null || echo "$HERE/k/$name.toml")" > "$OUT/$name.toml"
    grep -q "baseline_compiled" "$OUT/$name.toml" || { echo "$name: no [baseline] to set to torch.compile" >&2; exit 2; }
done
run_one() {     # GPU NAME
    local gpu=$1 name=$2
    echo "== $name on GPU $gpu $(date +%T)"
    CUDA_VISIBLE_DEVICES=$gpu timeout $(( ${TIME_LIMIT:-150} + ${FINAL_LIMIT:-240} )) python3 -m optiml optimize "$HERE/k/$name.cu" \
        --spec "$OUT/$name.toml" --budget "${BUDGET:-100}" --proposer rules --no-profile \
        --time-limit "${TIME_LIMIT:-150}" --db "$OUT/$name.db" -o "$OUT/$name.best.cu" ${OPTIMIZE_ARGS:-} > "$OUT/$name.log" 2>&1
    echo "== $name done ($?) $(date +%T): $(grep -E '^run ' "$OUT/$name.log" | tail -1)"
}
names=("$@")
for i in "${!GPU_LIST[@]}"; do
    (
        for (( j = i; j < ${#names[@]}; j += ${#GPU_LIST[@]} )); do
            run_one "${GPU_LIST[$i]}" "${names[$j]}"
        done
    ) &
done
wait
dbs=()
for name in "$@"; do [[ -f "$OUT/$name.db" ]] && dbs+=("$OUT/$name.db"); done
python3 bench/limits/table.py "${dbs[@]}" | tee "$OUT/table.md"
