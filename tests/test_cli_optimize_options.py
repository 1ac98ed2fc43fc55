"""`optiml optimize` passes its flags on to run_optimize (replaced here by a FAKE that records the
options and returns a finished run; nothing is built or run): the seed --help shows is the one
passed, operation templates are offered unless --no-templates, and --timeout takes any positive
number of seconds, fractions included, while 0 is one sentence."""
from click.testing import CliRunner

from optiml.app.optimize import OptimizeResult
from optiml.cli import main
from tests.conftest import assert_one_sentence_error


def _invoke(tmp_path, monkeypatch, *args):
    import optiml.cli.optimize as command

    seen = {}

    def fake_run_optimize(options, on_progress, on_search_end, on_candidate):
        seen["options"] = options
        return OptimizeResult(run_id=1, evaluations=1, best_source="//", best_path=(),
                              final={"status": "ok", "speedup": 1.0, "seed_ms": 1.0, "best_ms": 1.0},
                              output=tmp_path / "k.optiml.cu")

    monkeypatch.setattr(command, "run_optimize", fake_run_optimize)
    r = CliRunner().invoke(main, ["optimize", str(tmp_path / "k.cu"), "--db", str(tmp_path / "t.db"), *args])
    return r, seen.get("options")


def test_optimize_seed_default_is_the_one_help_shows(tmp_path, monkeypatch):
    r = CliRunner().invoke(main, ["optimize", "--help"])
    assert "(reproducible with the rules proposer). [default: 0]" in " ".join(r.output.split())
    r, o = _invoke(tmp_path, monkeypatch)
    assert r.exit_code == 0, r.output
    assert o.seed == 0
    r, o = _invoke(tmp_path, monkeypatch, "--seed", "3")
    assert r.exit_code == 0 and o.seed == 3


def test_optimize_offers_templates_unless_no_templates(tmp_path, monkeypatch):
    r, o = _invoke(tmp_path, monkeypatch)
    assert r.exit_code == 0, r.output
    assert o.templates is True and o.tf32 is False
    r, o = _invoke(tmp_path, monkeypatch, "--no-templates")
    assert r.exit_code == 0, r.output
    assert o.templates is False


def test_optimize_timeout_takes_a_fraction_of_a_second_but_not_zero(tmp_path, monkeypatch):
    r, o = _invoke(tmp_path, monkeypatch, "--timeout", "0.5")
    assert r.exit_code == 0, r.output
    assert o.timeout_s == 0.5
    r, o = _invoke(tmp_path, monkeypatch, "--timeout", "1")
    assert r.exit_code == 0 and o.timeout_s == 1.0
    r, o = _invoke(tmp_path, monkeypatch, "--timeout", "0")
    assert_one_sentence_error(r, "--timeout must be a positive number of seconds, not 0.")
    assert o is None


def test_optimize_focus_is_3_by_default_takes_0_for_off_and_fractions_but_not_a_negative(tmp_path, monkeypatch):
    r, o = _invoke(tmp_path, monkeypatch)
    assert r.exit_code == 0, r.output
    assert o.focus == 3.0
    for given in ("0", "0.5", "10"):
        r, o = _invoke(tmp_path, monkeypatch, "--focus", given)
        assert r.exit_code == 0 and o.focus == float(given), r.output
    r, o = _invoke(tmp_path, monkeypatch, "--focus", "-1")
    assert r.exit_code == 2 and o is None and "--focus" in r.output
