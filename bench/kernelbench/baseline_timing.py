"""A KernelBench reference's baseline (`k/NAME_ref.py:baseline_compiled`, or `--eager` for
`baseline`) timed with torch's CUDA events in three ways, and its host time a call: whether the
timing is the GPU's or the Python around the call. On the GPU machine, after the reference is
written (`optimize_level2.sh` writes it, or `corpus.write_references`):

    python3 bench/kernelbench/baseline_timing.py bench/kernelbench/level1/k/layernorm_block [--eager]

The inputs are drawn at the spec's timing sizes (NAME.gpu.toml where there is one, else NAME.toml);
before each timed call L2 is flushed (a 120 MB write), as optiml's timing does.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stem", type=Path, help="the kernel's path without .cu, e.g. bench/kernelbench/level1/k/layernorm_block")
    ap.add_argument("--eager", action="store_true", help="time `baseline` (eager PyTorch) instead of `baseline_compiled`")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args(argv)
    spec_path = next((p for p in (args.stem.with_suffix(".gpu.toml"), args.stem.with_suffix(".toml")) if p.is_file()), None)
    ref_path = args.stem.with_name(args.stem.name + "_ref.py")
    if spec_path is None or not ref_path.is_file():
        print(f"baseline_timing.py: no spec or no {ref_path.name} beside {args.stem}", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("baseline_timing.py: no GPU (run it on the GPU machine)", file=sys.stderr)
        return 1
    spec = tomllib.loads(spec_path.read_text())
    sizes = spec["sizes"]["timing"]
    mod_spec = importlib.util.spec_from_file_location(ref_path.stem, ref_path)
    ref = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(ref)
    fn = ref.baseline if args.eager else ref.baseline_compiled
    from optiml.expr import evaluate
    tensors = {}
    for a in spec["args"]:
        if a["role"] == "scalar":
            tensors[a["name"]] = int(evaluate(str(a.get("value", a["name"])), dict(sizes)))
        elif a["role"] != "output":
            shape = [int(evaluate(str(d), dict(sizes))) for d in a["shape"]]
            tensors[a["name"]] = torch.randn(shape, device="cuda").to(getattr(torch, ref.DTYPES.get(a["name"], "float32")))
    for _ in range(5):
        fn(**tensors)
    torch.cuda.synchronize()
    flush = torch.empty(120 * 2**20 // 4, dtype=torch.int32, device="cuda")
    neighbour = torch.empty(512 * 2**20 // 4, device="cuda")

    def timed(sync_each: bool, busy: bool = False) -> float:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.reps)]
        for s, e in events:
            flush.fill_(1)
            if busy:
                neighbour.mul_(1.0)                 # a 1 ms kernel before each call
            if sync_each:
                torch.cuda.synchronize()
            s.record()
            fn(**tensors)
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events)

    print(f"{ref_path.name}:{fn.__name__} at {sizes}")
    print(f"  back to back:                    {timed(False):.4f} ms")
    print(f"  the queue drained before each:   {timed(True):.4f} ms")
    print(f"  after a 1 ms neighbour each:     {timed(False, busy=True):.4f} ms")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.reps):
        fn(**tensors)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"  host time a call (enqueue only): {(t1 - t0) / args.reps * 1e3:.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
