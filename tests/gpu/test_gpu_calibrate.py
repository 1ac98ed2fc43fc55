"""optiml calibrate on the GPU: every figure in a plausible range for the device, and the copy
kernel within 10 % of a plain device-to-device memcpy loop timed in the same child. Run on a GPU
machine (see README):

    python3 -m pytest -m gpu tests/gpu/test_gpu_calibrate.py -v -s
"""
import json

import pytest
from click.testing import CliRunner

from optiml.build import detect_arch
from optiml.cli import main
from optiml.profiler.calibration import current_key, forget, lookup, peaks_for
from optiml.profiler.diagnosis import peaks_for_device
from optiml.verify.calibrate import measure

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    got = measure(detect_arch(), cache_dir=tmp_path_factory.mktemp("calibrate-build"))
    print(json.dumps(got, indent=1))
    return got


def test_copy_within_ten_percent_of_memcpy(measured):
    copy, memcpy = measured["figures"]["dram_gbps"], measured["details"]["memcpy_gbps"]
    assert abs(copy / memcpy - 1) <= 0.10, (copy, memcpy)


def test_figures_plausible(measured):
    f = measured["figures"]
    sheet = peaks_for_device(measured["gpu"])
    assert 100 < f["dram_gbps"] < 10_000
    assert f["l2_gbps"] > f["dram_gbps"]                       # L2 is faster than DRAM
    assert 1_000 < f["fp32_gflops"] < 200_000
    if int(measured["details"]["arch"][3:].rstrip("af")) >= 80:
        assert f["fp16_tensor_gflops"] > 4 * f["fp32_gflops"]  # tensor cores beat FP32 FMA
        assert f["bf16_tensor_gflops"] > 0.8 * f["fp16_tensor_gflops"]
        assert f["tf32_tensor_gflops"] > f["fp32_gflops"]
    if sheet is not None:                                      # H100 SXM / H200: 60-100 % of the datasheet
        assert 0.6 * sheet.dram_gbps < f["dram_gbps"] <= 1.0 * sheet.dram_gbps
        assert 0.6 * sheet.fp32_gflops < f["fp32_gflops"] <= 1.05 * sheet.fp32_gflops
        assert 0.4 * sheet.fp16_tensor_gflops < f["fp16_tensor_gflops"] <= 1.05 * sheet.fp16_tensor_gflops


def test_cli_measures_caches_and_judge_uses_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIML_CACHE_DIR", str(tmp_path))
    forget()
    r = CliRunner().invoke(main, ["calibrate"])
    assert r.exit_code == 0, r.output
    assert "measured, saved in" in r.output and "DRAM copy bandwidth" in r.output
    key = current_key()
    assert lookup(*key) is not None
    r = CliRunner().invoke(main, ["calibrate"])                 # the second time: cached, not measured
    assert r.exit_code == 0 and r.output.startswith("cached")
    forget()
    assert peaks_for(key[0]).source == "measured"
