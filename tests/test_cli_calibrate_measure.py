"""`optiml calibrate` without --show/--import, on this CPU machine: with a FAKE nvidia-smi (a shell
script on PATH) that lists no GPU it refuses in one sentence saying so; with one that lists a GPU
it goes on to measure, where the GPU parts are FAKES (require_gpu passes, resolve_arch says sm_90,
the calibration app function returns fixed figures), and it prints what was measured or cached,
or with --json the calibration object that --import reads. None of this is GPU behaviour."""
import json
import os

import pytest
from click.testing import CliRunner

from optiml.cli import main
from optiml.profiler.calibration import Calibration, format_calibration
from tests.conftest import assert_one_sentence_error

FIGURES = {"dram_gbps": 3000.0, "l2_gbps": 7000.0, "fp32_gflops": 50_000.0, "fp16_tensor_gflops": 600_000.0,
           "bf16_tensor_gflops": 590_000.0, "tf32_tensor_gflops": 300_000.0}
FAKE_CAL = Calibration.from_dict({"gpu": "NVIDIA H100 80GB HBM3", "driver": "570.86.15",
                                  "clocks": "application clocks 1980/2619 MHz", "figures": FIGURES,
                                  "measured_at": "2025-01-01T00:00:00"}, "test")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIML_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path / "cache" / "calibration.json"


def fake_nvidia_smi(tmp_path, monkeypatch, listed: str) -> None:
    """Puts a fake nvidia-smi first on PATH that prints ``listed`` for the GPU list query."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\ncase \"$*\" in *index,name*) printf '%s' '{listed}';; esac\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")


def fake_gpu_parts(monkeypatch, measured: bool) -> dict:
    """Replaces what would touch the GPU by fakes; returns what they were asked."""
    import optiml.app.calibration
    import optiml.build
    import optiml.gpus

    asked = {}

    def fake_calibration(arch, force=False):
        asked["arch"], asked["force"] = arch, force
        return FAKE_CAL, measured

    monkeypatch.setattr(optiml.gpus, "require_gpu", lambda command: asked.setdefault("require_gpu", command))
    monkeypatch.setattr(optiml.build, "resolve_arch", lambda arch: arch or "sm_90")
    monkeypatch.setattr(optiml.app.calibration, "calibration", fake_calibration)
    return asked


def test_calibrate_when_nvidia_smi_lists_no_gpu_is_one_sentence(tmp_path, monkeypatch, cache):
    fake_nvidia_smi(tmp_path, monkeypatch, "")
    asked = fake_gpu_parts(monkeypatch, measured=True)
    r = CliRunner().invoke(main, ["calibrate"])
    assert_one_sentence_error(r, "Error: no GPU was found (nvidia-smi lists no GPU); `optiml calibrate` measures a "
                                 "CUDA GPU, while --show lists cached figures and --import FILE loads figures "
                                 "measured elsewhere.")
    assert asked == {}


def test_calibrate_with_a_gpu_listed_measures_and_says_where_it_saved(tmp_path, monkeypatch, cache):
    fake_nvidia_smi(tmp_path, monkeypatch, "0, NVIDIA H100 80GB HBM3\n")
    asked = fake_gpu_parts(monkeypatch, measured=True)
    r = CliRunner().invoke(main, ["calibrate"])
    assert r.exit_code == 0, r.output
    assert r.output == f"measured, saved in {cache}:\n" + format_calibration(FAKE_CAL)
    assert asked == {"require_gpu": "calibrate", "arch": "sm_90", "force": False}


def test_calibrate_says_when_the_figures_were_cached(tmp_path, monkeypatch, cache):
    fake_nvidia_smi(tmp_path, monkeypatch, "0, NVIDIA H100 80GB HBM3\n")
    asked = fake_gpu_parts(monkeypatch, measured=False)
    r = CliRunner().invoke(main, ["calibrate", "--arch", "sm_90a"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == "cached (optiml calibrate --force measures again):"
    assert asked["arch"] == "sm_90a"


def test_calibrate_json_prints_only_the_calibration_object(tmp_path, monkeypatch, cache):
    """--json: one JSON object, the calibration as --import reads it, and no 'measured' line."""
    fake_nvidia_smi(tmp_path, monkeypatch, "0, NVIDIA H100 80GB HBM3\n")
    asked = fake_gpu_parts(monkeypatch, measured=True)
    r = CliRunner().invoke(main, ["calibrate", "--json", "--force"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == FAKE_CAL.to_dict()
    assert "measured, saved" not in r.output
    assert asked["force"] is True
