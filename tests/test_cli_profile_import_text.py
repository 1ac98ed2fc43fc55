"""`optiml profile --import` without --json, on a recorded H100 ncu export: each launch's metrics,
then "diagnosis:" and one "  - " line per finding, the same findings --json gives; a launch with
no finding prints no "diagnosis:" heading."""
import json

from click.testing import CliRunner

from optiml.cli import main
from optiml.cli.kernel import format_metrics
from tests.conftest import DATA

EXPORT = DATA / "ncu" / "h100_sgemm_tiled_conflicts_metrics_raw.csv"


def test_profile_import_prints_the_diagnosis_under_its_heading():
    (launch,) = json.loads(CliRunner().invoke(main, ["profile", "--import", str(EXPORT), "--json"]).output)
    assert launch["diagnosis"], "the fixture has findings (bank conflicts)"
    r = CliRunner().invoke(main, ["profile", "--import", str(EXPORT)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith(f"launch {launch['id']}: ")
    at = lines.index("diagnosis:")
    assert lines[at + 1:] == [f"  - {s}" for s in launch["diagnosis"]]
    assert any("bank conflicts" in ln for ln in lines[at + 1:])


def test_metrics_without_findings_have_no_diagnosis_heading():
    """What the text output prints for a launch whose diagnosis is empty: the metric lines alone."""
    text = format_metrics({"sm_throughput_pct": 12.5, "dram_bytes": None}, [])
    assert "diagnosis" not in text
    assert text.splitlines() == ["  sm_throughput_pct                  12.5 %"]


def test_a_binary_report_without_ncu_is_one_sentence_saying_how_to_export_it(tmp_path, monkeypatch):
    """A .ncu-rep needs ncu to read it; where none is on PATH, one sentence with the export command."""
    from tests.conftest import assert_one_sentence_error

    import optiml.profiler.ncu as ncu_module

    monkeypatch.setattr(ncu_module, "find_ncu", lambda: None)     # a machine with no ncu
    rep = tmp_path / "run.ncu-rep"
    rep.write_bytes(b"\0binary")
    r = CliRunner().invoke(main, ["profile", "--import", str(rep)])
    assert_one_sentence_error(r, "needs ncu on PATH", "ncu -i run.ncu-rep --csv --page raw")
