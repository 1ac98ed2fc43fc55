"""KernelBench level-2 first kernels (k/NAME.cu with its hand-checked spec k/NAME.toml; tasks/ holds the
KernelBench task files, map.txt which task each kernel is for): for each kernel, whether `optiml init
--kernelbench` drafts a spec (and how many TODO lines it leaves), whether the hand-checked spec loads,
and which optiml template it is offered, or why none. With --drafts, also each field where the draft
differs from the hand-checked spec (what init got wrong). With --emulate, each kernel run on the CPU
emulation (tests/host_emulation.py) at its smallest verify size and compared with the task's Model on
the same inputs. With --gpu, on a GPU machine, whether each seed and each offered template verifies
against the task's reference (verify sizes only, no timing).

    python3 bench/kernelbench/level2/check.py [--drafts] [--emulate] [NAME ...]          # CPU
    python3 bench/kernelbench/level2/check.py --gpu OUT.jsonl [NAME ...]                 # GPU

A spec's reference k/NAME_ref.py (the task's Model's forward) is generated, not kept in git: before
anything else this writes it as `optiml init --kernelbench` does, from the kernel and its task, beside
the spec that names it. Where init fails on a task, the spec names k/NAME_hand_ref.py, written by hand
in the same format and kept.
"""
import argparse
import json
import math
import os
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # bench/: common.py
import common  # noqa: E402  (puts this checkout's optiml first on sys.path)

HERE = Path(__file__).resolve().parent


sys.path.insert(0, str(HERE.parent))                               # bench/kernelbench: corpus.py
import corpus  # noqa: E402


def tasks() -> dict:
    """{kernel name: its KernelBench task file}, from map.txt."""
    return corpus.tasks(HERE)


def _selected(names, name: str) -> bool:
    return corpus.selected(names, name, exact=True)


def _spec_data(name: str) -> dict:
    return tomllib.loads((HERE / "k" / f"{name}.toml").read_text())


def write_references(names=()) -> list:
    """The generated references k/NAME_ref.py written where missing or stale (corpus.write_references)."""
    return corpus.write_references(HERE, names, exact=True)


# ----------------------------------------------------------------------------------- init's drafts

def draft_outcome(name: str, task: Path, test: bool = True) -> dict:
    """What `optiml init --kernelbench` makes of NAME against its task (corpus.draft_outcome)."""
    return corpus.draft_outcome(HERE, name, task, test)


# ----------------------------------------------------------------------------------- templates

def load(name: str):
    """(the kernel's source, its hand-checked spec loaded)."""
    from optiml.spec import load_spec
    cu = HERE / "k" / f"{name}.cu"
    src = cu.read_text()
    return src, load_spec(cu.with_suffix(".toml"), cu, kernel_source=src)


def offers(names=()) -> dict:
    """{kernel name: (template name or None, the candidate's source or the reason)}."""
    return corpus.offers(HERE, names, exact=True)


# ----------------------------------------------------------------------------------- the CPU emulation

def _fill(index: int, n: int, c_type: str) -> list:
    """The values tests/host_emulation.py fills the ``index``-th array of a kernel with."""
    salt = 13 * index
    if c_type in ("float", "double"):
        return [((j * 37 + 11 + salt) % 101) / 25.0 - 2.0 for j in range(n)]
    return [(j * 7 + 3 + salt) % 23 - 11 for j in range(n)]


def emulate(name: str, tmp: Path, sizes: dict | None = None, source: str | None = None):
    """Run NAME (or ``source``, a candidate behind NAME's signature) on the CPU emulation at ``sizes``
    (default: its spec's smallest verify size), threads cooperating for real where the kernel has them
    cooperate, and compare its outputs with the spec's reference (the task's Model) called on the same
    inputs with torch on the CPU, under the spec's tolerance. Returns [(output, its OutputCheck)]; an
    AssertionError with the compiler's or AddressSanitizer's words where it does not build or run. The
    reference must be written (write_references)."""
    import importlib.util
    import re

    import numpy as np
    import torch

    from optiml import expr
    from optiml.source import parse_source
    from optiml.verify.compare import check_output
    from tests.host_emulation import run_on_host

    src, spec = load(name)
    if source is not None:                      # its launch line and constants are its own
        from optiml.spec import load_spec
        cand = tmp / f"{name}__candidate.cu"
        cand.write_text(source)
        src, spec = source, load_spec(HERE / "k" / f"{name}.toml", cand, kernel_source=source)
    sizes = sizes or min(spec.verify_sizes, key=lambda s: math.prod(s.values()))
    info = parse_source(src)
    launch = spec.resolve_launch(sizes, info)
    env = spec.env(sizes, info.constants)
    shapes = {a.name: tuple(int(expr.evaluate(str(d), env)) for d in a.shape) for a in spec.args if a.role != "scalar"}
    scalars = {a.name: spec.scalar_value(a, sizes, info.constants) for a in spec.args if a.role == "scalar"}
    outs = tuple(a.name for a in spec.args if a.role == "output")
    cooperate = bool(re.search(r"__syncthreads|__shfl|__shared__|atomic", src))
    # the emulation's __shared__ is a static array: dynamic shared memory becomes one of the launch's size
    host_src = re.sub(r"extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]",
                      lambda m: f"__shared__ {m.group(1)} {m.group(2)}[{max(launch.shared_mem, 4) // 4}]", src)
    lines = run_on_host(tmp, name, host_src, spec.entry, {k: math.prod(v) for k, v in shapes.items()}, scalars,
                        launch.grid[:2], launch.block[:2], outs, offsets=(0,), threaded=cooperate)[0]
    arrays = [a for a in spec.args if a.role != "scalar"]
    c_types = {a.name: ("float" if a.dtype == "float32" else "long long") for a in arrays}
    got = {}
    for i, (a, line) in enumerate(zip(arrays, lines)):
        read = float.fromhex if a.dtype.startswith("float") else int
        vals = [read(v) for v in line.split()]
        t = np.array(vals, dtype=a.dtype).reshape(shapes[a.name])
        if a.role == "inout":                           # zero before each launch on a GPU; here it held the fill
            t = t - np.array(_fill(i, t.size, c_types[a.name]), dtype=a.dtype).reshape(t.shape)
        got[a.name] = t
    mod_spec = importlib.util.spec_from_file_location(f"optiml_ref_{name}", spec.reference.path)
    ref = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(ref)
    kwargs = {a.name: torch.from_numpy(got[a.name].copy()) for a in spec.args if a.role == "input"}
    kwargs.update(scalars)
    want = getattr(ref, spec.reference.function)(**kwargs)
    want = want if isinstance(want, tuple) else (want,)
    out_args = [a for a in spec.args if a.role in ("output", "inout")]
    checks = []
    for a, w in zip(out_args, want):
        tol = spec.tolerance(a.dtype)
        checks.append((a.name, check_output(a.name, got[a.name].reshape(-1), w.detach().numpy().reshape(-1),
                                            a.dtype, tol.atol, tol.rtol, rel_rms=tol.rel_rms)))
    return checks


# ----------------------------------------------------------------------------------- the command

def _gpu_spec(name: str) -> Path:
    """k/NAME.gpu.toml: NAME's spec without the check at the timing size (written, not kept)."""
    spec = HERE / "k" / f"{name}.toml"
    text = spec.read_text()
    if "[verify]" not in text:
        text += "\n[verify]\ntiming_size = false\n"
    target = spec.with_name(f"{name}.gpu.toml")
    target.write_text(text)
    return target


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafts", action="store_true", help="also each field where init's draft differs from the spec "
                    "(with --gpu, each draft verified as init wrote it)")
    ap.add_argument("--emulate", action="store_true", help="also run each kernel on the CPU emulation against its task")
    ap.add_argument("--gpu", metavar="OUT", help="also verify each seed and offered template, one JSON line each")
    ap.add_argument("--keep-drafts", action="store_true",
                    help="with --drafts --gpu: verify the k/NAME.draft.toml an earlier --drafts wrote, without drafting again")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="kernels drafted at a time, each in its own process")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    import warnings
    warnings.filterwarnings("ignore", message="input's size at dim=1 does not match num_features")  # task 28's
    if args.gpu:
        common.gpu_arch("check.py", None, "without --gpu it checks drafts, specs and templates on the CPU")
    from optiml.errors import UserError
    try:
        found = offers(args.names)
    except UserError as e:
        raise SystemExit(f"check.py: {str(e).rstrip('.')}.") from None
    task_of, verified = tasks(), 0
    outcomes = corpus.draft_outcomes(HERE, [] if args.keep_drafts else list(found), task_of, args.jobs)
    for name, (t, what) in found.items():
        if args.keep_drafts:
            print(f"{name:32} {t if t else 'refused: ' + str(what)[:100]}")
            continue
        _, d = next(outcomes)
        verified += bool(d.get("verified"))
        init = "init failed" if "failed" in d else \
            f"drafted, {'emulated ok' if d['verified'] else 'unverified'}, {len(d['diff'])} fields differ"
        print(f"{name:32} {init:26} {t if t else 'refused: ' + str(what)[:100]}", flush=True)
        if args.drafts and "failed" in d:
            print(f"    {d['failed']}")
        elif args.drafts:
            print("".join(f"    {k}: {a!r} -> {b!r}\n" for k, a, b in d["diff"]), end="")
    print(f"{sum(1 for t, _ in found.values() if t)} of {len(found)} offered a template")
    print(f"{verified} of {len(found)} drafts verified by init on the CPU emulation (written as k/NAME.draft.toml)")
    if args.emulate:
        import tempfile
        good = {"seed": [0, 0], "template": [0, 0]}         # [agree, run]
        with tempfile.TemporaryDirectory() as tmp:
            for name, (t, what) in found.items():
                for kind, source in (("seed", None),) + (((t, what),) if t else ()):
                    try:
                        checks = emulate(name, Path(tmp), source=source)
                        said = "; ".join(f"{o}: " + (f"failed ({c.failed_check}: {c.mismatched} of {c.elements} off)"
                                                     if c.failed_check else f"ok (max abs error {c.max_abs_err:.3g})")
                                         for o, c in checks)
                        ok = not any(c.failed_check for _, c in checks)
                    except AssertionError as e:         # the compiler's or AddressSanitizer's words
                        said, ok = "does not run: " + " ".join(str(e).split())[-200:], False
                    tally = good["seed" if kind == "seed" else "template"]
                    tally[0] += ok
                    tally[1] += 1
                    print(f"emulated {kind:14} {name:32} {said}")
        print(f"on the CPU emulation, {good['seed'][0]} of {good['seed'][1]} kernels and {good['template'][0]} of "
              f"{good['template'][1]} offered templates compute what their task's Model computes")
    if not args.gpu:
        return
    import optiml
    tmp = HERE / "build"
    tmp.mkdir(exist_ok=True)
    jobs = []
    specs = {name: _gpu_spec(name) for name in found}
    for name, (t, what) in found.items():
        jobs.append((name, "seed", HERE / "k" / f"{name}.cu"))
        if (HERE / "k" / f"{name}.draft.toml").is_file() and args.drafts:
            jobs.append((name, "draft", HERE / "k" / f"{name}.cu"))
        if t:
            cand = tmp / f"{name}__{t}.cu"
            cand.write_text(what)
            jobs.append((name, t, cand))

    def one(job):
        name, kind, cu = job
        spec = HERE / "k" / f"{name}.draft.toml" if kind == "draft" else specs[name]
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
