"""ProfileResult: a failed profile is data with a status and one sentence."""
import pytest

from optiml.profiler.types import ProfileResult, ProfileStatus


def test_statuses_have_stable_values():
    assert [s.value for s in ProfileStatus] == [
        "ok", "ncu_missing", "permission_denied", "timeout", "replay_failed",
        "unknown_metric", "error",
    ]
    assert ProfileStatus("timeout") is ProfileStatus.TIMEOUT


def test_failure_carries_its_message_and_nothing_measured():
    result = ProfileResult.failure(ProfileStatus.NCU_MISSING, "ncu is not on PATH.",
                                   wall_s=0.1, dropped_metrics=["x"])
    assert not result.ok
    assert result.message == "ncu is not on PATH."
    assert result.metrics == {} and result.diagnosis == [] and result.raw_csv is None
    assert result.dropped_metrics == ["x"]


def test_ok_result():
    result = ProfileResult(ProfileStatus.OK, metrics={"duration_ns": 1.0}, raw_csv="...")
    assert result.ok and result.metrics["duration_ns"] == 1.0


def test_failure_refuses_ok():
    with pytest.raises(ValueError):
        ProfileResult.failure(ProfileStatus.OK, "fine")
