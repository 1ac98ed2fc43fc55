"""The GEMM templates' default spaces at the tasks' timing sizes, against cuBLAS, without the search:
every point instantiated behind bench/templates/operations' first kernels, compiled here (``build``)
and timed on the GPU (``time``), each point checked against torch at the timing size and at the
spec's odd verification sizes, cuBLAS (the spec's [baseline]) timed between the points in the same
process.

    python3 bench/templates/gemm_sweep.py build --dir sweep            # here: nvcc -cubin for sm_90, in parallel
    python3 bench/templates/gemm_sweep.py time --dir sweep > table.md  # on the GPU machine (torch + cupy)

It tells how fast each template can get, not what the search finds
(bench/templates/optimize_first_kernels.sh does that).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import BENCH  # noqa: E402
TASKS = {"linear_relu": "float32", "hgemm": "float16"}


def _build(args) -> None:
    from optiml.edits.templates import GEMM_TEMPLATES, instantiate_gemm, recognize_gemm

    from optiml.spec import load_spec

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for task in args.tasks:
        kernel = BENCH / "templates" / "operations" / f"{task}.cu"
        src = kernel.read_text()
        spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
        g, why = recognize_gemm(src, spec.entry, spec)
        if g is None:
            raise SystemExit(f"{task}: not recognised: {why}")
        for t in GEMM_TEMPLATES:
            if g.dtype not in t.dtypes or (args.templates and t.name not in args.templates):
                continue
            for i, p in enumerate(t.points()):
                name = f"{task}-{t.name}-{i}"
                (out / f"{name}.cu").write_text(instantiate_gemm(src, g, p, t.name))
                threads = _eval(t.threads, p)
                jobs.append({"task": task, "template": t.name, "point": p, "name": name,
                             "tile_n": _eval(t.tile_n, p), "tile_m": _eval(t.tile_m, p), "threads": threads,
                             "shared_mem": _eval(t.shared_mem, p),
                             "flags": [*spec.nvcc_flags, *t.flags]})

    def compile_one(j):
        cu, cubin = out / f"{j['name']}.cu", out / f"{j['name']}.cubin"
        r = subprocess.run(["nvcc", "-cubin", f"-arch={args.arch}", "-Xptxas", "-v", *j["flags"], "-o", str(cubin),
                            str(cu)], capture_output=True, text=True)
        if r.returncode != 0:
            return dict(j, error=next((ln for ln in r.stderr.splitlines() if "error" in ln), "nvcc failed"))
        fn = re.search(r"Compiling entry function '(\w+)'", r.stderr).group(1)
        regs = re.search(r"Used (\d+) registers", r.stderr)
        spill = re.search(r"(\d+) bytes spill stores", r.stderr)
        return dict(j, cubin=cubin.name, function=fn, registers=int(regs.group(1)) if regs else None,
                    spills=int(spill.group(1)) if spill else 0)

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        done = list(pool.map(compile_one, jobs))
    (out / "manifest.json").write_text(json.dumps(done, indent=1))
    bad = [d for d in done if "error" in d]
    print(f"{len(done) - len(bad)} compiled, {len(bad)} refused (static_assert or nvcc) into {out}")
    for d in bad[:5]:
        print("  ", d["name"], d["point"], d["error"][:160])


def _eval(expr: str, p: dict) -> int:
    from optiml.expr import evaluate_int

    return evaluate_int(expr, p, where="a template's launch")   # as optiml evaluates the launch line


def _time(args) -> None:
    import statistics

    import cupy
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    d = Path(args.dir)
    jobs = [j for j in json.loads((d / "manifest.json").read_text()) if "error" not in j
            and (not args.only or j["name"] in args.only)]
    sizes = {"linear_relu": (1024, 8192, 8192), "hgemm": (4096, 4096, 4096)}
    # odd sizes: rows not 16-byte aligned (loaded piece by piece), then aligned rows with edge tiles (TMA's zero fill)
    odd = [(33, 65, 17), (5, 131, 300), (130, 70, 257), (1096, 392, 200), (264, 520, 136)]

    def operands(task, M, N, K, gen):
        if task == "linear_relu":
            x = torch.rand(M, K, device="cuda", generator=gen) * 2 - 1
            w = torch.rand(N, K, device="cuda", generator=gen) * 2 - 1
            bias = torch.rand(N, device="cuda", generator=gen) * 2 - 1
            y = torch.full((M, N), float("nan"), device="cuda")
            ref = lambda: torch.relu(x.double() @ w.double().T + bias.double()).float()       # noqa: E731
            vendor = lambda: torch.relu(torch.nn.functional.linear(x, w, bias))               # noqa: E731
            return [x, w, bias, y], y, ref, vendor, (2e-3, 1e-3)
        A = (torch.rand(M, K, device="cuda", generator=gen) * 2 - 1).half()
        B = (torch.rand(K, N, device="cuda", generator=gen) * 2 - 1).half()
        C = torch.full((M, N), float("nan"), device="cuda").half()
        return [A, B, C], C, (lambda: (A.float() @ B.float()).half()), (lambda: A @ B), (2e-2, 1e-2)

    def launcher(j, M, N, K, arrays):
        fn = cupy.RawModule(path=str(d / j["cubin"])).get_function(j["function"])
        smem = j.get("shared_mem", 0)
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        grid = (-(-N // j["tile_n"]), -(-M // j["tile_m"]))
        ptrs = [cupy.asarray(a) for a in arrays]
        scal = [cupy.int32(v) for v in (M, N, K)]
        return lambda: fn(grid, (j["threads"],), (*ptrs, *scal), shared_mem=smem)

    def median_ms(f, reps):
        for _ in range(3):
            f()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)

    gen = torch.Generator(device="cuda")
    gen.manual_seed(26)
    rows = []
    print(f"GPU: {torch.cuda.get_device_name()}", flush=True)
    for task in dict.fromkeys(j["task"] for j in jobs):
        M, N, K = sizes[task]
        arrays, out, ref, vendor, (atol, rtol) = operands(task, M, N, K, gen)
        want = ref()
        vendor_ms = []
        vendor_err = float((vendor().float() - want).abs().max())
        print(f"\n## {task} M={M} N={N} K={K}\n\nmax error against fp64: cuBLAS {vendor_err:.2e}\n\n"
              "| template | point | ms | vs cuBLAS | odd sizes | at size | max error |\n|---|---|---|---|---|---|---|",
              flush=True)
        for j in (j for j in jobs if j["task"] == task):
            odd_ok = True
            for (m, n, k) in odd:
                a2, o2, r2, _, _ = operands(task, m, n, k, gen)
                launcher(j, m, n, k, a2)()
                torch.cuda.synchronize()
                odd_ok &= bool(torch.allclose(o2.float(), r2().float(), atol=atol, rtol=rtol))
            out.fill_(float("nan"))
            run = launcher(j, M, N, K, arrays)
            run()
            torch.cuda.synchronize()
            ok = bool(torch.allclose(out.float(), want.float(), atol=atol, rtol=rtol))
            err = float((out.float() - want.float()).abs().max())
            v = median_ms(vendor, args.reps)         # alternately: cuBLAS, then the point
            ms = median_ms(run, args.reps)
            out.fill_(float("nan"))                  # and right after many launches (state a launch leaves behind)
            run()
            torch.cuda.synchronize()
            ok &= bool(torch.allclose(out.float(), want.float(), atol=atol, rtol=rtol))
            vendor_ms.append(v)
            pt = " ".join(f"{k.removeprefix('OPTIML_')}={x}" for k, x in j["point"].items())
            rows.append(dict(task=task, template=j["template"], point=j["point"], ms=ms, cublas_ms=v, odd_ok=odd_ok, ok=ok,
                             max_error=err, cublas_max_error=vendor_err))
            print(f"| {j['template']} | {pt} | {ms:.3f} | {v / ms:.0%} | {'ok' if odd_ok else 'WRONG'} | "
                  f"{'ok' if ok else 'WRONG'} | {err:.2e} |", flush=True)
        best = min((r for r in rows if r["task"] == task and r["ok"] and r["odd_ok"]), key=lambda r: r["ms"], default=None)
        cub = statistics.median(vendor_ms)
        flops = 2 * M * N * K
        print(f"\ncuBLAS median {cub:.3f} ms ({flops / cub / 1e9:.1f} TFLOP/s)", flush=True)
        if best:
            print(f"best {best['template']} {best['point']}: {best['ms']:.3f} ms ({flops / best['ms'] / 1e9:.1f} TFLOP/s), "
                  f"{cub / best['ms']:.0%} of cuBLAS", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["build", "time"])
    ap.add_argument("--dir", default="sweep")
    ap.add_argument("--tasks", nargs="*", default=list(TASKS))
    ap.add_argument("--templates", nargs="*", default=[])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", nargs="*", default=[], help="time only these points (names in the manifest)")
    args = ap.parse_args()
    _build(args) if args.what == "build" else _time(args)


if __name__ == "__main__":
    main()
