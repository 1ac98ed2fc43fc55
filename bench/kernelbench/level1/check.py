"""KernelBench level-1 first kernels (k/NAME.cu with its spec k/NAME.toml from `optiml init
--kernelbench`, TODOs fixed; tasks/ holds the KernelBench task files): which optiml template each is
offered, or why none, and on a GPU machine whether each seed and each offered template verifies
against the task's reference (verify sizes only, no timing).

    python3 bench/kernelbench/level1/check.py               # recognition (CPU)
    python3 bench/kernelbench/level1/check.py --gpu OUT.jsonl [NAME ...]   # and verification (GPU)

A spec's reference k/NAME_ref.py (the task's Model's forward) is generated, not kept in git: before
anything else this writes it as `optiml init --kernelbench` does, from the kernel and its task
(map.txt), beside the spec that names it. The few references written by hand (k/frob_ref.py,
k/hand_ref.py) are kept.
"""
import argparse
import json
import os
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # bench/: common.py
import common  # noqa: E402,F401  (puts this checkout's optiml first on sys.path)

HERE = Path(__file__).resolve().parent


def tasks() -> dict:
    """{kernel name: its KernelBench task file}, from map.txt."""
    out = {}
    for line in (HERE / "map.txt").read_text().splitlines():
        if line.strip():
            name, task = line.split()
            out[name] = HERE / "tasks" / f"{task}.py"
    return out


def write_references(names=()) -> list:
    """Write the reference k/NAME_ref.py that NAME's spec names, as `optiml init --kernelbench` writes
    it for NAME's kernel and task, where it is missing or differs (atomically: tests may ask for it
    from several processes at once). Returns the files written. A SpecError (e.g. no PyTorch to run
    the task with) is raised as the draft raises it."""
    from optiml.draft.kernelbench import draft_kernelbench
    task_of = tasks()
    written = []
    for spec in sorted(HERE.glob("k/*.toml")):
        name = spec.name.removesuffix(".toml")
        if name.endswith(".gpu") or (names and not any(n in name for n in names)):
            continue                                    # NAME.gpu.toml names the same file as NAME.toml
        data = tomllib.loads(spec.read_text())
        ref_file = data["reference"]["torch"].split(":")[0]
        if ref_file != f"{name}_ref.py":                # a reference written by hand
            continue
        cu = spec.with_suffix(".cu")
        _, text = draft_kernelbench(task_of[name], cu.read_text(), cu, data["kernel"]["entry"], spec)
        target = spec.with_name(ref_file)
        if target.is_file() and target.read_text() == text:
            continue
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
        written.append(target)
    return written


def offers(names=()):
    """{kernel name: (template name or None, the candidate's source or the reason)}."""
    from optiml.edits.templates import template_transforms
    from optiml.spec import load_spec
    write_references(names)
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
    from optiml.errors import UserError
    try:
        found = offers(args.names)
    except UserError as e:
        raise SystemExit(f"check.py: {str(e).rstrip('.')}.") from None
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
