"""Run every adversarial case through the evaluation pipeline and say which ones it caught.

    python3 bench/adversarial/run_cases.py --cpu-only      # the cases that need no GPU (nvcc only, for sm_90)
    python3 bench/adversarial/run_cases.py                 # every case where a GPU is found (--gpu to insist)

The cases are the table of tests/data/adversarial/cases.py (the one the tests use): a kernel,
the status the pipeline must give it, and whether it needs a GPU. Each is built in a fresh
build cache and evaluated as its own seed; on a GPU the good kernel (vadd_ok) is evaluated
after it with the same builder and harness, to show the search would go on. Prints one row per
case (case | expected | got | caught?), then the counts. Exit code 0 when every case got its
expected status apart from the known gaps, 1 otherwise.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
import common  # noqa: E402,F401  (puts this checkout first on sys.path: optiml and tests/)

from optiml.verify.harness import HarnessBase, HarnessResult  # noqa: E402
from tests.conftest import gpu_available  # noqa: E402  (one definition of "a GPU is here")
from tests.data.adversarial import cases as adv  # noqa: E402


class NoGpuHarness(HarnessBase):
    """Stands in for the GPU harness on a machine without one: a CPU case that reaches it was
    not stopped at the build, and gets harness_error (so it is counted as missed)."""

    def run(self, job):
        return HarnessResult("harness_error", "reached the GPU harness, but this run has no GPU")


def verdict(case: adv.AdversarialCase, got: str) -> str:
    if got == case.expected:
        return "yes (control)" if case.control else "yes"
    return "NO (known gap)" if case.known_gap else "NO"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--cpu-only", action="store_true", help="only the cases that need no GPU")
    mode.add_argument("--gpu", action="store_true", help="every case; fail if no GPU is found")
    ap.add_argument("--arch", help="GPU architecture (default: the GPU's, or sm_90 with --cpu-only)")
    ap.add_argument("--case", action="append", default=[], help="run only this case (repeatable)")
    args = ap.parse_args(argv)

    use_gpu = not args.cpu_only and (args.gpu or gpu_available())
    if args.gpu and not gpu_available():
        print("--gpu: no GPU was found (nvidia-smi and pycuda are needed)", file=sys.stderr)
        return 2
    unknown = sorted(set(args.case) - {c.name for c in adv.CASES})
    if unknown:
        print(f"--case: unknown case(s) {', '.join(unknown)} (known: {', '.join(c.name for c in adv.CASES)})", file=sys.stderr)
        return 2
    if args.arch:
        arch = args.arch
    elif use_gpu:
        from optiml.build import detect_arch

        arch = detect_arch()
    else:
        arch = "sm_90"
    selected = [c for c in adv.CASES if not args.case or c.name in args.case]

    rows, skipped = [], []
    print(f"adversarial cases: {'all (GPU found)' if use_gpu else 'CPU only'}, arch {arch}", flush=True)
    with tempfile.TemporaryDirectory(prefix="optiml-adversarial-") as tmp:
        cache = Path(tmp)
        for case in selected:
            if case.gpu and not use_gpu:
                skipped.append(case)
                continue
            builder = adv.builder_for(case, arch, cache)
            harness = adv.harness_for(case) if use_gpu else NoGpuHarness()
            t0 = time.perf_counter()
            ev = adv.evaluate(case.kernel, builder, harness, time_it=case.time_it,
                              sanitizer=adv.sanitizer_for(case) if use_gpu else None, proposal_on=case.proposal_on)
            wall = time.perf_counter() - t0
            after = ""
            if use_gpu:
                good = adv.evaluate(adv.GOOD, builder, harness)
                after = "ok" if good.ok else f"{good.status}!"
            note = ev.message.splitlines()[0][:90] if ev.message else ""
            if ev.median_ms is not None:
                note = f"timed at {ev.median_ms:.4f} ms; " + note
            rows.append((case, ev.status, wall, after, note))

    header = ("case", "expected", "got", "caught?", "s") + (("good after",) if use_gpu else ()) + ("message",)
    table = [header] + [
        (c.name, c.expected, got, verdict(c, got), f"{wall:.1f}") + ((after,) if use_gpu else ()) + (note,)
        for c, got, wall, after, note in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    for r in table:
        print(" | ".join(v.ljust(w) for v, w in zip(r, widths)) + " | " + r[-1])

    adversarial = [(c, got, after) for c, got, _, after, _ in rows if not c.control]
    controls = [(c, got, after) for c, got, _, after, _ in rows if c.control]
    caught = [c for c, got, _ in adversarial if got == c.expected]
    missed = [c for c, got, _ in adversarial if got != c.expected]
    gaps = [c for c in missed if c.known_gap]
    controls_ok = [c for c, got, _ in controls if got == "ok"]
    search_stopped = [c for c, _, after in adversarial + controls if use_gpu and after != "ok"]
    print(f"\ntried {len(adversarial)}, caught {len(caught)}, missed {len(missed)}"
          f"{f' ({len(gaps)} known gap(s): ' + ', '.join(c.name for c in gaps) + ')' if gaps else ''}; "
          f"controls ok {len(controls_ok)} of {len(controls)}; "
          f"skipped {len(skipped)} (need a GPU)" + (f"; good kernel failed after {len(search_stopped)}" if use_gpu else ""))
    for c in gaps:
        print(f"known gap {c.name}: {c.known_gap}")
    bad = [c for c in missed if not c.known_gap] + [c for c, got, _ in controls if got != "ok"] + search_stopped
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
