"""`optiml generate` as a thin layer over run_generate (replaced here by a FAKE that records the
options it is given and reports a scripted generation; nothing is built or run): the defaults its
--help shows are the ones passed on, --no-profile turns profiling off, the generation's lines go
to stderr unless -q, and Ctrl-C exits 130 saying how to resume."""
from pathlib import Path

from click.testing import CliRunner

from optiml.app.generate import Event, GenerateResult, Outcome
from optiml.cli import main


def _fake_run_generate(tmp_path, seen, interrupt=False):
    def fake_run_generate(options, on_event, on_progress, on_search_end, on_candidate):
        """Says two lines of the generation, then finishes with two verified strategies (or is interrupted)."""
        seen["options"] = options
        on_event(Event("asking the LLM for 2 strategies"))
        on_event(Event("strategy 1 'tiled': built"))
        if interrupt:
            from optiml.app.optimize import Interrupted

            raise Interrupted(5)
        outcomes = (Outcome(1, "tiled", "ok", "", 2, 1.0, False), Outcome(2, "naive", "ok", "", 3, 2.0, False))
        return GenerateResult(run_id=5, strategies=outcomes, evaluations=2, best_node=2, slowest_node=3,
                              best_source="//", best_path=("tiled",),
                              final={"status": "ok", "speedup": 2.0, "seed_ms": 2.0, "best_ms": 1.0},
                              output=tmp_path / "s.generated.cu")
    return fake_run_generate


def _invoke(tmp_path, monkeypatch, *args, quiet=False, interrupt=False):
    import optiml.cli.generate as command

    seen = {}
    monkeypatch.setattr(command, "run_generate", _fake_run_generate(tmp_path, seen, interrupt))
    r = CliRunner().invoke(main, ["-q"] * quiet + ["generate", str(tmp_path / "s.toml"), "--describe", "scale a vector",
                                                   "--db", str(tmp_path / "t.db"), *args])
    return r, seen.get("options")


def test_generate_help_shows_the_defaults_it_passes_on(tmp_path, monkeypatch):
    """--help says 4 strategies and seed 0; a run without those flags passes exactly those, and
    profiles (profile=True) unless --no-profile."""
    r = CliRunner().invoke(main, ["generate", "--help"])
    assert r.exit_code == 0
    help_text = " ".join(r.output.split())
    assert "one kernel each. [default: 4]" in help_text
    assert "Seed for the requests and the search. [default: 0]" in help_text
    r, o = _invoke(tmp_path, monkeypatch)
    assert r.exit_code == 0, r.output
    assert o.strategies == 4 and o.seed == 0 and o.profile is True
    assert o.spec == tmp_path / "s.toml" and o.describe == "scale a vector"
    r, o = _invoke(tmp_path, monkeypatch, "--no-profile", "--strategies", "2", "--seed", "9")
    assert r.exit_code == 0, r.output
    assert o.profile is False and o.strategies == 2 and o.seed == 9


def test_generate_prints_its_lines_on_stderr_unless_quiet(tmp_path, monkeypatch):
    r, _ = _invoke(tmp_path, monkeypatch)
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[:2] == ["asking the LLM for 2 strategies", "strategy 1 'tiled': built"]
    assert r.stdout.splitlines()[0] == "strategy 1 'tiled': node 2 ok 1 ms"
    r, _ = _invoke(tmp_path, monkeypatch, quiet=True)
    assert r.exit_code == 0, r.output
    assert r.stderr == "" and r.stdout.splitlines()[0] == "strategy 1 'tiled': node 2 ok 1 ms"


def test_generate_ctrl_c_exits_130_and_says_how_to_resume(tmp_path, monkeypatch):
    r, _ = _invoke(tmp_path, monkeypatch, interrupt=True)
    assert r.exit_code == 130, (r.exit_code, r.output)
    db = Path(tmp_path / "t.db")
    assert r.stderr.splitlines()[-1] == (f"interrupted: run 5 is kept in {db}; continue it with "
                                         f"optiml generate --resume 5 --db {db}")
