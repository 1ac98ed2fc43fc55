"""Probe (a design input of the parallel pipeline): where one candidate's GPU time goes, and what
each group of ncu metrics costs.

    python3 bench/probes/eval_probe.py [--example E ...] [--reps 3]

For each example's seed kernel: the persistent worker's phases (verify, of which the Python
reference on the host; time; check of the timed launches) over a few jobs, with the spec's
timing settings and with ``precision = 0`` (always to target_ms); then one ncu process per metric
group, profiling the kernel K = 4 times, with the passes ncu reports and the time the GPU was
held (go to finished) per launch.
"""
from __future__ import annotations

import argparse
import os
import dataclasses
import json
import pickle
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import ROOT, gpu_arch  # noqa: E402


def setup(name: str):
    from optiml.build import NvccBuilder, detect_arch
    from optiml.runner import Candidate, Preparer
    from optiml.spec import find_spec, load_spec

    kernel = ROOT / "examples" / name / f"{name}.cu"
    source = kernel.read_text()
    spec = load_spec(find_spec(kernel), kernel, kernel_source=source)
    ev = Preparer(spec, source, NvccBuilder(os.environ.get("OPTIML_ARCH") or detect_arch()), include_dir=kernel.parent, kernel_name=kernel.name)
    kb, e = ev.build(Candidate(source, name=kernel.name))
    return spec, ev, kb, e


def phases(name: str, reps: int) -> None:
    from optiml.verify.worker_client import WorkerHarness

    spec, ev, kb, e = setup(name)
    h = WorkerHarness(0)
    try:
        for label, sp in (("spec", spec), ("precision 0", dataclasses.replace(
                spec, timing=dataclasses.replace(spec.timing, precision=0.0)))):
            for i in range(reps):
                job = dataclasses.replace(ev.job(kb, e), spec=sp)
                t0 = time.perf_counter()
                hr = h.run(job)
                t = hr.timing
                print(f"{name} [{label}] job {i}: {hr.status} wall {time.perf_counter() - t0:.3f} s phases "
                      + json.dumps({k: round(v, 3) for k, v in hr.phases.items()})
                      + (f" median {t.median_ms:.4f} ms reps {t.reps} ci +-{100 * (t.median_ci_rel or 0):.2f} %"
                         if t else ""), flush=True)
    finally:
        h.close()


GROUPS = {
    "full": lambda m: m,
    "no sass inst": lambda m: [x for x in m if "sass_thread_inst" not in x],
    "no stalls": lambda m: [x for x in m if "issue_stalled" not in x],
    "neither": lambda m: [x for x in m if "sass_thread_inst" not in x and "issue_stalled" not in x],
    "sass inst only": lambda m: [x for x in m if "sass_thread_inst" in x],
    "stalls only": lambda m: [x for x in m if "issue_stalled" in x],
    "duration only": lambda m: ["gpu__time_duration.sum"],
    "single-pass": lambda m: [x for x in m if x not in MULTI_PASS and "issue_stalled" not in x],
    "single-pass + stalls": lambda m: [x for x in m if x not in MULTI_PASS],
}
# Each of these alone took 3-9 passes on an H200 (`--each-metric` below); every
# other catalogue metric alone takes one.
MULTI_PASS = ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_active",
              "sm__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sector_hit_rate.pct",
              "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")


def ncu_groups(name: str, k: int, device_name: str, device: int = 0, groups=None, clocks=("base",),
               caches=None, each_metric: bool = False) -> None:
    from optiml.profiler.ncu import NcuProfiler

    spec, ev, kb, e = setup(name)
    prof = NcuProfiler()
    full, _ = prof.metric_list(device_name)
    job = dataclasses.replace(ev.job(kb, e), time_it=False, device=device)
    table = dict(GROUPS)
    if each_metric:     # one ncu per requested metric (what each costs beside the launch itself)
        table = {"duration only": GROUPS["duration only"]}
        table.update({m: (lambda _, m=m: [m]) for m in full if m != "gpu__time_duration.sum"})
    for label, pick in table.items():
        if groups and label not in groups:
            continue
        for cache, clock in [(c, k_) for c in (caches or (("all", "none") if label == "full" else ("all",))) for k_ in clocks]:
            metrics = pick(full)
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                tags = [f"p{i}" for i in range(k)]
                (d / "jobs.pkl").write_bytes(pickle.dumps([(t, job) for t in tags]))
                cmd = prof._cmd(metrics, ["probe"], d / "rep", ["--profile-batch", str(d), str(device), "probe", str(os.getpid())])
                cmd[cmd.index("--cache-control") + 1] = cache
                cmd[cmd.index("--clock-control") + 1] = clock
                ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                while not (d / "ready").exists() and p.poll() is None:
                    time.sleep(0.002)
                t_go = time.perf_counter()
                (d / "go").write_text("")
                while not (d / "finished").exists() and p.poll() is None:
                    time.sleep(0.002)
                held = time.perf_counter() - t_go
                out = p.communicate()[0]
                wall = time.perf_counter() - t0
                ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            passes = re.findall(r"(\d+) pass", out)
            print(f"{name} GPU {device} ncu [{label}, cache-control {cache}, clock-control {clock}] {len(metrics)} metrics: passes {passes[:1]} "
                  f"start-up {t_go - t0:.2f} s, GPU held {held:.2f} s = {held / k:.3f} s per launch, wall {wall:.2f} s, "
                  f"CPU user {ru1.ru_utime - ru0.ru_utime:.2f} s sys {ru1.ru_stime - ru0.ru_stime:.2f} s (ncu and its child, whole run), "
                  f"rc {p.returncode}", flush=True)
            if p.returncode:
                print(out[-1500:])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", action="append")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--skip-ncu", action="store_true")
    ap.add_argument("--skip-phases", action="store_true")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--groups", help="comma-separated metric groups (default all)")
    ap.add_argument("--clocks", default="base", help="comma-separated --clock-control values")
    ap.add_argument("--caches", help="comma-separated --cache-control values")
    ap.add_argument("--each-metric", action="store_true", help="one ncu per requested metric")
    ap.add_argument("--arch", help="nvcc architecture, e.g. sm_90 (default: the GPU's)")
    a = ap.parse_args()
    os.environ["OPTIML_ARCH"] = gpu_arch("bench/probes/eval_probe.py", a.arch or os.environ.get("OPTIML_ARCH"))
    from optiml.gpus import visible_gpus

    name = dict(visible_gpus()).get(a.device, "")
    for ex in a.example or ["transpose_naive", "reduce_sum"]:
        if not a.skip_phases:
            phases(ex, a.reps)
        if not a.skip_ncu:
            ncu_groups(ex, a.k, name, a.device, a.groups.split(",") if a.groups else None, a.clocks.split(","),
                       a.caches.split(",") if a.caches else None, a.each_metric)
    return 0


if __name__ == "__main__":
    sys.exit(main())
