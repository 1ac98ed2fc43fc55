#!/usr/bin/env bash
# Probe: does ncu on one GPU slow ncu on another, and where does the time go? Each output line
# is one ncu process profiling an example (transpose_naive) K times (bench/probes/eval_probe.py), with
# the GPU-held time per launch and the CPU time of ncu and its child. Each ncu has its own
# lock-file directory (TMPDIR). (CUDA_VISIBLE_DEVICES per ncu, measured on two H200s, changed
# nothing: 0.79-0.81 s per launch together either way, 0.43-0.45 alone.)
#   [EX=reduce_sum] bash bench/throughput/ncu_two_gpus.sh [--arch sm_90] [K] [GROUP ...]   (groups of bench/probes/eval_probe.py; default full)
set -u
case "${1:-}" in
  -h|--help) echo "usage: [EX=reduce_sum] bash bench/throughput/ncu_two_gpus.sh [--arch sm_90] [K] [GROUP ...]"
             sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --arch) [ $# -ge 2 ] || { echo "bench/throughput/ncu_two_gpus.sh: --arch needs a value, e.g. --arch sm_90." >&2; exit 1; }
          export OPTIML_ARCH=$2; shift 2 ;;
  --arch=*) export OPTIML_ARCH=${1#--arch=}; shift ;;
esac
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "bench/throughput/ncu_two_gpus.sh: no GPU was found (nvidia-smi is not on PATH); it profiles with ncu on two CUDA GPUs (--arch only picks what nvcc builds for), so run it on a machine with two." >&2
  exit 1
fi
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -lt 2 ]; then
  echo "bench/throughput/ncu_two_gpus.sh: nvidia-smi lists fewer than two GPUs; it profiles with ncu on GPU 0 and GPU 1 together, so run it on a machine with two." >&2
  exit 1
fi
K=${1:-16}
shift || true
P="python3 bench/probes/eval_probe.py --skip-phases --example ${EX:-transpose_naive} --k $K"
mkdir -p /tmp/lk0 /tmp/lk1
[ $# -gt 0 ] || set -- full
for g in "$@"; do
  echo "== $g: GPU 0 alone, then GPU 0 and GPU 1 together"
  TMPDIR=/tmp/lk0 $P --groups "$g" --caches all --device 0
  TMPDIR=/tmp/lk0 $P --groups "$g" --caches all --device 0 & TMPDIR=/tmp/lk1 $P --groups "$g" --caches all --device 1 & wait
done
