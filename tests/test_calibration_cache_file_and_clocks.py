"""Where optiml calibrate's figures go and what they are keyed by, without a GPU: save() answers
the file it wrote, and the clocks setting read from nvidia-smi (a FAKE nvidia-smi answer here)
names application clocks only when both are numbers."""
import pytest

import optiml.gpus
from optiml.profiler.calibration import Calibration, cache_file, clocks_setting, read_cache, save

FIGS = {"dram_gbps": 3000.0, "fp32_gflops": 50_000.0}


def cal() -> Calibration:
    return Calibration.from_dict({"gpu": "NVIDIA H100 80GB HBM3", "driver": "570.86.15",
                                  "clocks": "clocks unknown", "figures": FIGS}, "test")


def test_save_answers_the_file_it_wrote(tmp_path, monkeypatch):
    """save() returns the calibration file it wrote: the one given, else the cache folder's
    calibration.json ($OPTIML_CACHE_DIR)."""
    given = tmp_path / "elsewhere" / "cal.json"
    assert save([cal()], given) == given
    assert list(read_cache(given)) == [cal().key]
    monkeypatch.setenv("OPTIML_CACHE_DIR", str(tmp_path / "cache"))
    written = save([cal()])
    assert written == cache_file() == tmp_path / "cache" / "calibration.json"
    assert written.exists()


@pytest.mark.parametrize("answer, said", [
    ("1980, 2619\n", "application clocks 1980/2619 MHz"),
    ("[N/A], [N/A]\n", "clocks unknown"),                  # a GPU without application clocks
    ("1980, [N/A]\n", "clocks unknown"),
    ("[Not Supported]\n", "clocks unknown"),
    ("", "clocks unknown"),                                # no nvidia-smi
])
def test_the_clocks_setting_names_numbers_only(monkeypatch, answer, said):
    """The clocks part of a calibration's key: "application clocks G/M MHz" only when nvidia-smi
    gives two numbers, "clocks unknown" for anything else ([N/A], one field, no answer)."""
    monkeypatch.setattr(optiml.gpus, "smi", lambda *args: answer)     # a fake nvidia-smi
    assert clocks_setting() == said
