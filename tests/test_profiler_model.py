"""extract_metrics: from parsed real ncu launches to the catalogue's plain keys."""
from pathlib import Path

import pytest

from optiml.profiler.metrics import CATALOGUE, DERIVED_KEYS
from optiml.profiler.model import extract_metrics, occupancy_limiters, top_stall_reasons
from optiml.profiler.ncu_csv import NcuLaunch, parse_details_csv, parse_raw_csv

DATA = Path(__file__).parent / "data" / "ncu"
N = 2048  # the sgemm fixtures multiply 2048x2048 matrices


def launches(name: str) -> list[NcuLaunch]:
    text = (DATA / name).read_text()
    report = parse_details_csv(text) if "details" in name else parse_raw_csv(text)
    return report.launches


def metrics_of(name: str, index: int = 0) -> dict:
    return extract_metrics(launches(name)[index])


def test_every_key_is_present():
    metrics = metrics_of("h100_sgemm_tiled_conflicts_metrics_raw.csv")
    assert set(metrics) == {m.key for m in CATALOGUE} | set(DERIVED_KEYS)


def test_tiled_sgemm():
    m = metrics_of("h100_sgemm_tiled_conflicts_metrics_raw.csv")
    assert m["smem_ld_bank_conflicts"] == 1_879_048_192
    assert m["smem_ld_wavefronts"] == 2_281_701_376
    assert m["smem_st_bank_conflicts"] == 265_842_538
    assert m["smem_ld_conflict_ratio"] == pytest.approx(1_879_048_192 / 2_281_701_376)
    assert m["achieved_occupancy_pct"] == pytest.approx(50, abs=0.5)
    assert m["theoretical_occupancy_pct"] == 50
    # what the file holds: registers 1, shared memory 1, warps 2, blocks 32, barriers 32
    assert (m["occ_limit_registers"], m["occ_limit_shared_mem"], m["occ_limit_warps"],
            m["occ_limit_blocks"], m["occ_limit_barriers"]) == (1, 1, 2, 32, 32)
    assert m["occupancy_limiters"] == "registers,shared_mem"
    assert m["registers_per_thread"] == 40
    assert m["static_smem_per_block"] == 8192
    assert m["dynamic_smem_per_block"] == 0
    assert m["duration_ns"] == 10_596_224
    assert m["local_load_bytes"] == 0
    assert m["local_store_bytes"] is None  # not collected in this file
    assert m["l1_throughput_pct"] is None
    assert m["fp32_flops"] == 2 * N**3  # FFMA counts 2
    assert m["l2_hit_rate_pct"] == pytest.approx(98.01)
    assert m["top_stall_reasons"] is None  # no stall metrics collected


def test_naive_sections_two_launches_no_conflict_metrics():
    for index in (0, 1):
        m = metrics_of("h100_sgemm_naive_sections_raw.csv", index)
        assert m["smem_ld_bank_conflicts"] is None  # these sections do not collect them
        assert m["smem_ld_conflict_ratio"] is None
        assert m["achieved_occupancy_pct"] == pytest.approx(98.2, abs=0.1)
        assert m["theoretical_occupancy_pct"] == 100
        assert m["occupancy_limiters"] == "registers,warps"  # both allow 8 blocks
        assert m["l1_throughput_pct"] == pytest.approx(99.3, abs=0.05)
        assert m["top_stall_reasons"] == "long_scoreboard,lg_throttle,not_selected"
    durations = {metrics_of("h100_sgemm_naive_sections_raw.csv", i)["duration_ns"] for i in (0, 1)}
    assert durations == {3_902_720, 3_901_056}


def test_naive_full_set_zero_conflicts_and_flops_from_rates():
    m = metrics_of("h100_sgemm_naive_full_raw.csv")
    assert m["smem_ld_bank_conflicts"] == 0
    assert m["smem_st_bank_conflicts"] == 0
    assert m["smem_ld_conflict_ratio"] == 0
    assert m["local_load_bytes"] is None and m["local_store_bytes"] is None
    assert m["stall_long_scoreboard"] == pytest.approx(18.51)
    # the full set has only per-cycle FFMA rates; rate x elapsed cycles gives the count
    assert m["fp32_flops"] == pytest.approx(2 * N**3, rel=1e-3)


def test_hgemm_tensor_pipe():
    naive, wmma = (metrics_of("h100_hgemm_naive_vs_wmma_nvtx_raw.csv", i) for i in (0, 1))
    assert naive["tensor_pipe_active_pct"] == pytest.approx(0.0)
    assert wmma["tensor_pipe_active_pct"] == pytest.approx(4.39)
    assert wmma["hmma_pipe_active_pct"] == pytest.approx(4.39)
    assert wmma["hmma_inst"] > 50 * naive["hmma_inst"]
    assert naive["smem_ld_bank_conflicts"] == 0
    assert naive["fp32_flops"] == 2 * 4096**3  # the naive kernel accumulates in fp32 FFMA
    assert wmma["fp32_flops"] == 0
    assert wmma["occupancy_limiters"] == "registers"
    assert naive["duration_ns"] > 6 * wmma["duration_ns"]


def test_details_page_maps_into_the_catalogue():
    m = metrics_of("h100_sgemm_details_page.csv")
    assert m["duration_ns"] == 3_912_768
    assert m["achieved_occupancy_pct"] == pytest.approx(98.22)
    assert m["theoretical_occupancy_pct"] == 100
    assert m["occ_limit_registers"] == 8 and m["occ_limit_blocks"] == 32
    assert m["dram_throughput_pct"] == pytest.approx(0.37)
    assert m["l1_throughput_pct"] == pytest.approx(99.33)
    assert m["l2_throughput_pct"] == pytest.approx(18.51)
    assert m["sm_throughput_pct"] == pytest.approx(65.51)
    assert m["memory_throughput_pct"] == pytest.approx(98.30)
    assert m["smem_ld_bank_conflicts"] is None


def _launch(values: dict, units: dict | None = None) -> NcuLaunch:
    return NcuLaunch(id=0, kernel_name="k", block_size=None, grid_size=None,
                     values=values, units=units or {})


def test_units_are_converted_to_ns_and_bytes():
    m = extract_metrics(_launch(
        {"Duration": 3.91, "Static Shared Memory Per Block": 8.19},
        {"Duration": "msecond", "Static Shared Memory Per Block": "Kbyte/block"},
    ))
    assert m["duration_ns"] == pytest.approx(3_910_000)
    assert m["static_smem_per_block"] == pytest.approx(8190)


def test_spill_bytes_and_fallback_names():
    m = extract_metrics(_launch({
        "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum": 4096.0,
        "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum": 2048.0,
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 71.0,
    }))
    assert (m["local_load_bytes"], m["local_store_bytes"]) == (4096, 2048)
    assert m["dram_throughput_pct"] == 71


def test_stalls_fall_back_to_pc_samples():
    m = extract_metrics(_launch({
        "smsp__pcsamp_warps_issue_stalled_barrier": 10.0,
        "smsp__pcsamp_warps_issue_stalled_no_instructions": 50.0,
        "smsp__pcsamp_warps_issue_stalled_wait": 30.0,
        "smsp__pcsamp_warps_issue_stalled_misc": 5.0,
    }))
    assert m["top_stall_reasons"] == "no_instruction,wait,barrier"


def test_limiters_and_top_stalls_helpers():
    assert occupancy_limiters({"occ_limit_registers": 4.0, "occ_limit_warps": 2.0}) == ["warps"]
    assert occupancy_limiters({}) == []
    assert top_stall_reasons({"a": 1.0, "b": 3.0, "c": 0.0, "d": 2.0}, n=2) == [("b", 3.0), ("d", 2.0)]
