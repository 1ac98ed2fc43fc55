"""torch.compile of the rewrites' four operations timed in plain torch (CUDA events around each
call, L2 flushed before it, fresh inputs, median of 30 after warm-up), on the default stream and on
an external stream (as optiml's worker calls a baseline), with dynamo's recompile count: a check of
the [baseline] figures that `optimize` reports for bench/templates/rewrites' specs.

    python3 bench/templates/time_torch_compile.py
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "rewrites"))


def timed(fn, make, n=30, stream=None):
    import torch

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    ctx = torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream())
    out = []
    with ctx:
        for i in range(n + 5):
            args = make()
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(**args)
            b.record()
            b.synchronize()
            if i >= 5:
                out.append(a.elapsed_time(b))
    return statistics.median(out)


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    try:
        import torch
        ok = torch.cuda.is_available()
    except ImportError:
        ok = False
    if not ok:
        print("bench/templates/time_torch_compile.py: no GPU was found (PyTorch sees no CUDA device); run it on the GPU machine.",
              file=sys.stderr)
        return 1
    import ref
    d = "cuda"
    cases = {
        "softmax": (ref.softmax_compiled, lambda: dict(x=torch.randn(4096, 32768, device=d), y=None, rows=4096, cols=32768)),
        "rmsnorm": (ref.rmsnorm_compiled, lambda: dict(x=torch.randn(16, 64, 65536, device=d), y=None, batch=16,
                                                        features=64, spatial=65536, eps=1e-5)),
        "sum": (ref.block_sum_compiled, lambda: dict(x=torch.rand(1 << 27, device=d), out=torch.zeros(1, device=d),
                                                     n=1 << 27)),
        "silu": (ref.silu_compiled, lambda: dict(x=torch.randn(1 << 27, device=d), y=None, n=1 << 27)),
    }
    import torch._dynamo.utils as du
    for name, (fn, make) in cases.items():
        default = timed(fn, make)
        ext = torch.cuda.Stream()
        external = timed(fn, make, stream=torch.cuda.ExternalStream(ext.cuda_stream))
        print(f"{name}: torch.compile {default:.4f} ms (default stream), {external:.4f} ms (external stream); "
              f"dynamo counters {dict(du.counters['stats'])}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
