#!/usr/bin/env bash
# Search throughput on one host with two GPUs: locally (one GPU, two GPUs) and through a Dask cluster
# of one worker per GPU plus a CPU worker for builds; a GPU worker killed mid-run; then with ncu.
# transpose_naive, rules proposer, seed 0 (docs/benchmarks.md, "Two GPUs"). On a two-GPU machine,
# from the repository root:
#     bash bench/throughput/cluster_two_gpus.sh OUTDIR [BUDGET] [NCU_BUDGET]
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "bench/throughput/cluster_two_gpus.sh: no GPU was found (nvidia-smi is not on PATH); it compares one GPU, two GPUs and a Dask cluster of both, so run it on a machine with two." >&2
    exit 1
fi
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -lt 2 ]; then
    echo "bench/throughput/cluster_two_gpus.sh: nvidia-smi lists fewer than two GPUs; it compares one GPU, two GPUs and a Dask cluster of both, so run it on a machine with two." >&2
    exit 1
fi
if ! command -v dask >/dev/null 2>&1; then
    echo "bench/throughput/cluster_two_gpus.sh: the dask command was not found; pip install 'optiml-kernels[dask]'." >&2
    exit 1
fi
OUT=${1:-/tmp/cluster_two_gpus}; BUDGET=${2:-120}; NCU_BUDGET=${3:-16}   # RUN_LIMIT: seconds a run (300)
mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
K=examples/transpose_naive/transpose_naive.cu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
python3 -c "import dask, distributed; print('dask', dask.__version__, 'distributed', distributed.__version__)"
run() {   # name, then optimize's extra flags: prints "name: wall s, summary line"
    local name=$1; shift
    local t0=$(date +%s.%N)
    timeout "${RUN_LIMIT:-300}" python3 -m optiml optimize "$K" --seed 0 --proposer rules --db "$OUT/$name.db" -o "$OUT/$name.cu" "$@" \
        > "$OUT/$name.log" 2>&1
    local rc=$? t1=$(date +%s.%N)
    printf '%-28s rc %s  wall %6.1f s  %s\n' "$name" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" \
        "$(grep -o 'run [0-9]*: [0-9]* candidates[^;]*; best [0-9.]*x' "$OUT/$name.log" | head -1)"
    python3 - "$OUT/$name.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = c.execute("select n.status || ':' || coalesce(e.status, '-'), count(*) from nodes n "
                 "left join evaluations e on e.node_id = n.id group by 1").fetchall()
hosts = c.execute("select worker_host, count(*) from nodes group by 1").fetchall()
print("    nodes by status:", dict(rows), " by worker:", dict(hosts))
PY
}
start_cluster() {
    DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1 dask scheduler --port 8786 --no-dashboard > "$OUT/scheduler.log" 2>&1 &
    SCHED=$!
    sleep 4
    CUDA_VISIBLE_DEVICES=0 dask worker tcp://127.0.0.1:8786 --nthreads 1 --resources GPU=1 --name gpu0 --no-nanny --no-dashboard > "$OUT/w0.log" 2>&1 &
    W0=$!
    CUDA_VISIBLE_DEVICES=1 dask worker tcp://127.0.0.1:8786 --nthreads 1 --resources GPU=1 --name gpu1 --no-nanny --no-dashboard > "$OUT/w1.log" 2>&1 &
    W1=$!
    CUDA_VISIBLE_DEVICES= dask worker tcp://127.0.0.1:8786 --nthreads 8 --name cpu --no-dashboard > "$OUT/wc.log" 2>&1 &
    WC=$!
    sleep 8
}
stop_cluster() { kill $W0 $W1 $WC $SCHED 2>/dev/null; sleep 2; kill -9 $W0 $W1 $WC $SCHED 2>/dev/null; wait 2>/dev/null; }

echo "== no ncu, budget $BUDGET"
run local_one_gpu --budget "$BUDGET" --no-profile --gpus 0
run local_two_gpus --budget "$BUDGET" --no-profile --gpus 0,1
start_cluster
run cluster_two_workers --budget "$BUDGET" --no-profile --cluster tcp://127.0.0.1:8786
( sleep 12; kill -9 $W1 && echo "    (GPU worker gpu1 killed with SIGKILL 12 s in)" ) &
run cluster_worker_killed --budget "$BUDGET" --no-profile --cluster tcp://127.0.0.1:8786
wait
stop_cluster
echo "== with ncu on every verified candidate, budget $NCU_BUDGET"
run ncu_local_two_gpus --budget "$NCU_BUDGET" --gpus 0,1
start_cluster
run ncu_cluster_two_workers --budget "$NCU_BUDGET" --cluster tcp://127.0.0.1:8786
stop_cluster
