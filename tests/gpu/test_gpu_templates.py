"""The GEMM templates on the GPU: instantiated behind a first kernel of bench/templates/operations
(the fp32 ones behind an nn.Linear + bias + ReLU, the tensor-core one behind an fp16 GEMM), every
point of each one's default space verifies against the reference at the spec's odd sizes (M, N, K
not multiples of any tile). Run on a GPU machine:

    python3 -m pytest -m gpu tests/gpu/test_gpu_templates.py -v
"""
import os
from pathlib import Path

import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.edits.templates import GEMM_TEMPLATES, instantiate_gemm, recognize_gemm
from optiml.runner import Candidate, Runner
from optiml.runner.prepare import Preparer
from optiml.runner.stages import standard_stages
from optiml.spec import load_spec
from optiml.verify.worker_client import WorkerHarness

pytestmark = pytest.mark.gpu

TASKS = Path(__file__).resolve().parents[2] / "bench" / "templates" / "operations"
KERNEL_OF = {"float32": TASKS / "linear_relu.cu", "float16": TASKS / "hgemm.cu"}   # a first kernel per dtype


@pytest.mark.parametrize("t", GEMM_TEMPLATES, ids=lambda t: t.name)
def test_every_point_of_each_gemm_template_verifies_behind_a_first_kernel(tmp_path, t):
    if t.archs and detect_arch() not in t.archs:
        pytest.skip(f"{t.name} runs on {', '.join(t.archs)} only")
    kernel = KERNEL_OF[t.dtypes[0]]
    src = kernel.read_text()
    if t.tf32:          # TF32 rounds the inputs to 10-bit mantissas: the task's fp32 tolerance, loosened
        import shutil
        toml = kernel.with_suffix(".toml").read_text().replace("float32 = { atol = 1e-3, rtol = 1e-4 }",
                                                                "float32 = { atol = 3e-2, rtol = 1e-2 }")
        assert "rtol = 1e-2" in toml
        # at the small sizes only: over the timing size's K = 8192, TF32's rounding alone reaches 0.06
        toml = toml.replace("[reference]", "[verify]\ntiming_size = false\n\n[reference]")
        (tmp_path / kernel.name).write_text(src)
        (tmp_path / kernel.with_suffix(".toml").name).write_text(toml.split("[baseline]")[0])
        shutil.copy(kernel.parent / "ref.py", tmp_path / "ref.py")
        kernel = tmp_path / kernel.name
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    g, why = recognize_gemm(src, spec.entry, spec)
    assert g is not None, why
    prep = Preparer(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"), include_dir=kernel.parent)
    bad = []
    # every point's build at once (all cores), verified one by one by one persistent GPU worker
    with Runner(standard_stages(prep), (0,), harness_factory=lambda d: WorkerHarness(d, timeout_s=300),
                build_workers=os.cpu_count(), workers_per_gpu=1) as runner:
        points = t.points()
        futures = [runner.submit(Candidate(instantiate_gemm(src, g, p, t.name), name="t.cu", flags=t.flags), profile=False,
                                 time_it=False) for p in points]
        for p, fut in zip(points, futures):
            ev = fut.result()
            print(p, ev.status, flush=True)
            if ev.status != "ok":
                bad.append((p, ev.status, ev.message))
    assert len(points) >= 8 and not bad, bad[:3]


LAYOUTS = {   # the fp16 first kernel with B stored N x K, or A stored K x M: each template's other paths
    "bt": ("B[k * N + col]", "B[col * K + k]", 'shape = ["K", "N"]', 'shape = ["N", "K"]', 1),
    "at": ("A[row * K + k]", "A[k * M + row]", 'shape = ["M", "K"]', 'shape = ["K", "M"]', 0),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_tensor_core_templates_verify_for_the_other_operand_layouts(tmp_path, layout):
    import shutil

    old, new, old_shape, new_shape, which = LAYOUTS[layout]
    src = KERNEL_OF["float16"].read_text().replace(old, new)
    toml = KERNEL_OF["float16"].with_suffix(".toml").read_text()
    parts = toml.split("[[args]]")
    parts[1 + which] = parts[1 + which].replace(old_shape, new_shape)      # A is the first array, B the second
    toml = "[[args]]".join(parts).replace('torch = "ref.py:hgemm"', f'torch = "ref.py:hgemm_{layout}"')
    toml = toml.split("[baseline]")[0]
    (tmp_path / "k.cu").write_text(src)
    (tmp_path / "k.toml").write_text(toml)
    shutil.copy(TASKS / "ref.py", tmp_path / "ref.py")
    spec = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=src)
    g, why = recognize_gemm(src, spec.entry, spec)
    assert g is not None, why
    assert (g.a_layout, g.b_layout) == {"bt": ("mk", "nk"), "at": ("km", "kn")}[layout]
    prep = Preparer(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"), include_dir=tmp_path)
    arch = detect_arch()
    ts = [t for t in GEMM_TEMPLATES if "float16" in t.dtypes and (not t.archs or arch in t.archs)]
    with Runner(standard_stages(prep), (0,), harness_factory=lambda d: WorkerHarness(d, timeout_s=300),
                build_workers=os.cpu_count(), workers_per_gpu=1) as runner:
        futures = [(t.name, p, runner.submit(Candidate(instantiate_gemm(src, g, p, t.name), name="t.cu", flags=t.flags),
                                              profile=False, time_it=False))
                   for t in ts for p in (t.points()[0], t.start, t.points()[-1])]
        bad = [(n, p, ev.status, ev.message) for n, p, f in futures if (ev := f.result()).status != "ok"]
    assert not bad, bad[:3]


ROW_KERNELS = {   # first kernels whose row-wise program the row templates run (bench/templates/rewrites and operations)
    "softmax_long": TASKS.parent / "rewrites" / "softmax_long.cu",
    "rmsnorm_strided": TASKS.parent / "rewrites" / "rmsnorm_strided.cu",
    "layernorm_rows": TASKS / "layernorm_rows.cu",
    "logsoftmax_warp": TASKS / "logsoftmax_warp.cu",
    "rmsnorm_half": TASKS / "rmsnorm_half.cu",
    "softmax_kb": TASKS / "softmax_kb.cu",
}


@pytest.mark.parametrize("name", sorted(ROW_KERNELS))
def test_the_row_templates_verify_behind_each_row_wise_first_kernel(tmp_path, name):
    """Every point of the template's default space behind the two rewrites kernels (one of each
    layout); the start point and the space's first and last points behind the others. The specs'
    verify sizes include rows longer than any point's registers and sizes no vector divides."""
    from optiml.edits.templates.rowwise import ROW_TEMPLATES, instantiate_rowwise, recognize_rowwise
    kernel = ROW_KERNELS[name]
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    op, why = recognize_rowwise(src, spec.entry, spec)
    assert op is not None, why
    t = next(t for t in ROW_TEMPLATES if t.strided == op.strided)
    points = t.points() if kernel.parent.name == "rewrites" else [t.start_for(op), t.points()[0], t.points()[-1]]
    prep = Preparer(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"), include_dir=kernel.parent)
    with Runner(standard_stages(prep), (0,), harness_factory=lambda d: WorkerHarness(d, timeout_s=300),
                build_workers=os.cpu_count(), workers_per_gpu=1) as runner:
        futures = [runner.submit(Candidate(instantiate_rowwise(src, op, p, t.name), name="t.cu"), profile=False,
                                 time_it=False) for p in points]
        bad = [(p, ev.status, ev.message) for p, f in zip(points, futures) if (ev := f.result()).status != "ok"]
    assert not bad, bad[:3]


@pytest.mark.parametrize("form", ["row_grid", "row_cluster"])
@pytest.mark.parametrize("name", sorted(ROW_KERNELS))
def test_the_forms_that_spread_a_row_over_blocks_verify_behind_each_contiguous_row_kernel(tmp_path, name, form):
    """row_grid (a group of blocks meeting in global memory) and row_cluster (sm_90) at their start,
    the ends of their space and points spread across it, behind every first kernel with contiguous
    rows: the specs' rows longer than any point's part and sizes no vector divides, several groups a
    slot's generation apart at the larger sizes, and the launch run again for the timing check."""
    from optiml.edits.templates.rowwise import ROW_TEMPLATES, instantiate_rowwise, recognize_rowwise
    arch = detect_arch()
    if form == "row_cluster" and int(arch.removeprefix("sm_").rstrip("a")) < 90:
        pytest.skip("thread-block clusters need sm_90")
    kernel = ROW_KERNELS[name]
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    op, why = recognize_rowwise(src, spec.entry, spec)
    assert op is not None, why
    if op.strided:
        pytest.skip("a strided reduction: col_reduce's layout")
    t = next(t for t in ROW_TEMPLATES if t.name == form)
    every = t.points()
    points = [t.start_for(op), every[0], every[-1], *every[len(every) // 7::len(every) // 6]]
    prep = Preparer(spec, src, NvccBuilder(arch, cache_dir=tmp_path / "c"), include_dir=kernel.parent)
    with Runner(standard_stages(prep), (0,), harness_factory=lambda d: WorkerHarness(d, timeout_s=300),
                build_workers=os.cpu_count(), workers_per_gpu=1) as runner:
        futures = [runner.submit(Candidate(instantiate_rowwise(src, op, p, t.name), name="t.cu"), profile=False,
                                 time_it=True) for p in points]
        bad = [(p, ev.status, ev.message) for p, f in zip(points, futures) if (ev := f.result()).status != "ok"]
    assert not bad, bad[:3]


FLAT_KERNELS = {
    "silu": TASKS.parent / "rewrites" / "silu.cu",
    "bias_gelu": TASKS / "bias_gelu.cu",
    "mse_loss": TASKS / "mse_loss.cu",
}


@pytest.mark.parametrize("name", sorted(FLAT_KERNELS))
def test_the_flat_templates_verify_over_their_whole_space_behind_each_first_kernel(tmp_path, name):
    """Every point of the elementwise (map) or reduce_all (full reduction) space behind a first
    kernel; the specs' verify sizes include counts no vector divides and fewer elements than a block."""
    from optiml.edits.templates.flat import FLAT_TEMPLATES, instantiate_flat, recognize_flat
    kernel = FLAT_KERNELS[name]
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    op, why = recognize_flat(src, spec.entry, spec)
    assert op is not None, why
    t = next(t for t in FLAT_TEMPLATES if t.kind == op.kind)
    points = t.points()
    prep = Preparer(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"), include_dir=kernel.parent)
    with Runner(standard_stages(prep), (0,), harness_factory=lambda d: WorkerHarness(d, timeout_s=300),
                build_workers=os.cpu_count(), workers_per_gpu=1) as runner:
        futures = [runner.submit(Candidate(instantiate_flat(src, op, p, t.name), name="t.cu"), profile=False,
                                 time_it=False) for p in points]
        bad = [(p, ev.status, ev.message) for p, f in zip(points, futures) if (ev := f.result()).status != "ok"]
    assert len(points) >= 70 and not bad, bad[:3]
