"""Nsight Compute on the device: run with the other GPU tests (see README)."""
import json
import subprocess
import sys

import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.runner import Candidate, Runner
from optiml.profiler.ncu import NcuProfiler
from optiml.spec import find_spec, load_spec
from optiml.verify.harness import SubprocessHarness
from tests.conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.gpu


def profiled(name, tmp_path):
    kernel = EXAMPLES / name / f"{name}.cu"
    src = kernel.read_text()
    spec = load_spec(find_spec(kernel), kernel, kernel_source=src)
    ev = Runner.sequential(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"), SubprocessHarness(),
                   profiler=NcuProfiler(cache_dir=tmp_path / "q"))
    return ev.evaluate(Candidate(src, name=kernel.name))


def test_conflicting_tile_shows_conflicts_and_diagnosis_names_them(tmp_path):
    ev = profiled("sgemm_tiled_conflicts", tmp_path)
    assert ev.ok and ev.profile.ok, (ev.message, ev.profile)
    m = ev.profile.metrics
    assert m["smem_ld_bank_conflicts"] > 1e8
    assert any("bank conflicts" in s for s in ev.profile.diagnosis)
    assert "registers" in m["occupancy_limiters"] or "shared_mem" in m["occupancy_limiters"]
    print(f"profile wall time sgemm_tiled_conflicts: {ev.profile.wall_s:.2f} s; conflicts {m['smem_ld_bank_conflicts']:.3g}", file=sys.stderr)


def test_naive_sgemm_shows_no_conflicts(tmp_path):
    ev = profiled("sgemm_naive", tmp_path)
    assert ev.ok and ev.profile.ok, (ev.message, ev.profile)
    assert (ev.profile.metrics.get("smem_ld_bank_conflicts") or 0) == 0
    assert not any("bank conflicts" in s for s in ev.profile.diagnosis)
    print(f"profile wall time sgemm_naive: {ev.profile.wall_s:.2f} s", file=sys.stderr)


def test_cli_profile_json():
    kernel = EXAMPLES / "transpose_naive" / "transpose_naive.cu"
    r = subprocess.run([sys.executable, "-m", "optiml", "profile", str(kernel), "--json"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["status"] == "ok" and data["metrics"]["duration_ns"] > 0 and data["wall_s"] > 0
