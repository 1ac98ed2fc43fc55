"""Honest kernels under the verification rules: every example kernel (and its hand seeds), every
KernelBench level-1 first kernel and every template offered to it, verified (no timing) by whichever
optiml is first on sys.path, one JSON line each with the status, the failed check and the largest
relative RMS error seen. Run it with two optiml trees to count what a change to verification
passes and refuses (docs/spec.md, "Verification"):

    python3 bench/adversarial/honest_kernels.py OUT.jsonl          # on a GPU machine
"""
import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import BENCH, ROOT  # noqa: E402

CORPUS = BENCH / "kernelbench" / "level1"          # the KernelBench level-1 first kernels


def jobs():
    """(group, name, kernel .cu, spec .toml) for every honest kernel."""
    out = []
    for toml in sorted(ROOT.glob("examples/*/*.toml")):
        cu = toml.with_name(toml.stem.split("_torch")[0] + ".cu") if toml.stem.endswith("_torch") else toml.with_suffix(".cu")
        if cu.is_file():
            out.append(("example", toml.stem, cu, toml))
    for seed in sorted(ROOT.glob("examples/*/seeds/*.cu")):
        toml = next(seed.parent.parent.glob("*.toml"))
        out.append(("example seed", seed.stem, seed, toml))
    sys.path.insert(0, str(CORPUS))
    from check import offers                          # noqa: E402 - bench/kernelbench/level1/check.py
    build = CORPUS / "build"
    build.mkdir(exist_ok=True)
    for name, (template, what) in offers().items():
        spec = CORPUS / "k" / f"{name}.gpu.toml"
        out.append(("kernelbench seed", name, CORPUS / "k" / f"{name}.cu", spec))
        if template:
            cand = build / f"{name}__{template}.cu"
            cand.write_text(what)
            out.append(("kernelbench template", f"{name}__{template}", cand, spec))
    return out


def one(job):
    import optiml

    group, name, cu, spec = job
    try:
        ev = optiml.evaluate(str(cu), str(spec), time_it=False, timeout_s=180)
        hr = ev.evaluation.harness
        checks = hr.checks if hr is not None else []
        failed = next((c.failed_check for c in checks if not c.passed), None)
        l2 = max((getattr(o, "rel_l2_err", 0.0) for c in checks for o in c.outputs), default=None)
        vacuous = sorted({o.name for c in checks for o in c.outputs if getattr(o, "atol_vacuous", False)})
        return dict(group=group, kernel=name, status=ev.status, failed_check=failed, rel_l2=l2,
                    vacuous_atol=vacuous, message=ev.message[:300])
    except Exception as e:                          # noqa: BLE001 - report it and go on
        return dict(group=group, kernel=name, status="exception", message=f"{type(e).__name__}: {e}"[:300])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default="honest.jsonl", help="the JSON lines written (default honest.jsonl)")
    out_path = ap.parse_args().out
    import shutil
    if not shutil.which("nvidia-smi"):               # the optiml on the path is the one measured: ask nothing of it
        raise SystemExit("bench/adversarial/honest_kernels.py: no GPU was found (nvidia-smi is not on PATH); it verifies "
                         "kernels on a CUDA GPU, so run it on a GPU machine.")
    todo = jobs()
    counts: dict = {}
    with open(out_path, "w") as out, ThreadPoolExecutor(int(os.environ.get("JOBS", "4"))) as ex:
        for r in ex.map(one, todo):
            out.write(json.dumps(r) + "\n")
            g = counts.setdefault(r["group"], [0, 0])
            g[0] += r["status"] == "ok"
            g[1] += 1
            if r["status"] != "ok":
                print(f"  {r['group']} {r['kernel']}: {r['status']} ({r.get('failed_check')}): {r['message'][:200]}",
                      flush=True)
    for g, (ok, n) in counts.items():
        print(f"{g:22} {ok} of {n} verify")


if __name__ == "__main__":
    main()
