"""What `optiml optimize` draws on stderr when stderr IS a terminal (a fake terminal here: a
StringIO that says isatty(); the search is a FAKE run_optimize reporting three candidates): the
progress bar with the best speedup so far and no per-candidate lines, unless -v asks for the lines."""
import io
from types import SimpleNamespace

from click.testing import CliRunner

from optiml.app.optimize import Finished, OptimizeResult
from optiml.cli import main


class FakeTerminal(io.StringIO):
    """A stream that claims to be a terminal, standing in for stderr on a console."""

    def isatty(self):
        return True


def _fake_run_optimize(tmp_path):
    def fake_run_optimize(options, on_progress, on_search_end, on_candidate):
        """Three candidates, the second 2x faster than the seed, reported as run_optimize does."""
        on_progress(0, 3, None)
        on_candidate(Finished(1, 3, 1, "", "ok", "", 4.0, 1.0))
        on_progress(1, 3, None)
        on_candidate(Finished(2, 3, 2, "BLOCK 16 -> 32", "ok", "", 2.0, 2.0))
        on_progress(2, 3, 2.0)
        on_candidate(Finished(3, 3, 3, "unroll 4", "ok", "", 3.0, 1.33))
        on_progress(3, 3, 2.0)
        on_search_end()
        return OptimizeResult(run_id=7, evaluations=3, best_source="//", best_path=("BLOCK 16 -> 32",),
                              final={"status": "ok", "speedup": 2.0, "seed_ms": 4.0, "best_ms": 2.0},
                              output=tmp_path / "k.optiml.cu")
    return fake_run_optimize


def _run_on_a_terminal(tmp_path, monkeypatch, *flags):
    import optiml.cli.optimize as command
    import optiml.cli.options as options

    terminal = FakeTerminal()
    monkeypatch.setattr(command, "run_optimize", _fake_run_optimize(tmp_path))
    monkeypatch.setattr(options, "sys", SimpleNamespace(stderr=terminal))
    r = CliRunner().invoke(main, [*flags, "optimize", str(tmp_path / "k.cu"), "--db", str(tmp_path / "t.db")])
    return r, terminal.getvalue()


def test_a_terminal_gets_the_progress_bar_and_no_candidate_lines(tmp_path, monkeypatch):
    r, drawn = _run_on_a_terminal(tmp_path, monkeypatch)
    assert r.exit_code == 0, (r.output, r.exception)
    assert "optimizing (best 2.00x)" in drawn and "3/3" in drawn, drawn
    assert "node 2" not in drawn and "node 2" not in r.stderr
    assert r.stdout.startswith("run 7: 3 candidates; best 2.00x")


def test_a_terminal_with_verbose_gets_candidate_lines_instead_of_the_bar(tmp_path, monkeypatch):
    r, drawn = _run_on_a_terminal(tmp_path, monkeypatch, "-v")
    assert r.exit_code == 0, (r.output, r.exception)
    assert drawn == ""
    assert "[2/3] node 2 ok 2 ms 2.00x  BLOCK 16 -> 32" in r.stderr.splitlines()


def test_quiet_on_a_terminal_draws_nothing(tmp_path, monkeypatch):
    r, drawn = _run_on_a_terminal(tmp_path, monkeypatch, "-q")
    assert r.exit_code == 0, (r.output, r.exception)
    assert drawn == "" and r.stderr == ""
