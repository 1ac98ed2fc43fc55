"""The metric catalogue, the --metrics list and checking it against ncu --query-metrics."""
import csv
import gzip
import io
from pathlib import Path

import pytest

from optiml.profiler.metrics import (
    CATALOGUE,
    base_name,
    cached_query_metrics,
    catalogue_by_key,
    filter_known,
    ncu_metric_names,
    parse_query_metrics,
    query_metrics_cache_path,
)

DATA = Path(__file__).parent / "data" / "ncu"

# Catalogue names that no fixture holds (their sections or metrics were not collected).
NOT_IN_FIXTURES = {
    "Registers Per Thread", "Static Shared Memory Per Block", "Dynamic Shared Memory Per Block",
    "L2 Hit Rate", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
}


@pytest.fixture(scope="module")
def query_text() -> str:
    return gzip.decompress((DATA / "gh100_query_metrics.txt.gz").read_bytes()).decode("utf-8")


def fixture_names() -> set[str]:
    """Every raw-page column header and details-page metric name in the fixtures."""
    names: set[str] = set()
    for path in DATA.glob("*.csv"):
        rows = list(csv.reader(io.StringIO(path.read_text())))
        start = next(i for i, row in enumerate(rows) if "Kernel Name" in row and "ID" in row)
        header = rows[start]
        names.update(header)
        if "Metric Name" in header:
            at = header.index("Metric Name")
            names.update(row[at] for row in rows[start + 1:] if len(row) > at)
    return names


def test_catalogue_keys_are_unique_and_complete():
    keys = [m.key for m in CATALOGUE]
    assert len(keys) == len(set(keys))
    for key in ["duration_ns", "achieved_occupancy_pct", "theoretical_occupancy_pct",
                "occ_limit_registers", "occ_limit_shared_mem", "occ_limit_warps",
                "occ_limit_blocks", "smem_ld_bank_conflicts", "smem_st_bank_conflicts",
                "smem_ld_wavefronts", "smem_st_wavefronts", "tensor_pipe_active_pct",
                "hmma_pipe_active_pct", "dram_throughput_pct", "l2_throughput_pct",
                "l1_throughput_pct", "sm_throughput_pct", "registers_per_thread",
                "static_smem_per_block", "dynamic_smem_per_block", "local_load_bytes",
                "local_store_bytes", "l2_hit_rate_pct", "stall_long_scoreboard"]:
        assert key in catalogue_by_key()
    for m in CATALOGUE:
        assert m.ncu_names and m.description


def test_catalogue_names_come_from_real_output():
    seen = fixture_names()
    for m in CATALOGUE:
        for name in m.ncu_names + m.details_names:
            assert name in seen or name in NOT_IN_FIXTURES, f"{m.key}: {name} is in no fixture"
    # and the exemption list stays honest
    assert not NOT_IN_FIXTURES & seen


def test_requested_names_are_all_known_to_gh100(query_text):
    names = ncu_metric_names()
    assert "gpu__time_duration.sum" in names
    assert "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum" in names
    assert not any(n.startswith("launch__") for n in names)  # reported with every launch
    assert len(names) == len(set(names))
    kept, dropped = filter_known(names, query_text)
    assert dropped == []
    assert kept == names


def test_metric_names_for_chosen_keys():
    assert ncu_metric_names(["duration_ns", "occ_limit_registers"]) == ["gpu__time_duration.sum"]
    with pytest.raises(KeyError):
        ncu_metric_names(["no_such_key"])


def test_filter_drops_the_fake_metric(query_text):
    names = [
        "gpu__time_duration.sum",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "local_load_throughput",
        "launch__registers_per_thread",
        "sm__maximum_warps_per_active_cycle_pct",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
    ]
    kept, dropped = filter_known(names, query_text)
    assert dropped == ["local_load_throughput"]
    assert kept == [n for n in names if n != "local_load_throughput"]


def test_query_metrics_parsing(query_text):
    known = parse_query_metrics(query_text)
    assert len(known) > 3000
    assert "sm__pipe_tensor_op_hmma_cycles_active" in known
    assert "SM_C.TriageCompute.smsp__warps_issue_stalled_long_scoreboard" in known
    assert "Metric" not in known and "activity" not in known  # headers, wrapped descriptions
    assert "local_load_throughput" not in known


@pytest.mark.parametrize("name,base", [
    ("foo__bar.sum.pct_of_peak_sustained_elapsed", "foo__bar"),
    ("lts__t_sector_hit_rate.pct", "lts__t_sector_hit_rate"),
    ("launch__registers_per_thread", "launch__registers_per_thread"),
    ("SM_C.TriageCompute.smsp__x.avg", "SM_C.TriageCompute.smsp__x"),
])
def test_base_name(name, base):
    assert base_name(name) == base


def test_query_metrics_cache_calls_ncu_once_per_version_and_chip(tmp_path):
    calls = []

    def produce(text):
        def run():
            calls.append(text)
            return text
        return run

    assert cached_query_metrics(tmp_path, "2025.3.1", "gh100", produce("A")) == "A"
    assert cached_query_metrics(tmp_path, "2025.3.1", "gh100", produce("B")) == "A"
    assert cached_query_metrics(tmp_path, "2025.3.1", "gb100", produce("C")) == "C"
    assert cached_query_metrics(tmp_path, "2025.4.0", "gh100", produce("D")) == "D"
    assert calls == ["A", "C", "D"]
    path = query_metrics_cache_path(tmp_path, "2025.3.1", "gh100")
    assert path.exists() and gzip.decompress(path.read_bytes()) == b"A"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_query_metrics_cache_recovers_from_a_corrupt_file(tmp_path):
    path = query_metrics_cache_path(tmp_path, "1.0", "gh100")
    path.write_bytes(b"not gzip")
    assert cached_query_metrics(tmp_path, "1.0", "gh100", lambda: "fresh") == "fresh"
    assert cached_query_metrics(tmp_path, "1.0", "gh100", lambda: "other") == "fresh"


def test_empty_query_output_is_not_cached(tmp_path):
    assert cached_query_metrics(tmp_path, "1.0", "gh100", lambda: "") == ""
    assert cached_query_metrics(tmp_path, "1.0", "gh100", lambda: "later") == "later"
