"""Record a declared tuning space: every point of a kernel's ``[tune]`` table that satisfies its
restrictions, built, verified and timed by optiml's own runner, as a search evaluates a candidate.

    python3 bench/search_quality/record_space.py examples/transpose_tiled/transpose_tiled.cu -o tests/data/spaces/transpose_tiled.json
    python3 bench/search_quality/record_space.py KERNEL.cu --spec S.toml -o OUT.json --gpu 1 --limit 20
    python3 bench/search_quality/record_space.py examples/sgemm_regblock/sgemm_regblock.cu --dry-run --arch sm_90   # no GPU

Each point's source is the kernel with the point's values written in (``apply_point``). All points
go to one runner at once (``Runner.submit``): the builds run on the CPU pool while the GPU worker
verifies and times the ones already built, against the spec's reference, with the spec's timing
settings; no ncu profiling, no compute-sanitizer. Progress goes to stderr, one line a point.

The JSON written (``optiml-space/1``) holds the space (``tune_params`` in the spec's order,
``restrictions``, ``seed_point``: the kernel file's own values) and ``points``: one row per point
that satisfies the restrictions, ``[v1, v2, ..., status, median_ms]`` with the values in
``tune_params`` order, optiml's status string and the median in ms (null unless ``ok``).
A replay of these rows is a search-efficiency benchmark with no GPU.

``--dry-run`` enumerates and builds only (no GPU; ``--arch`` names what nvcc builds for, default
sm_90) and prints how many points there are and how many compile.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import ROOT, gpu_arch as checked_gpu_arch  # noqa: E402

SCRIPT = "record_space.py"
FORMAT = "optiml-space/1"


def fail(message: str) -> SystemExit:
    """The one sentence this script ends with when it cannot do its work (exit code 1)."""
    return SystemExit(f"{SCRIPT}: {message.rstrip('.')}.")


def rel(path: Path) -> str:
    """``path`` relative to the repository when it is inside it, else as an absolute path."""
    p = Path(path).resolve()
    try:
        return p.relative_to(ROOT).as_posix()
    except ValueError:
        return str(p)


def enumerate_space(source: str, spec) -> tuple[list[tuple[dict, str]], int]:
    """The points of ``spec``'s space that satisfy its restrictions, each with its source (the
    kernel with the point's values written in), in the space's order; and the number of points
    before the restrictions. Judged on the rewritten source, as the runner judges a candidate."""
    from optiml.spec.space import apply_point

    valid = []
    for point in spec.tune.points():
        text = apply_point(source, spec.entry, point)
        if spec.tune_problem(text) is None:
            valid.append((point, text))
    return valid, spec.tune.cardinality


def point_label(point: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def load(args):
    """(kernel path, source, spec) or a one-sentence SystemExit."""
    from optiml.errors import UserError
    from optiml.spec import load_task

    try:
        source, spec = load_task(args.kernel, args.spec)
    except UserError as e:
        raise fail(str(e)) from None
    if not spec.tune:
        raise fail(f"{spec.path} has no [tune] table, so there is no space to record (see docs/spec.md)")
    return source, spec


def gpu_arch(arch: str | None) -> str:
    """``--arch`` (checked against nvcc) or the GPU's, after making sure a GPU is here (the bench
    scripts' one check, :func:`common.gpu_arch`)."""
    return checked_gpu_arch(SCRIPT, arch, hint="--dry-run only builds them")


def dry_run(args, source: str, spec, points: list[tuple[dict, str]], valid: int, total: int) -> int:
    """Build ``points`` on the CPU (as the runner's build stage does) and say how many compile."""
    from optiml.build import NvccBuilder, resolve_arch
    from optiml.errors import UserError
    from optiml.runner import Candidate, Preparer

    try:
        arch = resolve_arch(args.arch or "sm_90")
    except UserError as e:
        raise fail(str(e)) from None
    prep = Preparer(spec, source, NvccBuilder(arch), include_dir=args.kernel.resolve().parent,
                    kernel_name=args.kernel.name)
    t0 = time.perf_counter()
    statuses: collections.Counter = collections.Counter()
    with ThreadPoolExecutor(args.jobs or max(1, (os.cpu_count() or 2) - 1)) as pool:
        futures = {pool.submit(prep.build, Candidate(text, name=args.kernel.name)): point for point, text in points}
        for n, fut in enumerate(as_completed(futures), start=1):
            kb, ev = fut.result()
            status = "ok" if kb is not None else str(ev.status)
            statuses[status] += 1
            res = ev.resources
            why = (f" ({' '.join(ev.message.split())[:160]})" if kb is None else
                   f" ({res.registers} registers, {res.spill_stores} B spill stores)" if res is not None else "")
            print(f"[{n}/{len(points)}] {point_label(futures[fut])}: build {status}{why}", file=sys.stderr, flush=True)
    built = statuses.pop("ok", 0)
    others = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
    print(f"{spec.entry}: {valid} of {total} points satisfy the restrictions; {built} of the {len(points)} built "
          f"compile for {arch}" + (f", {len(points) - built} do not ({others})" if others else "")
          + f" ({time.perf_counter() - t0:.1f} s)")
    return 0


def record(args, arch: str, source: str, spec, points: list[tuple[dict, str]], total: int,
           harness_factory=None) -> int:
    """Evaluate every point through one runner (building for ``arch``; on the GPU with
    ``harness_factory(device)``, default optiml's persistent worker) and write the JSON file."""
    from optiml.build import NvccBuilder
    from optiml.gpus import visible_gpus
    from optiml.runner import Candidate, Preparer, Runner, standard_stages
    from optiml.spec.space import read_point
    from optiml.status import Status
    from optiml.verify.worker_client import WorkerHarness

    names = spec.tune.names
    prep = Preparer(spec, source, NvccBuilder(arch), include_dir=args.kernel.resolve().parent,
                    kernel_name=args.kernel.name)
    stages = standard_stages(prep, None)          # build, then verify and time: no profiler, no sanitizer
    results: list = [None] * len(points)
    device_name = ""
    t0 = time.perf_counter()
    print(f"{SCRIPT}: {len(points)} points of {spec.entry}'s space ({total} before the restrictions) on GPU "
          f"{args.gpu}, built for {arch}", file=sys.stderr, flush=True)
    if harness_factory is None:
        def harness_factory(device: int):
            return WorkerHarness(device, timeout_s=args.timeout)
    with Runner(stages, [args.gpu], harness_factory=harness_factory, build_workers=args.jobs) as runner:
        futures = {runner.submit(Candidate(text, name=args.kernel.name), profile=False): i
                   for i, (_, text) in enumerate(points)}
        for n, fut in enumerate(as_completed(futures), start=1):
            i = futures[fut]
            try:
                ev = fut.result()
                status, ms, message = str(ev.status), ev.median_ms if ev.ok else None, ev.message
                if ev.harness is not None and ev.harness.device_name:
                    device_name = device_name or ev.harness.device_name
            except Exception as e:          # a bug in optiml: this point is lost, the others are not
                status, ms, message = str(Status.HARNESS_ERROR), None, f"{type(e).__name__}: {e}"
            results[i] = (status, ms)
            figure = f" {ms:.4g} ms" if ms else ""
            why = "" if status == "ok" or not message else f" ({' '.join(message.split())[:160]})"
            print(f"[{n}/{len(points)} {time.perf_counter() - t0:6.1f} s] {point_label(points[i][0])}: "
                  f"{status}{figure}{why}", file=sys.stderr, flush=True)
    if not device_name:
        device_name = dict(visible_gpus()).get(args.gpu, "")
    seed = read_point(source, spec.entry, spec.tune)
    doc = {
        "format": FORMAT,
        "name": args.name or args.kernel.stem,
        "kernel": rel(args.kernel),
        "spec": rel(spec.path),
        "entry": spec.entry,
        "gpu": device_name,
        "recorded": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "command": shlex.join(["python3", rel(Path(sys.argv[0])), *sys.argv[1:]]),
        "tune_params": {name: list(spec.tune.values(name)) for name in names},
        "restrictions": list(spec.tune.restrictions),
        "seed_point": {name: seed[name] for name in names if name in seed},
        "points": [[*(point[name] for name in names), status, None if ms is None else float(f"{ms:.6g}")]
                   for (point, _), (status, ms) in zip(points, results)],
    }
    write_json(args.output, doc)
    counts = collections.Counter(status for status, _ in results)
    ok = [(ms, points[i][0]) for i, (status, ms) in enumerate(results) if status == "ok" and ms]
    best = min(ok, key=lambda x: x[0]) if ok else None
    print(f"wrote {args.output}: {len(points)} points ({', '.join(f'{k} {v}' for k, v in counts.most_common())})"
          + (f"; fastest {best[0]:.4g} ms at {point_label(best[1])}" if best else "")
          + f"; {time.perf_counter() - t0:.1f} s")
    if not ok:
        raise fail(f"no point of {spec.entry}'s space verified and timed; see the statuses in {args.output}")
    return 0


def write_json(path: Path, doc: dict) -> None:
    """The file, written whole or not at all; a space's point is one line."""
    lines = json.dumps({k: v for k, v in doc.items() if k != "points"}, indent=1)[:-2]
    rows = ",\n".join("  " + json.dumps(row) for row in doc["points"])
    text = f"{lines},\n \"points\": [\n{rows}\n ]\n}}\n"
    assert json.loads(text) == doc
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as e:
        raise fail(f"{path}: cannot write the recording ({e.strerror or e})") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", type=Path, help="the kernel (.cu) whose spec has a [tune] table")
    ap.add_argument("--spec", type=Path, help="its task spec (default: KERNEL.toml beside it)")
    ap.add_argument("-o", "--output", type=Path, help="the JSON file to write (required unless --dry-run)")
    ap.add_argument("--name", help="the space's name in the file (default: the kernel file's stem)")
    ap.add_argument("--gpu", type=int, default=0, help="CUDA ordinal of the GPU to time on (default 0)")
    ap.add_argument("--arch", help="what nvcc builds for (default: the GPU's own; sm_90 with --dry-run)")
    ap.add_argument("--limit", type=int, help="only the first N points that satisfy the restrictions")
    ap.add_argument("--jobs", type=int, help="parallel nvcc builds (default: one per CPU core but one)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a point may run on the GPU (default 60)")
    ap.add_argument("--dry-run", action="store_true", help="enumerate and build only, no GPU; print the counts")
    args = ap.parse_args(argv)
    if not args.dry_run and args.output is None:
        ap.error("-o/--output is required (or --dry-run)")
    for flag, value in (("--limit", args.limit), ("--jobs", args.jobs)):
        if value is not None and value < 1:
            ap.error(f"{flag} must be at least 1, not {value}")
    arch = None if args.dry_run else gpu_arch(args.arch)     # before any work: no GPU is one sentence
    source, spec = load(args)
    points, total = enumerate_space(source, spec)
    if not points:
        raise fail(f"no point of {spec.path}'s [tune] table satisfies its restrictions")
    valid = len(points)
    if args.limit is not None:
        points = points[:args.limit]
    if args.dry_run:
        return dry_run(args, source, spec, points, valid, total)
    return record(args, arch, source, spec, points, total)


if __name__ == "__main__":
    sys.exit(main())
