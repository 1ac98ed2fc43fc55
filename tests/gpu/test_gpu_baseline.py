"""The spec's [baseline] on the GPU: a torch function verified against the reference and
timed as a kernel is. Run on a GPU machine:

    python3 -m pytest -m gpu tests/gpu/test_gpu_baseline.py -v
"""
import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.runner import Candidate, Runner
from optiml.spec import find_spec, load_spec
from optiml.verify.harness import FunctionRef, SubprocessHarness
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu


def run_baseline(tmp_path, example: str, fn: str | None = None, body: str | None = None):
    kernel = EXAMPLES / example / f"{example}.cu"
    src = kernel.read_text()
    spec = load_spec(find_spec(kernel), kernel, kernel_source=src)
    path, name = str(spec.baseline.path), spec.baseline.function
    if body is not None:
        (tmp_path / "b.py").write_text(body)
        path, name = str(tmp_path / "b.py"), fn
    runner = Runner.sequential(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"),
                               SubprocessHarness(timeout_s=180), include_dir=kernel.parent)
    seed = runner.evaluate(Candidate(src, name=kernel.name))
    base = runner.evaluate(Candidate(src, name="baseline.cu", function=FunctionRef("torch", path, name)),
                           profile=False)
    return seed, base


@pytest.mark.parametrize("example", ["sgemm_regblock", "softmax_rows", "reduce_sum", "transpose_tiled", "kb_rmsnorm"])
def test_the_examples_baselines_verify_and_are_timed(tmp_path, example):
    seed, base = run_baseline(tmp_path, example)
    assert seed.status == "ok" and base.status == "ok", base.message
    t = base.harness.timing
    assert t.median_ms > 0 and t.reps >= 10 and t.flushed_l2
    assert all(c.passed for c in base.harness.checks)          # verified cases and the timed calls' check
    print(f"{example}: seed {seed.median_ms:.4f} ms, baseline {base.median_ms:.4f} ms", flush=True)


def test_a_wrong_baseline_is_refused(tmp_path):
    _, base = run_baseline(tmp_path, "softmax_rows", "soft",
                           "import torch\n\ndef soft(x, ROWS, COLS):\n    return torch.softmax(x, dim=0)\n")
    assert base.status == "wrong_output", base.message


def test_a_baseline_that_raises_is_a_runtime_error(tmp_path):
    _, base = run_baseline(tmp_path, "softmax_rows", "soft", "def soft(x, ROWS, COLS):\n    raise KeyError('w')\n")
    assert base.status == "runtime_error" and "the baseline function raised KeyError" in base.message, base.message
