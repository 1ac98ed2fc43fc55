"""The diagnosis sentences at their thresholds: the severity word of bank conflicts at exactly half
the wavefronts, counts written out below 10,000 and in short form from 10,000, which memory unit a
memory-bound sentence names, and the three (not more) stall reasons it lists."""
from pathlib import Path

from optiml.profiler.diagnosis import diagnose, sci
from optiml.profiler.model import extract_metrics
from optiml.profiler.ncu_csv import parse_raw_csv

DATA = Path(__file__).parent / "data" / "ncu"


def test_conflicts_on_half_the_wavefronts_are_severe():
    """A conflict replay on 50% of the wavefronts (2-way on average) is Severe; just under is Moderate."""
    text, = diagnose({"smem_ld_bank_conflicts": 500.0, "smem_ld_wavefronts": 1000.0})
    assert text == ("Severe shared-memory bank conflicts on loads: 500 conflicts over 1000 wavefronts (50% of "
                    "the wavefronts are conflict replays, about 2.0-way on average); pad or swizzle the shared "
                    "array so the threads of a warp hit distinct banks.")
    text, = diagnose({"smem_ld_bank_conflicts": 499.0, "smem_ld_wavefronts": 1000.0})
    assert text.startswith("Moderate shared-memory bank conflicts on loads")


def test_counts_from_ten_thousand_are_in_short_form():
    """sci() writes counts below 10,000 as integers and 10,000 itself as 1.0e4, as a spill sentence shows."""
    assert (sci(9999), sci(10_000), sci(-10_000)) == ("9999", "1.0e4", "-1.0e4")
    text, = diagnose({"local_load_bytes": 10_000.0, "local_store_bytes": 9_999.0})
    assert text.startswith("Local-memory traffic (1.0e4 bytes loaded, 9999 stored)")


def test_the_overall_memory_figure_ten_points_above_the_units_names_no_unit():
    """When ncu's overall memory throughput is more than 10 points above the busiest unit it
    names (DRAM, L2, L1), the sentence says "the busiest memory unit" instead of naming one;
    at 10 points or less it names the unit."""
    text, = diagnose({"sm_throughput_pct": 20.0, "dram_throughput_pct": 70.0, "memory_throughput_pct": 80.5})
    assert text.startswith("Memory-bound: the busiest memory unit is at 80% of peak while the SM is at 20%")
    text, = diagnose({"sm_throughput_pct": 20.0, "dram_throughput_pct": 70.0, "memory_throughput_pct": 80.0})
    assert text.startswith("Memory-bound: DRAM throughput is at 80% of peak while the SM is at 20%")


def test_the_stall_sentence_lists_the_three_largest_reasons_only():
    """The naive sgemm (real H100 export) stalls on six reasons; the sentence names the three
    largest (long_scoreboard, lg_throttle, not_selected), not the fourth (dispatch_stall, 2.84)."""
    metrics = extract_metrics(parse_raw_csv((DATA / "h100_sgemm_naive_full_raw.csv").read_text()).launches[0])
    assert metrics["stall_dispatch_stall"] == 2.84
    stalls = [s for s in diagnose(metrics) if s.startswith("Top warp stall reasons")]
    assert stalls == ["Top warp stall reasons (warps stalled per issue cycle): long_scoreboard (18.5, waiting on "
                      "global or local memory); lg_throttle (12.2, the global/local memory queue is full); "
                      "not_selected (4.7, eligible but another warp issued)."]


def test_a_metric_that_is_no_number_says_nothing():
    """ncu prints "n/a" (kept as text) where a counter is not collected, and some fields are flags:
    such a value leaves its sentence out, never fails the diagnosis or enters a figure."""
    assert diagnose({"achieved_occupancy_pct": "n/a", "theoretical_occupancy_pct": "n/a",
                     "local_load_bytes": "n/a", "local_store_bytes": True, "duration_ns": "n/a",
                     "sm_throughput_pct": "n/a", "dram_throughput_pct": True}) == []
    text, = diagnose({"local_load_bytes": 2048.0, "local_store_bytes": "n/a"})
    assert text.startswith("Local-memory traffic (2048 bytes loaded")
