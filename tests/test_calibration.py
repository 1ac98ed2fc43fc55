"""Measured speed of light without a GPU: the calibration cache (keyed by GPU, driver and clocks),
--import and --show, the bound arithmetic from fixed figures, the diagnosis and the judge's bound
saying "measured" or "datasheet", and calibrate.cu building with nvcc."""
import json

import pytest
from click.testing import CliRunner

from optiml.cli import main
from optiml.profiler.calibration import (Calibration, CalibrationError, import_file, lookup, peaks_for,
                                         physical_bound_ms, read_cache, save, speed_of_light)
from optiml.profiler.diagnosis import H100_SXM, diagnose
from optiml.runner.judge import speed_of_light_ms

GPU, DRIVER, CLOCKS = "NVIDIA H100 80GB HBM3", "570.86.15", "application clocks 1980/2619 MHz"
FIGS = {"dram_gbps": 3000.0, "l2_gbps": 7000.0, "fp32_gflops": 50_000.0, "fp16_tensor_gflops": 600_000.0,
        "bf16_tensor_gflops": 590_000.0, "tf32_tensor_gflops": 300_000.0}


def cal(**kw) -> Calibration:
    d = {"gpu": GPU, "driver": DRIVER, "clocks": CLOCKS, "figures": dict(FIGS), "details": {"memcpy_gbps": 2950.0}}
    return Calibration.from_dict(d | kw, "test")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIML_CACHE_DIR", str(tmp_path))
    return tmp_path / "calibration.json"


def test_cache_is_keyed_by_gpu_driver_and_clocks(cache):
    save([cal()])
    assert lookup(GPU, DRIVER, CLOCKS).figures["dram_gbps"] == 3000.0
    assert lookup(GPU, "580.0", CLOCKS) is None                       # another driver: measured again
    assert lookup(GPU, DRIVER, "application clocks 1500/2619 MHz") is None
    save([cal(figures=FIGS | {"dram_gbps": 3100.0})])                 # the same key is replaced
    assert len(read_cache()) == 1 and lookup(GPU, DRIVER, CLOCKS).figures["dram_gbps"] == 3100.0


def test_peaks_measured_when_cached_else_datasheet(cache):
    key = (GPU, DRIVER, CLOCKS)
    assert peaks_for(GPU, key) is H100_SXM                            # no calibration: the datasheet
    save([cal()])
    p = peaks_for(GPU, key)
    assert (p.source, p.dram_gbps, p.fp16_tensor_gflops, p.l2_gbps) == ("measured", 3000.0, 600_000.0, 7000.0)
    assert peaks_for("NVIDIA RTX 9999", ("NVIDIA RTX 9999", DRIVER, CLOCKS)) is None
    cache.write_text("{not json")                                     # a broken cache: no calibration
    assert peaks_for(GPU, key) is H100_SXM


@pytest.mark.parametrize("facts,want", [
    ((GPU, DRIVER), (GPU, DRIVER, CLOCKS)),
    ((GPU, ""), None),                          # nvidia-smi named the GPU but not its driver
    (("", DRIVER), None),
    ((None, None), None),
])
def test_the_current_key_needs_the_gpus_name_and_driver(monkeypatch, facts, want):
    import optiml.gpus as gpus
    import optiml.profiler.calibration as calibration

    monkeypatch.setattr(gpus, "gpu_facts", lambda: facts)
    monkeypatch.setattr(calibration, "clocks_setting", lambda: CLOCKS)
    assert calibration.current_key() == want


def test_the_calibration_applies_to_the_gpu_it_was_measured_on_only(cache, monkeypatch):
    """peaks_for without a key takes GPU 0's (nvidia-smi): measured figures for that GPU's name,
    the datasheet's for a device of another name."""
    import optiml.profiler.calibration as calibration

    save([cal()])
    monkeypatch.setattr(calibration, "current_key", lambda: (GPU, DRIVER, CLOCKS))
    calibration.forget()
    try:
        assert peaks_for(GPU).source == "measured"
        assert peaks_for("NVIDIA H200") is not None and peaks_for("NVIDIA H200").source == "datasheet"
    finally:
        calibration.forget()


def test_bound_arithmetic_memory_and_compute():
    peaks = cal().peaks()
    # a copy of 1.2 GB: 0.4 ms at 3000 GB/s; timed at 0.5 ms: 80 % of the memory bound
    sol = speed_of_light(0.5, flops=None, nbytes=1.2e9, peaks=peaks)
    assert (sol.bound, round(sol.fraction, 6), sol.peak_name, sol.source) == (
        "memory", 0.8, "DRAM copy bandwidth", "measured")
    # an fp16 GEMM 4096^3: 1.37e11 FLOP, 1e8 bytes: compute-bound at the fp16 tensor rate
    flops, nbytes = 2 * 4096 ** 3, 3 * 4096 * 4096 * 2
    sol = speed_of_light(0.5, flops, nbytes, peaks, dtype="float16")
    assert sol.bound == "compute" and sol.peak == 600_000.0 and "fp16 tensor" in sol.peak_name
    assert sol.fraction == pytest.approx(flops / 600e12 / 0.5e-3)
    # the same counts in float32: held to a third of the TF32 rate (three TF32 products make an
    # fp32-accurate one), here faster than the FP32 FMA rate; where it is not, to FP32 FMA
    sol32 = speed_of_light(5.0, flops, nbytes * 2, peaks, dtype="float32")
    assert sol32.peak == 100_000.0 and sol32.fraction == pytest.approx(flops / 100e12 / 5e-3)
    assert "a third of TF32" in sol32.peak_name
    slow_tf32 = cal(figures=dict(FIGS, tf32_tensor_gflops=120_000.0)).peaks()
    assert speed_of_light(5.0, flops, nbytes * 2, slow_tf32, dtype="float32").peak == 50_000.0
    # datasheet peaks say so
    assert speed_of_light(0.5, None, 1.2e9, H100_SXM).source == "datasheet"
    assert speed_of_light(0.5, None, None, peaks) is None and speed_of_light(0.5, None, 1e9, None) is None


def test_judge_bound_uses_measured_peaks():
    measured = cal().peaks()
    # bytes at the measured 3000 GB/s (not the datasheet's 3350); FLOPs at the fastest tensor rate
    assert physical_bound_ms(None, 3e9, measured) == pytest.approx(1.0)
    assert speed_of_light_ms((None, 3e9), GPU, measured) == pytest.approx(1.0)
    assert speed_of_light_ms((None, 3.35e9), GPU, H100_SXM) == pytest.approx(1.0)
    assert physical_bound_ms(6e11, None, measured) == pytest.approx(1.0)
    assert physical_bound_ms(None, None, measured) is None and physical_bound_ms(0.0, 0.0, measured) is None   # no counts: no bound
    assert physical_bound_ms(6e11, 3e9, None) is None


def test_diagnosis_says_measured_or_datasheet():
    metrics = {"duration_ns": 1e6}
    measured = " ".join(diagnose(metrics, flops=1e10, bytes_moved=1.5e9, peaks=cal().peaks()))
    assert "50.0% of the NVIDIA H100 80GB HBM3 DRAM copy bandwidth of 3000 GB/s (measured by optiml calibrate)" \
        in measured
    sheet = " ".join(diagnose(metrics, flops=1e10, bytes_moved=1.5e9, peaks=H100_SXM))
    assert "(datasheet; run optiml calibrate to measure this GPU)" in sheet
    bf16 = " ".join(diagnose(metrics, flops=5.9e11, bytes_moved=1e6, peaks=cal().peaks(), is_half_matmul=True,
                             half_dtype="bfloat16"))
    assert "100.0% of the NVIDIA H100 80GB HBM3 dense bf16 tensor-core peak of 590 TFLOP/s" in bf16


@pytest.mark.parametrize("bad, said", [
    ({"figures": FIGS | {"dram_gbps": -1}}, "figures.dram_gbps must be a positive number"),
    ({"figures": FIGS | {"hbm_gbps": 1.0}}, "unknown figure 'hbm_gbps'"),
    ({"driver": ""}, "'driver' is missing"),
    ({"figures": {k: v for k, v in FIGS.items() if k != "fp32_gflops"}}, "figures.fp32_gflops must be"),
])
def test_import_errors_are_one_sentence(tmp_path, cache, bad, said):
    f = tmp_path / "elsewhere.json"
    f.write_text(json.dumps(cal().to_dict() | bad))
    with pytest.raises(CalibrationError, match=said):
        import_file(f)
    r = CliRunner().invoke(main, ["calibrate", "--import", str(f)])
    assert r.exit_code == 1 and said.split()[0] in r.output and "Traceback" not in r.output
    assert not cache.exists()


def test_a_file_that_is_no_calibration_is_one_sentence(tmp_path, cache):
    """--import of a file that is missing, not JSON, empty, or not an object; a cache file damaged the
    same ways: each a sentence saying what to do, nothing written."""
    f = tmp_path / "elsewhere.json"
    cases = [(None, f"--import {f}: cannot read it (No such file or directory)."),
             ("{", f"--import {f}: not JSON (Expecting property name enclosed in double quotes at line 1)."),
             ("[]", f"--import {f}: it holds no calibration."),
             ('{"calibrations": []}', f"--import {f}: it holds no calibration."),
             ("[3]", f"--import {f}: [0]: a calibration must be a JSON object, not int."),
             (json.dumps(cal().to_dict() | {"figures": [1]}), f"--import {f}: 'figures' is missing or not an object.")]
    for text, said in cases:
        f.unlink(missing_ok=True)
        if text is not None:
            f.write_text(text)
        with pytest.raises(CalibrationError) as e:
            import_file(f)
        assert str(e.value) == said
    assert not cache.exists()
    cache.parent.mkdir(parents=True, exist_ok=True)
    for text, said in (("{", "the calibration cache is not JSON (Expecting property name enclosed in double quotes "
                             "at line 1); delete it and run optiml calibrate again."),
                       ("[]", "the calibration cache has no 'calibrations' list; delete it and run optiml calibrate again."),
                       ('{"calibrations": 3}', "the calibration cache has no 'calibrations' list; delete it and run "
                                               "optiml calibrate again.")):
        cache.write_text(text)
        with pytest.raises(CalibrationError) as e:
            read_cache(cache)
        assert str(e.value) == f"{cache}: {said}"
    cache.unlink()
    cache.mkdir()
    with pytest.raises(CalibrationError) as e:
        read_cache(cache)
    assert str(e.value) == f"{cache}: cannot read the calibration cache (Is a directory)."


def test_cli_import_then_show(tmp_path, cache):
    f = tmp_path / "elsewhere.json"
    f.write_text(json.dumps({"calibrations": [cal().to_dict()]}))
    r = CliRunner().invoke(main, ["calibrate", "--import", str(f)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["calibrate", "--show"])
    assert r.exit_code == 0 and GPU in r.output and DRIVER in r.output and CLOCKS in r.output
    assert "DRAM copy bandwidth     3000 GB/s" in r.output and "device-to-device memcpy: 2950 GB/s" in r.output
    assert "90% of the H100 SXM datasheet's 3350 GB/s" in r.output
    r = CliRunner().invoke(main, ["calibrate", "--show", "--json"])
    assert json.loads(r.output)["calibrations"][0]["figures"]["fp16_tensor_gflops"] == 600_000.0


def test_cli_without_gpu_is_one_sentence(monkeypatch, cache):
    monkeypatch.setenv("PATH", "/nonexistent")
    r = CliRunner().invoke(main, ["calibrate"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.strip() == ("Error: no GPU was found (nvidia-smi is not on PATH); `optiml calibrate` measures a "
                                "CUDA GPU, while --show lists cached figures and --import FILE loads figures "
                                "measured elsewhere.")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_microbenchmarks_build(tmp_path, arch):
    from optiml.build import NvccBuilder
    from optiml.verify import calibrate

    result = NvccBuilder(arch, cache_dir=tmp_path).build(calibrate.SOURCE.read_text(), calibrate.NVCC_FLAGS,
                                                         name="calibrate.cu")
    assert result.ok, result.log
    assert {"copy_f4", "l2_read", "fma_f32", "mma_f16", "mma_bf16", "mma_tf32", "has_mma"} <= set(result.symbols)
    assert result.resources[result.symbols["mma_f16"]].registers >= 16      # the mma loop is there, not removed


def test_hopper_builds_hold_the_wgmma_loop(tmp_path):
    """On sm_90 the microbenchmarks are built for sm_90a, where the wgmma loop (the dense fp16/bf16 peak
    mma.sync does not reach there) has its 128 accumulators; elsewhere its kernels are empty."""
    from optiml.verify import calibrate

    from optiml.build import NvccBuilder

    from optiml.cubin import _Elf

    # what `optiml calibrate` builds on an sm_90 GPU is the sm_90a build: its wgmma kernel has code
    text = {s[0]: s[3] for s in _Elf(calibrate.cubin_for("sm_90", tmp_path / "h").read_bytes()).sections}
    assert text[".text.wgmma_f16"] > 1000 and text[".text.wgmma_bf16"] > 1000, text
    for arch, least in (("sm_90a", 128), ("sm_80", 0)):
        r = NvccBuilder(arch, cache_dir=tmp_path / arch).build(calibrate.SOURCE.read_text(), calibrate.NVCC_FLAGS,
                                                               name="calibrate.cu")
        assert r.ok, r.log
        regs = r.resources[r.symbols["wgmma_f16"]].registers
        assert (regs >= least) if least else regs < 32, (arch, regs)


# ------------------------------------------------------------------ the figures in every result

FINAL = {"status": "ok", "speedup": 2.0, "seed_ms": 4.0, "best_ms": 2.0, "best_edits": ["BLOCK 16 -> 32"],
         "speed_of_light": speed_of_light(2.0, None, 4.8e9, cal().peaks()).to_dict(),
         "baseline": {"label": "torch.matmul", "status": "ok", "median_ms": 2.5}}


def test_optimize_line_gives_fraction_bound_peaks_and_baseline(tmp_path):
    from optiml.app.optimize import OptimizeResult

    r = OptimizeResult(run_id=7, evaluations=3, best_source="", best_path=("BLOCK 16 -> 32",), final=FINAL,
                       output=tmp_path / "k.optiml.cu")
    assert ("best 2.00x (4.0000 -> 2.0000 ms, re-verified and timed interleaved with the seed); "
            "80.0% of speed of light (memory-bound: DRAM copy bandwidth 3000 GB/s, measured peaks); "
            "1.25x over the baseline torch.matmul (2.5000 ms); path: BLOCK 16 -> 32") in r.line()
    plain = OptimizeResult(7, 3, "", (), {k: v for k, v in FINAL.items() if k not in ("speed_of_light", "baseline")},
                           tmp_path / "k.optiml.cu")
    assert "speed of light" not in plain.line() and "baseline" not in plain.line()
    # the library faster than the best kernel: said plainly
    slower = dict(FINAL, baseline=dict(FINAL["baseline"], median_ms=0.5))
    assert "4.00x slower than the baseline torch.matmul (0.5000 ms; 25% of its speed)" in OptimizeResult(
        7, 3, "", (), slower, tmp_path / "k.optiml.cu").line()


def test_speed_of_light_figure_from_spec_counts(tmp_path):
    from optiml.app.optimize import speed_of_light_figure
    from tests.test_spec import KERNEL, load

    spec = load(tmp_path)                                   # counts.bytes = 8 * N
    n = spec.timing_sizes["N"]
    sol = speed_of_light_figure(spec, KERNEL, {"status": "ok", "best_ms": 1.0}, GPU, peaks=cal().peaks())
    assert sol["bound"] == "memory" and sol["source"] == "measured"
    assert sol["fraction"] == pytest.approx(8 * n / 3000e9 / 1e-3, rel=1e-3)
    assert speed_of_light_figure(spec, KERNEL, {"status": "timeout"}, GPU, peaks=cal().peaks()) is None


def test_show_runs_and_export_say_it(tmp_path):
    from optiml.traces.export import to_dataframe
    from optiml.traces.store import TraceStore

    db = tmp_path / "t.db"
    with TraceStore(db) as store:
        run = store.start_run("scale")
        store.set_run_result(run, FINAL)
    r = CliRunner().invoke(main, ["runs", "--db", str(db)])
    assert r.exit_code == 0, r.output
    head, row = r.output.splitlines()[:2]
    assert "speed of light" in head and "vs baseline" in head
    assert "80% memory (measured)" in row and "1.25x" in row
    r = CliRunner().invoke(main, ["runs", "--db", str(db), "--json"])
    got = json.loads(r.output.splitlines()[0])
    assert got["speed_of_light"]["fraction"] == 0.8 and got["baseline_ratio"] == 1.25
    with TraceStore(db, read_only=True) as store:
        df = to_dataframe(store, run)
    assert {"sol_fraction", "sol_bound", "sol_peaks", "baseline_ratio"} <= set(df.columns)


def test_judge_bound_without_peaks_given_is_the_named_gpus_datasheet(tmp_path, monkeypatch):
    """No calibration cached: the bound for an H100 by its name is the datasheet's 3350 GB/s; a GPU
    whose name says nothing has none."""
    monkeypatch.setenv("OPTIML_CACHE_DIR", str(tmp_path))
    assert speed_of_light_ms((None, 3.35e9), "NVIDIA H100 80GB HBM3") == pytest.approx(1.0)
    assert speed_of_light_ms((None, 3.35e9), "") is None and speed_of_light_ms((None, 3.35e9), None) is None
