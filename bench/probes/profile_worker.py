"""Where the GPU child's time goes: one evaluation of an example with the worker under cProfile.

    python3 bench/probes/profile_worker.py examples/transpose_naive/transpose_naive.cu [--out worker.prof]

Prints the 25 functions with the most cumulative time in the child (CUDA start-up, input
generation, reference, comparison, timing): where the host-side overhead is.
"""
from __future__ import annotations

import argparse
import pstats
import stat
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
import common  # noqa: E402,F401  (puts this checkout's optiml first on sys.path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernel", type=Path)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "optiml-worker.prof")
    args = ap.parse_args(argv)
    from optiml.build import NvccBuilder, detect_arch
    from optiml.runner import Candidate, Runner
    from optiml.spec import find_spec, load_spec
    from optiml.verify.harness import SubprocessHarness

    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "python-under-cprofile"
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m cProfile -o {args.out} \"$@\"\n")
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
        src = args.kernel.read_text()
        spec = load_spec(find_spec(args.kernel), args.kernel, kernel_source=src)
        ev = Runner.sequential(spec, src, NvccBuilder(detect_arch(), cache_dir=Path(tmp) / "c"),
                       SubprocessHarness(python=str(wrapper)), include_dir=args.kernel.parent)
        r = ev.evaluate(Candidate(src))
        print(f"{args.kernel.name}: {r.status} {r.median_ms} ms; stages {r.stage_s}")
    pstats.Stats(str(args.out)).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
