#!/usr/bin/env bash
# Probe (issue 7): does ncu on one GPU slow ncu on another, and where does the time go? Each
# output line is one ncu process profiling an example (transpose_naive) K times (bench/eval_probe.py), with
# the GPU-held time per launch and the CPU time of ncu and its child. Each ncu has its own
# lock-file directory (TMPDIR). (CUDA_VISIBLE_DEVICES per ncu, measured on two H200s, changed
# nothing: 0.79-0.81 s per launch together either way, 0.43-0.45 alone.)
#   [EX=reduce_sum] bash bench/ncu_two_gpus.sh [K] [GROUP ...]   (groups of bench/eval_probe.py; default full)
set -u
K=${1:-16}
shift || true
P="python3 bench/eval_probe.py --skip-phases --example ${EX:-transpose_naive} --k $K"
mkdir -p /tmp/lk0 /tmp/lk1
[ $# -gt 0 ] || set -- full
for g in "$@"; do
  echo "== $g: GPU 0 alone, then GPU 0 and GPU 1 together"
  TMPDIR=/tmp/lk0 $P --groups "$g" --caches all --device 0
  TMPDIR=/tmp/lk0 $P --groups "$g" --caches all --device 0 & TMPDIR=/tmp/lk1 $P --groups "$g" --caches all --device 1 & wait
done
