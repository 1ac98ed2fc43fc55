"""diagnose: the sentences a person or an LLM reads about a profiled kernel."""
from pathlib import Path

import pytest

from optiml.profiler.diagnosis import H100_SXM, H200, DevicePeaks, diagnose, peaks_for_device, sci
from optiml.profiler.model import extract_metrics
from optiml.profiler.ncu_csv import parse_details_csv, parse_raw_csv

DATA = Path(__file__).parent / "data" / "ncu"


def metrics_of(name: str, index: int = 0) -> dict:
    text = (DATA / name).read_text()
    report = parse_details_csv(text) if "details" in name else parse_raw_csv(text)
    return extract_metrics(report.launches[index])


def joined(sentences: list[str]) -> str:
    return "\n".join(sentences)


@pytest.fixture(scope="module")
def tiled():
    return metrics_of("h100_sgemm_tiled_conflicts_metrics_raw.csv")


def test_tiled_conflicts_are_severe_with_the_count(tiled):
    text = joined(diagnose(tiled))
    assert "Severe shared-memory bank conflicts on loads" in text
    assert "1.9e9" in text
    assert "bank conflicts on stores" in text


def test_tiled_occupancy_limited_by_registers_and_shared_memory(tiled):
    text = joined(diagnose(tiled))
    assert "Achieved occupancy is 50% of peak" in text
    assert "limited by registers and shared memory" in text


def test_tiled_is_memory_bound_on_chip(tiled):
    text = joined(diagnose(tiled))
    assert text.startswith("Memory-bound")
    assert "on-chip" in text


@pytest.mark.parametrize("name,index", [
    ("h100_sgemm_naive_sections_raw.csv", 0),
    ("h100_sgemm_naive_sections_raw.csv", 1),
    ("h100_sgemm_naive_full_raw.csv", 0),
    ("h100_sgemm_details_page.csv", 0),
])
def test_naive_has_no_conflict_or_occupancy_sentence(name, index):
    text = joined(diagnose(metrics_of(name, index)))
    assert "bank conflict" not in text
    assert "occupancy" not in text  # 98% achieved of 100% theoretical
    assert "Memory-bound: L1/shared memory throughput is at 99%" in text


def test_naive_full_set_names_its_stall_reasons():
    text = joined(diagnose(metrics_of("h100_sgemm_naive_full_raw.csv")))
    assert "long_scoreboard (18.5" in text
    assert text.index("long_scoreboard") < text.index("lg_throttle") < text.index("not_selected")


def test_tensor_cores_unused_only_for_the_naive_hgemm():
    naive, wmma = (metrics_of("h100_hgemm_naive_vs_wmma_nvtx_raw.csv", i) for i in (0, 1))
    assert "Tensor cores are unused" in joined(diagnose(naive, is_half_matmul=True))
    wmma_text = joined(diagnose(wmma, is_half_matmul=True))
    assert "unused" not in wmma_text
    assert "4.4%" in wmma_text
    assert "Tensor cores" not in joined(diagnose(naive))  # not a half-precision matmul


@pytest.mark.parametrize("pct,said", [
    (0.4, "Tensor cores are unused"),
    (0.5, "Tensor cores are used but lightly (tensor pipe active 0.5% of peak)"),
    (19.9, "Tensor cores are used but lightly (tensor pipe active 19.9% of peak)"),
    (20.0, None),
    (75.0, None),
])
def test_tensor_pipe_bands(pct, said):
    text = joined(diagnose({"tensor_pipe_active_pct": pct}, is_half_matmul=True))
    if said is None:
        assert "Tensor cores" not in text
    else:
        assert said in text


def test_conflicts_counted_as_every_wavefront_give_no_average_way():
    """ncu can count as many conflicts as wavefronts (every wavefront a replay): the sentence says
    so without an n-way average, which would divide by zero."""
    text = joined(diagnose({"smem_ld_bank_conflicts": 4000.0, "smem_ld_wavefronts": 4000.0}))
    assert "Severe shared-memory bank conflicts on loads: 4000 conflicts over 4000 wavefronts (100% of the " \
           "wavefronts are conflict replays); pad or swizzle" in text
    half = joined(diagnose({"smem_ld_bank_conflicts": 2000.0, "smem_ld_wavefronts": 4000.0}))
    assert "(50% of the wavefronts are conflict replays, about 2.0-way on average)" in half


def test_latency_bound_when_nothing_is_busy():
    text = joined(diagnose({"sm_throughput_pct": 17.0, "dram_throughput_pct": 3.5}))
    assert text.startswith("Latency-bound")


def test_compute_bound():
    text = joined(diagnose({"sm_throughput_pct": 85.0, "dram_throughput_pct": 20.0}))
    assert text.startswith("Compute-bound")


def test_dram_bound_has_no_on_chip_remark():
    text = joined(diagnose({"sm_throughput_pct": 20.0, "dram_throughput_pct": 90.0}))
    assert text.startswith("Memory-bound: DRAM throughput is at 90%")
    assert "on-chip" not in text


@pytest.mark.parametrize("conflicts,word", [(0.0, None), (10.0, None), (50.0, "Minor"),
                                            (200.0, "Moderate"), (600.0, "Severe")])
def test_conflict_severity_by_share_of_wavefronts(conflicts, word):
    text = joined(diagnose({"smem_st_bank_conflicts": conflicts, "smem_st_wavefronts": 1000.0}))
    if word is None:
        assert "bank conflict" not in text
    else:
        assert text.startswith(f"{word} shared-memory bank conflicts on stores")


def test_spills_are_reported():
    text = joined(diagnose({"local_load_bytes": 3.0e6, "local_store_bytes": 1.5e6}))
    assert "Local-memory traffic (3.0e6 bytes loaded, 1.5e6 stored)" in text
    assert diagnose({"local_load_bytes": 0.0, "local_store_bytes": 0.0}) == []


def test_nothing_known_means_nothing_said():
    assert diagnose({}) == []
    assert diagnose({"duration_ns": None}, flops=1e9, peaks=H100_SXM) == []


def test_speed_of_light_against_datasheet_peaks(tiled):
    flops = 2 * 2048**3
    text = joined(diagnose(tiled, flops=flops, bytes_moved=3 * 4 * 2048**2, peaks=H100_SXM))
    achieved = flops / tiled["duration_ns"] / 1000  # TFLOP/s
    assert f"{achieved:.3g} TFLOP/s" in text
    assert f"{achieved / 67:.1%} of the H100 SXM fp32 (non-tensor) peak" in text
    assert "datasheet" in text
    assert "of the H100 SXM DRAM peak of 3350 GB/s" in text


def test_speed_of_light_for_half_matmul_uses_the_tensor_peak():
    wmma = metrics_of("h100_hgemm_naive_vs_wmma_nvtx_raw.csv", 1)
    text = joined(diagnose(wmma, flops=2 * 4096**3, peaks=H200, is_half_matmul=True))
    assert "H200 dense fp16 tensor-core peak" in text
    no_tensor_peak = DevicePeaks("X", 1000.0, 50_000.0, "test")
    assert "X fp32" in joined(diagnose(wmma, flops=1e9, peaks=no_tensor_peak, is_half_matmul=True))


def test_device_peaks():
    assert peaks_for_device("NVIDIA H100 80GB HBM3") is H100_SXM
    assert peaks_for_device("NVIDIA H200") is H200
    assert peaks_for_device("NVIDIA H100 PCIe") is None
    assert (H100_SXM.dram_gbps, H100_SXM.fp32_gflops, H100_SXM.source) == (3350, 67_000, "datasheet")
    assert (H200.dram_gbps, H200.fp32_gflops) == (4800, 67_000)


@pytest.mark.parametrize("value,text", [(1_879_048_192, "1.9e9"), (265_842_538, "2.7e8"),
                                        (512, "512"), (0, "0")])
def test_sci(value, text):
    assert sci(value) == text
