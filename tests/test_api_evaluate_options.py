"""``optiml.evaluate``'s options as a user relies on them, with the FAKE GPU worker of
tests/test_api.py (median BLOCK / 100 ms, keeps the jobs it was given) and the FAKE
compute-sanitizer of tests/test_optimize_fakes.py: which GPU the verification and timing job is
sent to (GPU 0 unless ``device=`` says otherwise), and ``sanitize=True`` running compute-sanitizer
(and only then). Real nvcc builds; none of it is GPU behaviour."""
import pytest

import optiml
from tests.conftest import RUNNER_DEADLINE
from tests.test_api import VADD, VADD_TASK, FakeEvalWorker, fake_eval_gpu, vadd_args  # noqa: F401 (a fixture)
from tests.test_optimize_fakes import FakeSanitizer

pytestmark = RUNNER_DEADLINE


@pytest.fixture
def fake_sanitizer(monkeypatch):
    import optiml.verify.sanitizer as sanitizer_module

    monkeypatch.setattr(sanitizer_module, "Sanitizer", FakeSanitizer)
    monkeypatch.setattr(FakeSanitizer, "under", 64)
    FakeSanitizer.jobs = []


def test_evaluate_runs_on_gpu_0_unless_a_device_is_given(fake_eval_gpu):
    result = optiml.evaluate(VADD, args=vadd_args(), arch="sm_90", **VADD_TASK)
    assert result.ok and FakeEvalWorker.jobs and {j.device for j in FakeEvalWorker.jobs} == {0}
    FakeEvalWorker.jobs = []
    result = optiml.evaluate(VADD, args=vadd_args(), arch="sm_90", device=1, **VADD_TASK)
    assert result.ok and FakeEvalWorker.jobs and {j.device for j in FakeEvalWorker.jobs} == {1}


def test_sanitize_true_runs_compute_sanitizer_and_reports_its_verdict(fake_eval_gpu, fake_sanitizer):
    result = optiml.evaluate(VADD, args=vadd_args(), arch="sm_90", sanitize=True, **VADD_TASK)
    assert result.ok and FakeSanitizer.jobs == [128]           # the kernel's BLOCK: the FAKE sanitizer ran on it
    assert result.to_dict()["sanitize"]["status"] == "clean"


def test_without_sanitize_no_compute_sanitizer_runs(fake_eval_gpu, fake_sanitizer):
    result = optiml.evaluate(VADD, args=vadd_args(), arch="sm_90", **VADD_TASK)
    assert result.ok and FakeSanitizer.jobs == [] and result.to_dict()["sanitize"] is None


def test_evaluate_kernel_called_without_options_runs_on_gpu_0_with_a_120_s_child(tmp_path, fake_eval_gpu, monkeypatch):
    """app.evaluate.evaluate_kernel is what `optiml eval` and the API call; its own defaults are what a
    script calling it bare gets: GPU 0, and a GPU child given 120 s."""
    from optiml.app.evaluate import evaluate_kernel
    from tests.test_spec import write

    made = []

    class KeepsTimeout(FakeEvalWorker):
        def __init__(self, device=0, timeout_s=None):
            made.append(timeout_s)
            super().__init__(device, timeout_s)

    import optiml.verify.harness as harness

    monkeypatch.setattr(harness, "SubprocessHarness", KeepsTimeout)
    kernel, _ = write(tmp_path)
    ev, spec = evaluate_kernel(kernel, arch="sm_90")
    assert ev.ok and spec.entry == "scale"
    assert {j.device for j in FakeEvalWorker.jobs} == {0} and made == [120.0]
