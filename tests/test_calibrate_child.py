"""optiml.verify.calibrate's GPU child and its parent on FAKES: a FAKE pycuda driver
(tests/fake_pycuda.py) whose microbenchmark kernels take the fake clock a time made from their
arguments and launch size at a throughput the test chooses, so every figure must come out as that
throughput (the work optiml counts per launch over the time of one); a FAKE nvcc builder and a
FAKE child process for the parent. The figures are the fakes' own numbers: what calibrate.cu
measures on a GPU is checked there (tests/gpu)."""
import json
import math
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from optiml.verify import calibrate
from tests.fake_pycuda import FakeDriver, FakeFunction, install

DRAM, MEMCPY, L2, FP32 = 3.0e12, 2.5e12, 9.0e12, 60.0e12          # bytes or flops a second
MMA = {"mma_f16": 800e12, "mma_bf16": 790e12, "mma_tf32": 400e12}
K = {"mma_f16": 16, "mma_bf16": 16, "mma_tf32": 8}


def _threads(grid, block):
    return math.prod(grid) * math.prod(block)


class FakeCalibrationDriver(FakeDriver):
    """The fake driver with calibrate.cu's kernels: each launch's time is its work at the chosen
    throughput; ``has_mma``/``has_wgmma`` write the flags given."""

    def __init__(self, has_mma=1, has_wgmma=0, wgmma=None):
        super().__init__(l2_bytes=4 << 20, sms=4, free_bytes=4 << 20)
        ms = lambda work, rate: work / rate * 1e3            # noqa: E731
        effects = {
            "copy_f4": lambda d, g, b, a: ms(2 * 16 * int(a[2]), DRAM),
            "l2_read": lambda d, g, b, a: ms(16 * int(a[1]) * int(a[2]) * math.prod(g), L2),
            "fma_f32": lambda d, g, b, a: ms(2 * 8 * 16 * int(a[0]) * _threads(g, b), FP32),
        }
        for name, rate in MMA.items():
            effects[name] = (lambda d, g, b, a, rate=rate, k=K[name]:
                             ms(2 * 16 * 8 * k * 8 * 4 * int(a[0]) * _threads(g, b) // 32, rate))
        for name, rate in (wgmma or {}).items():
            effects[name] = (lambda d, g, b, a, rate=rate:
                             ms(2 * 64 * 256 * 16 * 4 * 2 * int(a[0]) * math.prod(g), rate))
        for name, flag in (("has_mma", has_mma), ("has_wgmma", has_wgmma)):
            effects[name] = (lambda d, g, b, a, flag=flag:
                             d.bytes_at(a[0], 4).__setitem__(slice(None), np.array([flag], np.int32).view(np.uint8)))
        self.kernels = {name: FakeFunction(self, name, effect) for name, effect in effects.items()}

    def memcpy_ms(self, nbytes):
        return 2 * nbytes / MEMCPY * 1e3


def test_every_figure_is_its_kernels_work_per_second():
    drv = FakeCalibrationDriver(has_mma=1)
    out = calibrate.run_benchmarks(drv, "calibrate.cubin")
    assert drv.modules == ["calibrate.cubin"] and out["gpu"] == "FAKE GPU"
    assert out["figures"] == pytest.approx({"dram_gbps": DRAM / 1e9, "l2_gbps": L2 / 1e9, "fp32_gflops": FP32 / 1e9,
                                            "fp16_tensor_gflops": 800e3, "bf16_tensor_gflops": 790e3,
                                            "tf32_tensor_gflops": 400e3})
    d = out["details"]
    nbytes = (4 << 20) // 4                                   # a quarter of the free memory, each buffer
    assert (d["copy_bytes"], d["sm_count"], d["l2_bytes"], d["arch"], d["reps"]) == (nbytes, 4, 4 << 20, "sm_90", 9)
    assert d["memcpy_gbps"] == pytest.approx(MEMCPY / 1e9) and d["l2_buffer_bytes"] == 1 << 20
    one_pass = (1 << 20) * 16 / L2 * 1e3                      # 16 blocks read the 1 MiB buffer once
    assert d["l2_passes"] == int(calibrate.TARGET_MS / one_pass)
    assert set(d["spreads"]) == {"dram_gbps", "l2_gbps", "fp32_gflops", "fp16_tensor_gflops", "bf16_tensor_gflops",
                                 "tf32_tensor_gflops"} and set(d["spreads"].values()) == {0.0}
    fma = drv.launches("fma_f32")
    assert {(e[2], e[3]) for e in fma} == {((4 * 8, 1, 1), (256, 1, 1))}         # one wave of 8 blocks an SM
    assert {(e[2], e[3]) for e in drv.launches("copy_f4")} == {((nbytes // 16 // 256, 1, 1), (256, 1, 1))}
    assert {(e[2], e[3]) for name in ("has_mma", "has_wgmma") for e in drv.launches(name)} == {((1, 1, 1), (1, 1, 1))}
    assert len(fma) == (1 + 3) + (2 + 9)                      # sizing: warm-up and 3; then warm-ups and REPS
    assert sorted(drv.freed) == sorted(drv.mem)               # every buffer freed


def test_a_figures_spread_is_its_times_interquartile_range_over_their_median():
    drv = FakeDriver()
    times = iter([9.0, 9.0] + [float(t) for t in (5, 1, 9, 3, 7, 2, 8, 4, 6)])     # two warm-ups, then nine

    def launch():
        drv.clock += next(times)
    median, spread = calibrate._median_ms(drv, launch, reps=9, warmup=2)
    assert median == 5.0 and spread == pytest.approx((7.5 - 2.5) / 5.0)


def test_without_mma_in_the_build_the_tensor_figures_are_none():
    drv = FakeCalibrationDriver(has_mma=0)
    figures = calibrate.run_benchmarks(drv, "calibrate.cubin")["figures"]
    assert figures["fp16_tensor_gflops"] is figures["bf16_tensor_gflops"] is figures["tf32_tensor_gflops"] is None
    assert figures["fp32_gflops"] == pytest.approx(FP32 / 1e9)
    assert not [e for e in drv.launches() if e[1].startswith("mma_")]


def test_wgmma_gives_the_figure_where_it_is_faster_and_both_are_in_the_details():
    drv = FakeCalibrationDriver(has_mma=1, has_wgmma=1, wgmma={"wgmma_f16": 990e12, "wgmma_bf16": 700e12})
    out = calibrate.run_benchmarks(drv, "calibrate.cubin")
    f, d = out["figures"], out["details"]
    assert f["fp16_tensor_gflops"] == pytest.approx(990e3) and f["bf16_tensor_gflops"] == pytest.approx(790e3)
    assert {k: v for k, v in d.items() if "mma" in k} == pytest.approx({
        "mma_sync_fp16_tensor_gflops": 800e3, "wgmma_fp16_tensor_gflops": 990e3,
        "mma_sync_bf16_tensor_gflops": 790e3, "wgmma_bf16_tensor_gflops": 700e3})
    assert {(e[2], e[3]) for e in drv.launches("wgmma_f16")} == {((4, 1, 1), (256, 1, 1))}


def test_the_child_writes_its_figures_as_json_and_leaves_its_context(monkeypatch, tmp_path):
    drv = install(monkeypatch, FakeCalibrationDriver())
    out = tmp_path / "figures.json"
    assert calibrate.main("calibrate.cubin", str(out)) == 0
    got = json.loads(out.read_text())
    assert got["gpu"] == "FAKE GPU" and got["figures"]["dram_gbps"] == pytest.approx(DRAM / 1e9)
    assert ("ctx_pop",) in drv.log


class FakeNvccBuilder:
    built: list = []

    def __init__(self, arch, cache_dir=None):
        self.arch = arch

    def build(self, source, flags, name):
        FakeNvccBuilder.built.append((self.arch, flags, name))
        if self.arch == "sm_bad":
            return SimpleNamespace(ok=False, status="compile_error", log="x" * 5000 + "error: no such instruction")
        return SimpleNamespace(ok=True, cubin_path=f"/cache/{self.arch}/calibrate.cubin")


def test_the_microbenchmarks_are_built_for_the_arch_and_hopper_gets_its_arch_specific_build(monkeypatch, tmp_path):
    import optiml.build as build

    monkeypatch.setattr(build, "NvccBuilder", FakeNvccBuilder)
    FakeNvccBuilder.built = []
    assert calibrate.cubin_for("sm_80", tmp_path) == Path("/cache/sm_80/calibrate.cubin")
    assert calibrate.cubin_for("sm_90") == Path("/cache/sm_90a/calibrate.cubin")
    assert FakeNvccBuilder.built == [("sm_80", ("-O3",), "calibrate.cu"), ("sm_90a", ("-O3",), "calibrate.cu")]
    with pytest.raises(RuntimeError, match=r"did not build for sm_bad \(compile_error\):\nx+error: no such instr"):
        calibrate.cubin_for("sm_bad")


def _fake_child(monkeypatch, answer):
    """The parent's child process replaced: ``answer(cmd, timeout)`` is what subprocess.run does."""
    monkeypatch.setattr(calibrate, "cubin_for", lambda arch, cache_dir=None: Path(f"/cache/{arch}.cubin"))
    monkeypatch.setattr(calibrate, "subprocess", SimpleNamespace(run=lambda cmd, **kw: answer(cmd, kw["timeout"]),
                                                                 TimeoutExpired=subprocess.TimeoutExpired))


def test_measure_returns_what_the_child_wrote(monkeypatch):
    import sys

    seen = []

    def answer(cmd, timeout):
        seen.append((cmd[:4], timeout))
        Path(cmd[4]).write_text(json.dumps({"gpu": "FAKE GPU", "figures": {"dram_gbps": 1.5}, "details": {}}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    _fake_child(monkeypatch, answer)
    assert calibrate.measure("sm_90", timeout_s=30) == {"gpu": "FAKE GPU", "figures": {"dram_gbps": 1.5}, "details": {}}
    assert seen == [([sys.executable, "-m", "optiml.verify.calibrate", "/cache/sm_90.cubin"], 30)]


def test_a_child_that_fails_is_one_sentence_with_its_last_line(monkeypatch):
    stderr = "Traceback\n  ...\nLogicError: out of memory\n"
    _fake_child(monkeypatch, lambda cmd, t: subprocess.CompletedProcess(cmd, 1, "", stderr))
    with pytest.raises(calibrate.CalibrationFailed) as e:
        calibrate.measure("sm_90")
    assert str(e.value) == "the calibration microbenchmarks failed (exit 1): LogicError: out of memory"
    _fake_child(monkeypatch, lambda cmd, t: subprocess.CompletedProcess(cmd, 0, "", ""))    # exit 0, no figures
    with pytest.raises(calibrate.CalibrationFailed, match=r"failed \(exit 0\): no output"):
        calibrate.measure("sm_90")


def test_a_child_that_does_not_finish_is_a_timeout_sentence(monkeypatch):
    def answer(cmd, timeout):
        raise subprocess.TimeoutExpired(cmd, timeout)

    _fake_child(monkeypatch, answer)
    with pytest.raises(calibrate.CalibrationFailed, match="did not finish in 5 s; is another process using the GPU"):
        calibrate.measure("sm_90", timeout_s=5)
