"""``optiml calibrate`` on a FAKE GPU: the calibration microbenchmarks (replaced by a fake
measurement that gives fixed figures and counts its calls) run only when the cache has no figures
for this GPU's model, driver and clocks setting, or with --force; cached figures are printed as
cached without measuring; what was measured is saved under the GPU's key (or, when nvidia-smi
does not answer, under the measurement's GPU name). None of it is GPU behaviour."""
import pytest
from click.testing import CliRunner

from optiml.cli import main
from optiml.profiler.calibration import lookup, read_cache, save
from tests.test_calibration import CLOCKS, DRIVER, FIGS, GPU, cal

MEASURED = {"dram_gbps": 3333.0, "l2_gbps": 8000.0, "fp32_gflops": 51_000.0}
DETAILS = {"sm_count": 132, "memcpy_gbps": 3100.0}


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """A FAKE GPU for ``optiml calibrate``: nvidia-smi's key is (GPU, DRIVER, CLOCKS) and the
    microbenchmarks' figures are MEASURED; returns the list of the measurements' arches."""
    import optiml.cli.calibrate as cli_calibrate
    import optiml.profiler.calibration as calibration_module
    import optiml.verify.calibrate as microbenchmarks

    monkeypatch.setenv("OPTIML_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cli_calibrate, "_require_gpu", lambda: None)
    monkeypatch.setattr(calibration_module, "current_key", lambda: (GPU, DRIVER, CLOCKS))
    measured = []

    def fake_measure(arch, *a, **kw):
        measured.append(arch)
        return {"gpu": "FAKE GPU from the benchmarks", "figures": dict(MEASURED), "details": dict(DETAILS)}

    monkeypatch.setattr(microbenchmarks, "measure", fake_measure)
    return measured


def calibrate(*args):
    return CliRunner().invoke(main, ["calibrate", "--arch", "sm_90", *args])


def test_cached_figures_are_printed_without_measuring(fake_gpu):
    save([cal()])
    r = calibrate()
    assert r.exit_code == 0, r.output
    assert r.output.startswith("cached (optiml calibrate --force measures again):") and "3000 GB/s" in r.output
    assert fake_gpu == []


def test_no_cached_figures_are_measured_and_saved_under_the_gpus_key(fake_gpu):
    r = calibrate()
    assert r.exit_code == 0, r.output
    assert r.output.startswith("measured, saved in ") and "3333 GB/s" in r.output
    assert fake_gpu == ["sm_90"]
    assert lookup(GPU, DRIVER, CLOCKS).figures["dram_gbps"] == 3333.0
    assert lookup(GPU, DRIVER, CLOCKS).details == DETAILS          # what the figures were measured under, kept
    again = calibrate()                       # now cached: not measured a second time
    assert again.exit_code == 0 and again.output.startswith("cached") and fake_gpu == ["sm_90"]


def test_force_measures_again_over_cached_figures(fake_gpu):
    save([cal()])
    r = calibrate("--force")
    assert r.exit_code == 0 and r.output.startswith("measured") and fake_gpu == ["sm_90"]
    assert lookup(GPU, DRIVER, CLOCKS).figures["dram_gbps"] == 3333.0
    assert lookup(GPU, DRIVER, CLOCKS).details == DETAILS          # what the figures were measured under, kept


def test_without_nvidia_smis_key_the_measurement_names_the_gpu(fake_gpu, monkeypatch):
    import optiml.profiler.calibration as calibration_module

    monkeypatch.setattr(calibration_module, "current_key", lambda: None)
    save([cal()])                             # another GPU's key: no use without this GPU's
    r = calibrate()
    assert r.exit_code == 0, r.output
    assert r.output.startswith("measured") and fake_gpu == ["sm_90"]
    got = lookup("FAKE GPU from the benchmarks", "unknown", "clocks unknown")
    assert got is not None and got.figures["dram_gbps"] == 3333.0 and len(read_cache()) == 2
    assert FIGS["dram_gbps"] == lookup(GPU, DRIVER, CLOCKS).figures["dram_gbps"]
