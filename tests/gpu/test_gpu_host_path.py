"""The GPU child's host path (no gpu_ops kernels: inputs drawn and outputs compared with NumPy),
which the rest of the GPU suite never takes: the same statuses as the device path through the one
verification loop, with a seed reference and with a Python reference.

    python3 -m pytest -m gpu tests/gpu/test_gpu_host_path.py -v
"""
import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.runner import Candidate, Preparer, Runner
from optiml.spec import find_spec, load_spec
from optiml.verify.harness import SubprocessHarness
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu


def evaluate(tmp_path, monkeypatch, name, edit=None, time_it=False):
    monkeypatch.setattr(Preparer, "ops_cubin", lambda self: None)      # the host path
    kernel = EXAMPLES / name / f"{name}.cu"
    seed = kernel.read_text()
    spec = load_spec(find_spec(kernel), kernel, kernel_source=seed)
    runner = Runner.sequential(spec, seed, NvccBuilder(detect_arch(), cache_dir=tmp_path), SubprocessHarness(),
                               include_dir=kernel.parent, kernel_name=kernel.name)
    source = seed if edit is None else edit(seed)
    with runner:
        return runner.evaluate(Candidate(source, name=kernel.name), time_it=time_it), spec


@pytest.mark.parametrize("name", ["transpose_naive", "reduce_sum"])        # a seed reference, a Python one
def test_the_seed_verifies_and_is_timed_on_the_host_path(tmp_path, monkeypatch, name):
    ev, spec = evaluate(tmp_path, monkeypatch, name, time_it=True)
    assert ev.status == "ok", ev.message
    assert len(ev.harness.checks) >= 2 and all(c.passed for c in ev.harness.checks)
    assert ev.median_ms and ev.median_ms > 0


def test_a_wrong_kernel_is_wrong_output_on_the_host_path(tmp_path, monkeypatch):
    ev, _ = evaluate(tmp_path, monkeypatch, "transpose_naive",
                     edit=lambda s: s.replace("= in[(size_t)i * COLS + j]", "= in[(size_t)i * COLS + j] + 1.0f"))
    assert ev.status == "wrong_output" and ev.harness.checks and not ev.harness.checks[-1].passed


def test_a_faulting_kernel_is_a_runtime_error_on_the_host_path(tmp_path, monkeypatch):
    ev, _ = evaluate(tmp_path, monkeypatch, "transpose_naive",
                     edit=lambda s: s.replace("out[(size_t)j * ROWS + i] =", "out[(size_t)j * ROWS + i + (1ull << 40)] ="))
    assert ev.status in ("runtime_error", "launch_error"), (ev.status, ev.message)
