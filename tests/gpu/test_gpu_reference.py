"""GPU references: a spec's ``[reference] torch = ...`` / ``cupy = ...`` is called in the GPU
child with the harness's own buffers as tensors (no host copy) and the comparison stays on the
GPU. Run on a GPU machine:

    python3 -m pytest -m gpu tests/gpu/test_gpu_reference.py -v
"""
import shutil

import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.runner import Candidate, Runner
from optiml.spec import find_spec, load_spec
from optiml.verify.harness import SubprocessHarness
from tests.conftest import EXAMPLES
from tests.test_spec import KERNEL, SPEC

pytestmark = pytest.mark.gpu

REFS = {
    "torch": "def scale(x, n, alpha):\n    return alpha * x\n",
    "torch_wrong": "def scale(x, n, alpha):\n    return alpha * x + (x.abs() > 1.9).float()\n",
    "torch_alias": ("SEEN = []\n\ndef scale(x, n, alpha):\n    SEEN.append(x.data_ptr())\n"
                    "    assert x.is_cuda and x.shape == (n,), (x.device, x.shape, n)\n    return alpha * x\n"),
    "cupy": "def scale(x, n, alpha):\n    return alpha * x\n",
    "torch_short": "def scale(x, n, alpha):\n    return (alpha * x)[:-1]\n",
}


def evaluate(tmp_path, kind: str, ref: str, kernel: str = KERNEL):
    (tmp_path / "ref.py").write_text(REFS[ref])
    (tmp_path / "scale.cu").write_text(kernel)
    (tmp_path / "scale.toml").write_text(SPEC + f'\n[reference]\n{kind} = "ref.py:scale"\n')
    k = tmp_path / "scale.cu"
    spec = load_spec(tmp_path / "scale.toml", k, kernel_source=kernel)
    ev = Runner.sequential(spec, kernel, NvccBuilder(detect_arch(), cache_dir=tmp_path / "cache"),
                           SubprocessHarness(timeout_s=120), include_dir=tmp_path)
    return ev.evaluate(Candidate(kernel, name="scale.cu"))


def test_a_torch_reference_verifies_on_the_gpu(tmp_path):
    ev = evaluate(tmp_path, "torch", "torch_alias")
    assert ev.status == "ok", ev.message
    phases = ev.harness.phases
    assert phases.get("gpu_reference", 0) > 0 and "python_reference" not in phases    # nothing went to the host
    assert all(c.passed for c in ev.harness.checks)


def test_a_wrong_torch_reference_is_a_wrong_output(tmp_path):
    ev = evaluate(tmp_path, "torch", "torch_wrong")
    assert ev.status == "wrong_output", ev.message


def test_a_reference_of_the_wrong_size_is_a_reference_error(tmp_path):
    ev = evaluate(tmp_path, "torch", "torch_short")
    assert ev.status == "reference_error" and "elements, the spec's shape" in ev.message, ev.message


def test_a_cupy_reference_verifies_on_the_gpu(tmp_path):
    pytest.importorskip("cupy", reason="CuPy is not installed on this machine")
    ev = evaluate(tmp_path, "cupy", "cupy")
    assert ev.status == "ok", ev.message
    assert ev.harness.phases.get("gpu_reference", 0) > 0


@pytest.mark.parametrize("name", ["kb_softmax", "kb_rmsnorm"])
def test_kernelbench_examples_verify_against_the_models_forward_on_the_gpu(tmp_path, name):
    kernel = EXAMPLES / name / f"{name}.cu"
    src = kernel.read_text()
    spec = load_spec(find_spec(kernel), kernel, kernel_source=src)
    assert spec.reference.kind == "torch"
    ev = Runner.sequential(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path), SubprocessHarness(timeout_s=180),
                           include_dir=kernel.parent).evaluate(Candidate(src, name=kernel.name))
    assert ev.status == "ok", ev.message
    assert ev.harness.phases.get("gpu_reference", 0) > 0


def test_reduce_sum_with_its_torch_reference(tmp_path):
    d = tmp_path / "reduce_sum"
    shutil.copytree(EXAMPLES / "reduce_sum", d)
    kernel = d / "reduce_sum.cu"
    src = kernel.read_text()
    spec = load_spec(d / "reduce_sum_torch.toml", kernel, kernel_source=src)
    ev = Runner.sequential(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "cache"),
                           SubprocessHarness(timeout_s=120), include_dir=d).evaluate(Candidate(src, name=kernel.name))
    assert ev.status == "ok", ev.message
