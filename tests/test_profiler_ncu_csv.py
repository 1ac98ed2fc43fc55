"""Parsing real Nsight Compute CSV output (tests/data/ncu) and recognising ncu failures."""
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from optiml.profiler.ncu_csv import (
    classify_ncu_failure,
    detect_ncu_error,
    parse_details_csv,
    parse_number,
    parse_raw_csv,
)
from optiml.profiler.types import ProfileStatus

DATA = Path(__file__).parent / "data" / "ncu"
RAW_FIXTURES = {
    "h100_sgemm_naive_sections_raw.csv": 2,
    "h100_sgemm_tiled_conflicts_metrics_raw.csv": 1,
    "h100_sgemm_naive_full_raw.csv": 1,
    "h100_hgemm_naive_vs_wmma_nvtx_raw.csv": 2,
}


def read(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize("name,launches", sorted(RAW_FIXTURES.items()))
def test_every_raw_fixture_parses(name, launches):
    report = parse_raw_csv(read(name))
    assert len(report.launches) == launches
    assert report.raw_text == read(name)
    assert report.page == "raw"
    for launch in report.launches:
        assert launch.kernel_name.startswith(("matmul", "hgemm"))
        assert isinstance(launch.values["gpu__time_duration.sum"], float)
        assert launch.units["gpu__time_duration.sum"] == "ns"
    assert [launch.id for launch in report.launches] == list(range(launches))


def test_header_found_after_application_stdout_and_prof_lines():
    text = read("h100_sgemm_naive_sections_raw.csv")
    assert text.startswith("==PROF== Connected")  # the fixture really has a preamble
    launch = parse_raw_csv(text).launches[0]
    assert launch.kernel_name == "matmul"
    assert launch.block_size == (16, 16, 1)
    assert launch.grid_size == (128, 128, 1)
    assert launch.values["gpu__time_duration.sum"] == 3_902_720.0


def test_thousands_separators_and_units():
    launch = parse_raw_csv(read("h100_sgemm_tiled_conflicts_metrics_raw.csv")).launches[0]
    assert launch.values["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 1_879_048_192
    assert launch.values["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.avg"] == pytest.approx(14_235_213.58)
    assert launch.units["launch__registers_per_thread"] == "register/thread"
    assert launch.units["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == ""
    assert launch.values["launch__cluster_scheduling_policy"] == "PolicySpread"
    assert launch.values["Block Size"] == "(32, 32, 1)"


def test_no_data_and_empty_cells_become_none():
    launch = parse_raw_csv(read("h100_sgemm_naive_sections_raw.csv")).launches[0]
    assert launch.values["derived__local_spilling_requests_pct"] is None  # "no data"
    assert launch.values["launch__kernel_name"] is None  # ""


def test_trailing_lines_after_the_table_are_ignored():
    text = read("h100_sgemm_tiled_conflicts_metrics_raw.csv")
    noisy = text + "==PROF== Disconnected from process 1\nsome, application, output\n"
    assert len(parse_raw_csv(noisy).launches) == 1


def test_columns_are_found_by_name_not_position():
    text = (
        '"ID","Extra","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum"\n'
        '"","","","","","ns"\n'
        '"0","x","k1","(1, 1, 1)","(2, 1, 1)","1,000"\n'
        '"1","y","k2","(4, 1, 1)","(8, 1, 1)","n/a"\n'
    )
    report = parse_raw_csv(text)
    assert [launch.kernel_name for launch in report.launches] == ["k1", "k2"]
    assert report.launches[0].values["gpu__time_duration.sum"] == 1000.0
    assert report.launches[1].values["gpu__time_duration.sum"] is None
    assert report.launches[1].block_size == (4, 1, 1)


def test_nvtx_fixture_two_launches_same_name_distinct_ranges():
    report = parse_raw_csv(read("h100_hgemm_naive_vs_wmma_nvtx_raw.csv"))
    naive, wmma = report.launches
    assert naive.kernel_name == wmma.kernel_name == "hgemm_naive"
    assert naive.nvtx_names == ["optiml.profile.hn"]
    assert wmma.nvtx_names == ["optiml.profile.hw"]
    assert naive.nvtx_ranges[0].domain == "optiml"
    assert naive.nvtx_ranges[0].kind == "push_pop"
    assert report.by_nvtx("optiml.profile.hw") == [wmma]
    assert len(naive.nvtx) == 2  # push/pop and start/stop columns, kept raw
    # the NVTX columns sit before "Kernel Name" and must not shift the metrics
    pct = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
    assert naive.values[pct] == pytest.approx(0.0)
    assert wmma.values[pct] == pytest.approx(4.39)
    assert wmma.block_size == (128, 1, 1)


def test_details_page():
    report = parse_details_csv(read("h100_sgemm_details_page.csv"))
    assert report.page == "details"
    assert len(report.launches) == 2
    first = report.launches[0]
    assert first.kernel_name == "matmul"
    assert first.values["Duration"] == 3_912_768.0
    assert first.units["Duration"] == "ns"
    assert first.values["Achieved Occupancy"] == pytest.approx(98.22)
    assert first.values["Block Limit Registers"] == 8.0
    assert first.values["DRAM Frequency"] == pytest.approx(2_618_970_508.86)
    assert first.values["Occupancy/Theoretical Occupancy"] == 100.0
    assert any("80.0%" in rule for rule in first.rules)
    assert report.launches[1].values["Duration"] == 3_900_608.0


def test_details_page_metric_name_shared_by_two_sections():
    text = (
        '"ID","Kernel Name","Block Size","Grid Size","Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","k","(1, 1, 1)","(1, 1, 1)","A","Throughput","%","10"\n'
        '"0","k","(1, 1, 1)","(1, 1, 1)","B","Throughput","%","20"\n'
    )
    launch = parse_details_csv(text).launches[0]
    assert launch.values["Throughput"] == 10.0  # the first section wins
    assert launch.values["A/Throughput"] == 10.0
    assert launch.values["B/Throughput"] == 20.0


def test_text_without_a_table_is_refused():
    with pytest.raises(ValueError, match="header"):
        parse_raw_csv(read("h100_unknown_metric_error.txt"))


def test_unknown_metric_error_is_detected():
    text = read("h100_unknown_metric_error.txt")
    status, message = classify_ncu_failure(text)
    assert status is ProfileStatus.UNKNOWN_METRIC
    assert "local_load_throughput" in message
    assert "regex" not in message and "\\" not in message
    assert detect_ncu_error(text) == message


def test_permission_error_is_detected():
    text = ("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
            "permission to access NVIDIA GPU Performance Counters on the target device 0.\n")
    status, message = classify_ncu_failure(text)
    assert status is ProfileStatus.PERMISSION_DENIED
    assert "ERR_NVGPUCTRPERM" in message and message.endswith(".")


def test_other_error_lines_are_detected():
    status, message = classify_ncu_failure("==ERROR== Failed to prepare kernel for profiling\n")
    assert status is ProfileStatus.ERROR
    assert "Failed to prepare kernel for profiling" in message
    assert classify_ncu_failure("==ERROR== kernel replay failed\n")[0] is ProfileStatus.REPLAY_FAILED
    assert classify_ncu_failure("==WARNING== No kernels were profiled.\n")[0] is ProfileStatus.ERROR


def test_an_error_is_said_once_with_the_count_of_the_others():
    one = classify_ncu_failure("==PROF== Connected\n==ERROR== Failed to prepare kernel for profiling.\n")
    assert one == (ProfileStatus.ERROR, "ncu reported an error: Failed to prepare kernel for profiling.")
    three = classify_ncu_failure("==ERROR== first problem\n==ERROR== second\nok\n==ERROR== third\n")
    assert three == (ProfileStatus.ERROR, "ncu reported an error: first problem (and 2 more error line(s)).")


def test_the_launch_names_and_shapes_stay_text_and_the_id_a_number():
    """Kernel Name, Block Size and Grid Size are kept as ncu wrote them among the values (a name that
    looks like a number stays a name); a table without them parses, and has none of them."""
    text = (
        '"ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum"\n'
        '"0","1000","(32, 1, 1)","(4, 1, 1)","2,000"\n'
    )
    [launch] = parse_raw_csv(text).launches
    assert launch.values["Kernel Name"] == "1000" and launch.values["Block Size"] == "(32, 1, 1)"
    assert launch.values["Grid Size"] == "(4, 1, 1)" and launch.values["gpu__time_duration.sum"] == 2000.0
    [bare] = parse_raw_csv('"ID","Kernel Name","gpu__time_duration.sum"\n"0","k","5"\n').launches
    assert bare.values == {"ID": 0.0, "Kernel Name": "k", "gpu__time_duration.sum": 5.0}


@pytest.mark.parametrize("name", sorted(RAW_FIXTURES) + ["h100_sgemm_details_page.csv"])
def test_good_output_is_not_an_error(name):
    assert detect_ncu_error(read(name)) is None


@given(st.integers(min_value=0, max_value=10**15))
def test_thousands_separated_integers_round_trip(n):
    assert parse_number(f"{n:,}") == float(n)


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=99))
def test_thousands_separated_decimals_round_trip(whole, cents):
    assert parse_number(f"{whole:,}.{cents:02d}") == pytest.approx(whole + cents / 100)


@pytest.mark.parametrize("text", ["", "n/a", "no data", "  "])
def test_missing_values(text):
    assert parse_number(text) is None


@pytest.mark.parametrize("text", ["(16, 16, 1)", "PolicySpread", "12,34", "0xff"])
def test_non_numbers_stay_text(text):
    assert parse_number(text) == text
