"""Cross-check optiml's timing against a plain, hand-written CUDA-event loop over the same cubin.

    python bench/timing/event_loop_check.py examples/sgemm_naive/sgemm_naive.cu

Builds the kernel with optiml's builder, times it with a minimal pycuda event loop (no L2
flush, one input set, 5 warm-up launches, 30 timed launches, median), then runs
`optiml eval`'s pipeline on the same kernel, and prints both medians and their ratio.
Needs a GPU.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import gpu_arch  # noqa: E402
from optiml.build import NvccBuilder  # noqa: E402
from optiml.errors import UserError  # noqa: E402
from optiml.runner import Candidate, Runner  # noqa: E402
from optiml.source import parse_source  # noqa: E402
from optiml.spec import find_spec, load_spec, read_kernel  # noqa: E402
from optiml.verify.harness import SubprocessHarness  # noqa: E402
from optiml.verify.inputs import make_case, scalar_numpy  # noqa: E402


def hand_loop(spec, kernel_src: str, builder: NvccBuilder, reps: int = 30) -> float:
    import pycuda.driver as drv

    build = builder.build(kernel_src, spec.nvcc_flags)
    info = parse_source(kernel_src)
    launch = spec.resolve_launch(spec.timing_sizes, info)
    drv.init()
    ctx = drv.Device(0).make_context()
    try:
        fn = drv.module_from_file(build.cubin_path).get_function(build.symbols[spec.entry])
        data = make_case(spec, spec.timing_sizes, 12345, info.constants)
        bufs = {n: drv.to_device(a) for n, a in data.arrays.items()}
        args = [bufs[a.name] if a.is_array else scalar_numpy(a, data.scalars[a.name]) for a in spec.args]
        for _ in range(5):
            fn(*args, grid=launch.grid, block=launch.block, shared=launch.shared_mem)
        drv.Context.synchronize()
        times = []
        for _ in range(reps):
            start, end = drv.Event(), drv.Event()
            start.record()
            fn(*args, grid=launch.grid, block=launch.block, shared=launch.shared_mem)
            end.record()
            end.synchronize()
            times.append(end.time_since(start))
        return statistics.median(times)
    finally:
        ctx.pop()


def main(kernel: str, arch: str | None = None) -> None:
    kpath = Path(kernel)
    try:
        src = read_kernel(kpath)
        spec = load_spec(find_spec(kpath), kpath, kernel_source=src)
    except UserError as e:
        raise SystemExit(f"bench/timing/event_loop_check.py: {e}") from None
    builder = NvccBuilder(gpu_arch("bench/timing/event_loop_check.py", arch))
    hand = hand_loop(spec, src, builder)
    ev = Runner.sequential(spec, src, builder, SubprocessHarness(), include_dir=kpath.parent).evaluate(Candidate(src, name=kpath.name))
    assert ev.ok, (ev.status, ev.message)
    print(f"hand-written event loop median: {hand:.4f} ms")
    print(f"optiml eval median:             {ev.median_ms:.4f} ms  (IQR {100 * ev.harness.timing.spread:.2f}%, "
          f"{ev.harness.timing.reps} reps, L2 flushed={ev.harness.timing.flushed_l2})")
    print(f"ratio optiml/hand: {ev.median_ms / hand:.4f}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", help="the kernel (.cu) with its spec beside it")
    ap.add_argument("--arch", help="GPU architecture to build for, e.g. sm_90 (default: the GPU's)")
    args = ap.parse_args()
    main(args.kernel, args.arch)
