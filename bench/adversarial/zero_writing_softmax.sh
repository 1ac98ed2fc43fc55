#!/usr/bin/env bash
# A softmax that writes zeros where its outputs are small, against KernelBench level-1 task 23
# (4096 rows of 393216 floats, every value near 2.5e-6) with the spec `optiml init --kernelbench` drafts.
# On a GPU machine, from the repository root:
#
#     bash bench/adversarial/zero_writing_softmax.sh OUTDIR [BUDGET]
#
# 1. init --kernelbench drafts the spec from the first kernel (softmax_first.cu);
# 2. eval of the zero-writing kernel (softmax_zeros.cu) under the drafted spec, and under the same spec
#    with the old fixed tolerance (atol = rtol = 1e-4, where every value is under atol): both refused;
# 3. optimize from the first kernel with the zero-writing one as a hand-written seed: never chosen.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/adversarial_softmax}
BUDGET=${2:-20}
mkdir -p "$OUT"
W=$(mktemp -d)
cp "$HERE/softmax_first.cu" "$HERE/softmax_zeros.cu" "$W/"
cp "$HERE/../kernelbench/level1/tasks/23_Softmax.py" "$W/task.py"
cd "$W"
optiml init softmax_first.cu --kernelbench task.py
cp softmax_first.toml softmax_zeros.toml
sed 's/^float32 = {.*/float32 = { atol = 1e-4, rtol = 1e-4 }  # the old fixed draft/' softmax_first.toml > old_tolerance.toml
cp softmax_first.toml "$OUT/drafted.toml"
{
echo "== eval softmax_zeros.cu, the drafted spec"
optiml eval softmax_zeros.cu; echo "exit $?"
echo "== eval softmax_zeros.cu, the old fixed tolerance"
optiml eval softmax_zeros.cu --spec old_tolerance.toml; echo "exit $?"
echo "== eval softmax_first.cu, the old fixed tolerance"
optiml eval softmax_first.cu --spec old_tolerance.toml; echo "exit $?"
echo "== eval softmax_first.cu, the drafted spec"
optiml eval softmax_first.cu; echo "exit $?"
} 2>&1 | tee "$OUT/eval.txt"
[ "${EVAL_ONLY:-}" ] && exit 0
# 3. optimize with the zero-writing kernel as a hand-written seed, under each spec
for spec in softmax_first.toml old_tolerance.toml; do
    db="$OUT/${spec%.toml}.db"
    echo "== optimize softmax_first.cu --spec $spec --seed-kernel softmax_zeros.cu --budget $BUDGET"
    optiml optimize softmax_first.cu --spec "$spec" --seed-kernel softmax_zeros.cu --budget "$BUDGET" --proposer rules \
        --no-profile --db "$db" -o "$OUT/${spec%.toml}.best.cu" 2>&1 | grep -v "^[+-]\|^@@\|^ " | tail -15
    echo "exit ${PIPESTATUS[0]}"
    optiml export 1 --db "$db" -o "$OUT/${spec%.toml}.csv" >/dev/null
    python3 - "$OUT/${spec%.toml}.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
seed = [r for r in rows if (r.get("edit") or "").startswith("seed kernel")]
best = [r for r in rows if r.get("is_best") in ("1", "True", "true")]
for r in seed:
    print(f"the zero-writing seed: node {r.get('node_id')}, {r.get('eval_status')}")
print("best:", [(r.get("node_id"), r.get("edit"), r.get("speedup")) for r in best])
PY
    optiml show 1 --db "$db" --node 2 | head -8
    if grep -q "dim > 100000" "$OUT/${spec%.toml}.best.cu"; then echo "FAIL: the zero-writing kernel was chosen"; else echo "the zero-writing kernel was not chosen"; fi
done
