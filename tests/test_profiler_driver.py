"""The ncu driver's failure modes with fake ncu executables (shell scripts standing in for ncu) over
one candidate, and --import of real H100 exports."""
import json
import stat

from click.testing import CliRunner

from optiml.cli import main
from optiml.profiler.ncu import NcuProfiler
from optiml.profiler.types import ProfileStatus
from optiml.spec import Launch
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from tests.conftest import DATA, assert_one_sentence_error
from tests.test_spec import load


def fake_ncu(tmp_path, body):
    p = tmp_path / "ncu"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def job(tmp_path):
    kb = KernelBinary("/nonexistent.cubin", "scale", (Launch((1, 1, 1), (1, 1, 1), 0),) * 3)
    return HarnessJob(spec=load(tmp_path), candidate=kb, reference=None, cases=(Case(1, 1),))


def test_missing_ncu_is_a_status(tmp_path):
    p = NcuProfiler(ncu=None)
    p.ncu = None
    r, = p.profile_batch([job(tmp_path)])
    assert r.status is ProfileStatus.NCU_MISSING and "not found" in r.message


def test_permission_error_is_a_status(tmp_path):
    ncu = fake_ncu(tmp_path, 'case "$1" in --version) echo "Version 2025.3.1.0";; --query-metrics) echo "";; '
                             '*) echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"; exit 1;; esac')
    r = NcuProfiler(ncu=ncu, cache_dir=tmp_path / "q").profile_batch([job(tmp_path)])[0]
    assert r.status is ProfileStatus.PERMISSION_DENIED and r.wall_s is not None


def test_an_ncu_that_writes_no_report_says_its_exit_code_and_last_line(tmp_path):
    ncu = fake_ncu(tmp_path, 'case "$1" in --version) echo "Version 1";; --query-metrics) echo "";; '
                             '*) echo "==PROF== Connected to process"; echo "Segmentation fault (core dumped)"; exit 3;; esac')
    r = NcuProfiler(ncu=ncu, cache_dir=tmp_path / "q").profile_batch([job(tmp_path)])[0]
    assert r.status is ProfileStatus.ERROR
    assert r.message == "ncu wrote no report (exit code 3): Segmentation fault (core dumped)"


def test_timeout_is_a_status(tmp_path):
    ncu = fake_ncu(tmp_path, 'case "$1" in --version) echo "Version 1";; --query-metrics) echo "";; *) exec sleep 600;; esac')
    r = NcuProfiler(ncu=ncu, cache_dir=tmp_path / "q", timeout_s=1).profile_batch([job(tmp_path)])[0]
    assert r.status is ProfileStatus.TIMEOUT


def test_unknown_metric_is_dropped_before_profiling(tmp_path):
    query = (DATA / "ncu" / "gh100_query_metrics.txt.gz")
    import gzip
    text = gzip.decompress(query.read_bytes()).decode()
    ncu = fake_ncu(tmp_path, 'case "$1" in --version) echo "Version 2025.3.1.0";; --query-metrics) cat "$QUERY";; *) exit 1;; esac')
    (tmp_path / "query.txt").write_text(text)
    import os
    os.environ["QUERY"] = str(tmp_path / "query.txt")
    try:
        p = NcuProfiler(ncu=ncu, cache_dir=tmp_path / "q", metrics=["sm__throughput.avg.pct_of_peak_sustained_elapsed", "local_load_throughput"])
        kept, dropped = p.metric_list("NVIDIA H100 80GB HBM3")
    finally:
        del os.environ["QUERY"]
    assert kept == ["sm__throughput.avg.pct_of_peak_sustained_elapsed"] and dropped == ["local_load_throughput"]


def test_import_reproduces_fixture_values():
    r = CliRunner().invoke(main, ["profile", "--import", str(DATA / "ncu" / "h100_sgemm_tiled_conflicts_metrics_raw.csv"), "--json"])
    assert r.exit_code == 0, r.output
    (launch,) = json.loads(r.output)
    assert launch["metrics"]["smem_ld_bank_conflicts"] == 1_879_048_192
    assert abs(launch["metrics"]["achieved_occupancy_pct"] - 50) < 1
    assert launch["metrics"]["occupancy_limiters"] == "registers,shared_mem"
    assert any("bank conflicts" in s for s in launch["diagnosis"])
    r = CliRunner().invoke(main, ["profile", "--import", str(DATA / "ncu" / "h100_sgemm_details_page.csv")])
    assert r.exit_code == 0 and "achieved_occupancy_pct" in r.output


def test_import_of_a_missing_file_is_one_sentence(tmp_path):
    assert_one_sentence_error(CliRunner().invoke(main, ["profile", "--import", str(tmp_path / "nope.csv")]), "file not found")


def test_a_file_that_is_no_ncu_export_and_no_input_at_all_are_one_sentence_each(tmp_path):
    text = tmp_path / "notes.csv"
    text.write_text("a,b\n1,2\n")
    assert_one_sentence_error(CliRunner().invoke(main, ["profile", "--import", str(text)]),
                              f"{text}: not an ncu CSV export", "'ID' and 'Kernel Name'")
    assert_one_sentence_error(CliRunner().invoke(main, ["profile"]), "give a KERNEL to profile, or --import FILE")


def test_ncu_off_the_path_is_found_where_cuda_installs_it(monkeypatch):
    import optiml.profiler.ncu as ncu_mod

    monkeypatch.setattr(ncu_mod.shutil, "which", lambda name: None)
    there = {"/opt/nvidia/nsight-compute/ncu"}
    monkeypatch.setattr(ncu_mod.os.path, "exists", lambda p: p in there)
    assert ncu_mod.find_ncu() == "/opt/nvidia/nsight-compute/ncu"
    there.add("/usr/local/cuda/bin/ncu")
    assert ncu_mod.find_ncu() == "/usr/local/cuda/bin/ncu"          # the toolkit's first
    there.clear()
    assert ncu_mod.find_ncu() is None
