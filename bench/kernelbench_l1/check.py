"""KernelBench level-1 first kernels (k/NAME.cu with its spec k/NAME.toml from `optiml init
--kernelbench`, TODOs fixed; tasks/ holds the KernelBench task files): which optiml template each is
offered, or why none, and on a GPU machine whether each seed and each offered template verifies
against the task's reference (verify sizes only, no timing).

    python3 bench/kernelbench_l1/check.py               # recognition (CPU)
    python3 bench/kernelbench_l1/check.py --gpu OUT.jsonl [NAME ...]   # and verification (GPU)
"""
import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))


def offers(names=()):
    """{kernel name: (template name or None, the candidate's source or the reason)}."""
    from optiml.edits.templates import template_transforms
    from optiml.spec import load_spec
    out = {}
    for cu in sorted(HERE.glob("k/*.cu")):
        if names and not any(n in cu.stem for n in names):
            continue
        src = cu.read_text()
        spec = load_spec(cu.with_suffix(".toml"), cu, kernel_source=src)
        made, why = template_transforms(src, spec.entry, spec)
        out[cu.stem] = (made[0].edit.split()[1], made[0].source) if made else (None, why)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", metavar="OUT", help="also verify each seed and offered template, one JSON line each")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    found = offers(args.names)
    for name, (t, what) in found.items():
        print(f"{name:22} {t if t else 'refused: ' + str(what)[:110]}")
    print(f"{sum(1 for t, _ in found.values() if t)} of {len(found)} offered a template")
    if not args.gpu:
        return
    import optiml
    tmp = HERE / "build"
    tmp.mkdir(exist_ok=True)
    jobs = []
    for name, (t, what) in found.items():
        jobs.append((name, "seed", HERE / "k" / f"{name}.cu"))
        if t:
            cand = tmp / f"{name}__{t}.cu"
            cand.write_text(what)
            jobs.append((name, t, cand))

    def one(job):
        name, kind, cu = job
        spec = HERE / "k" / f"{name}.gpu.toml"
        try:
            ev = optiml.evaluate(str(cu), str(spec), time_it=False, timeout_s=120)
            return dict(kernel=name, kind=kind, status=ev.status, message=ev.message[:400])
        except Exception as e:                  # noqa: BLE001 - report it and go on
            return dict(kernel=name, kind=kind, status="exception", message=f"{type(e).__name__}: {e}"[:400])
    with open(args.gpu, "w") as out, ThreadPoolExecutor(int(os.environ.get("JOBS", "4"))) as ex:
        for r in ex.map(one, jobs):
            print(r["kind"], r["kernel"], r["status"], r["message"][:160], flush=True)
            out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
