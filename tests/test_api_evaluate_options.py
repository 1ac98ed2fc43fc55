"""``optiml.evaluate``'s options as a user relies on them, with the FAKE GPU worker of
tests/test_api.py (median BLOCK / 100 ms, keeps the jobs it was given) and the FAKE
compute-sanitizer of tests/test_optimize_fakes.py: which GPU the verification and timing job is
sent to (GPU 0 unless ``device=`` says otherwise), and ``sanitize=True`` running compute-sanitizer
(and only then). Real nvcc builds; none of it is GPU behaviour."""
import pytest

import optiml
from tests.test_api import VADD, VADD_TASK, FakeEvalWorker, fake_eval_gpu, vadd_args  # noqa: F401 (a fixture)
from tests.test_optimize_fakes import FakeSanitizer


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
