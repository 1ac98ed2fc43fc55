"""Issue 26's GEMM templates on the GPU: instantiated behind bench/issue26's nn.Linear + bias + ReLU
first kernel, every point of each one's default space verifies against the float64 reference at the
spec's odd sizes (M, N, K not multiples of any tile). Run on the device machine:

    source .device/install.sh && python3 -m pytest -m gpu tests/gpu/test_gpu_templates.py -v
"""
import itertools
from pathlib import Path

import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.edits.templates import GEMM_TEMPLATES, instantiate_gemm, recognize_gemm
from optiml.runner import Candidate, Runner
from optiml.spec import load_spec
from optiml.verify.harness import SubprocessHarness

pytestmark = pytest.mark.gpu

KERNEL = Path(__file__).resolve().parents[2] / "bench" / "issue26" / "linear_relu.cu"


@pytest.mark.parametrize("t", GEMM_TEMPLATES, ids=lambda t: t.name)
def test_every_point_of_each_gemm_template_verifies_behind_a_linear_layer(tmp_path, t):
    src = KERNEL.read_text()
    spec = load_spec(KERNEL.with_suffix(".toml"), KERNEL, kernel_source=src)
    g, why = recognize_gemm(src, spec.entry, spec)
    assert g is not None, why
    runner = Runner.sequential(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"),
                               SubprocessHarness(timeout_s=300), include_dir=KERNEL.parent)
    names = list(t.space)
    bad = []
    for values in itertools.product(*t.space.values()):
        p = dict(zip(names, values))
        if not 32 <= (p["OPTIML_BM"] // p["OPTIML_TM"]) * (p["OPTIML_BN"] // p["OPTIML_TN"]) <= 1024:
            continue
        ev = runner.evaluate(Candidate(instantiate_gemm(src, g, p, t.name), name="t.cu"), profile=False)
        print(p, ev.status, ev.median_ms, flush=True)
        if ev.status != "ok":
            bad.append((p, ev.status, ev.message))
    assert not bad, bad[:3]
