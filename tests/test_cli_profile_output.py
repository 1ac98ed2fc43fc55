"""What `optiml profile KERNEL` prints for a kernel it verified and profiled, over a FAKE runner (no
GPU, no ncu: the Evaluation is made here): with --json one JSON object (the evaluation's status and
time, then the profile's own fields), else the evaluation's lines, "profile   ok" and the metrics."""
import json
import shutil

import pytest
from click.testing import CliRunner

from optiml.cli import main
from optiml.profiler.types import ProfileResult, ProfileStatus
from optiml.runner import Evaluation, Runner
from tests.conftest import EXAMPLES


@pytest.fixture
def profiled(tmp_path, monkeypatch):
    """reduce_sum copied here, the GPU check passed, and a FAKE runner whose one evaluation is ok at
    0.25 ms with a profile of two metrics and one finding."""
    import optiml.gpus as gpus

    for f in (EXAMPLES / "reduce_sum").iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    profile = ProfileResult(ProfileStatus.OK, metrics={"dram_throughput_pct": 81.5, "achieved_occupancy_pct": 62.0},
                            diagnosis=["memory-bound: DRAM throughput is 81.5 % of peak"], wall_s=0.4)

    class FakeRunner:
        def evaluate(self, candidate):
            return Evaluation("ok", "", median_ms=0.25, profile=profile)

    monkeypatch.setattr(gpus, "require_gpu", lambda command: None)
    monkeypatch.setattr(Runner, "sequential", classmethod(lambda cls, *a, **kw: FakeRunner()))
    return next(tmp_path.glob("*.cu"))


def test_profile_json_is_one_object_with_the_evaluation_and_the_profile(profiled):
    r = CliRunner().invoke(main, ["profile", str(profiled), "--arch", "sm_90", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert (data["evaluation_status"], data["median_ms"], data["status"]) == ("ok", 0.25, "ok")
    assert data["metrics"]["dram_throughput_pct"] == 81.5 and data["diagnosis"] == [
        "memory-bound: DRAM throughput is 81.5 % of peak"]


def test_profile_text_names_the_profile_and_its_findings(profiled):
    r = CliRunner().invoke(main, ["profile", str(profiled), "--arch", "sm_90"])
    assert r.exit_code == 0, r.output
    assert "profile   ok in 0.40 s" in r.output and "memory-bound: DRAM throughput" in r.output
    assert not r.output.lstrip().startswith("{")
