"""Issue 26's GEMM templates on the GPU: instantiated behind a first kernel of bench/issue26 (the fp32
ones behind an nn.Linear + bias + ReLU, the tensor-core one behind an fp16 GEMM), every point of
each one's default space verifies against the reference at the spec's odd sizes (M, N, K not
multiples of any tile). Run on the device machine:

    source .device/install.sh && python3 -m pytest -m gpu tests/gpu/test_gpu_templates.py -v
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

TASKS = Path(__file__).resolve().parents[2] / "bench" / "issue26"
KERNEL_OF = {"float32": TASKS / "linear_relu.cu", "float16": TASKS / "hgemm.cu"}   # a first kernel per dtype


@pytest.mark.parametrize("t", GEMM_TEMPLATES, ids=lambda t: t.name)
def test_every_point_of_each_gemm_template_verifies_behind_a_first_kernel(tmp_path, t):
    kernel = KERNEL_OF[t.dtypes[0]]
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    g, why = recognize_gemm(src, spec.entry, spec)
    assert g is not None, why
    prep = Preparer(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"), include_dir=kernel.parent)
    bad = []
    # every point's build at once (all cores), verified one by one by one persistent GPU worker
    with Runner(standard_stages(prep), (0,), harness_factory=lambda d: WorkerHarness(d, timeout_s=300),
                build_workers=os.cpu_count(), workers_per_gpu=1) as runner:
        points = t.points()
        futures = [runner.submit(Candidate(instantiate_gemm(src, g, p, t.name), name="t.cu"), profile=False,
                                 time_it=False) for p in points]
        for p, fut in zip(points, futures):
            ev = fut.result()
            print(p, ev.status, flush=True)
            if ev.status != "ok":
                bad.append((p, ev.status, ev.message))
    assert len(points) >= 8 and not bad, bad[:3]
