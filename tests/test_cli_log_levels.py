"""How much log output -v, -vv and -q let through to stderr, seen through `optiml optimize` with a
FAKE run_optimize that logs one message at each level (nothing is built or run): warnings and
errors by default, info too with -v, debug too with -vv, errors only with -q."""
from click.testing import CliRunner
from loguru import logger

from optiml.app.optimize import OptimizeResult
from optiml.cli import main


def _levels_shown(tmp_path, monkeypatch, *flags) -> list[str]:
    """The levels of the fake's messages that reached stderr, in order."""
    import optiml.cli.optimize as command

    def fake_run_optimize(options, on_progress, on_search_end, on_candidate):
        for level in ("DEBUG", "INFO", "WARNING", "ERROR"):
            logger.log(level, f"the fake search's {level.lower()} message")
        return OptimizeResult(run_id=1, evaluations=1, best_source="//", best_path=(),
                              final={"status": "ok", "speedup": 1.0, "seed_ms": 1.0, "best_ms": 1.0},
                              output=tmp_path / "k.optiml.cu")

    monkeypatch.setattr(command, "run_optimize", fake_run_optimize)
    r = CliRunner().invoke(main, [*flags, "optimize", str(tmp_path / "k.cu"), "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 0, r.output
    return [ln.split()[-2] for ln in r.stderr.splitlines() if ln.endswith(" message")]


def test_by_default_only_warnings_and_errors_are_logged(tmp_path, monkeypatch):
    assert _levels_shown(tmp_path, monkeypatch) == ["warning", "error"]


def test_one_v_adds_info_but_not_debug(tmp_path, monkeypatch):
    assert _levels_shown(tmp_path, monkeypatch, "-v") == ["info", "warning", "error"]


def test_two_or_more_v_add_debug(tmp_path, monkeypatch):
    assert _levels_shown(tmp_path, monkeypatch, "-vv") == ["debug", "info", "warning", "error"]
    assert _levels_shown(tmp_path, monkeypatch, "-vvv") == ["debug", "info", "warning", "error"]


def test_quiet_logs_errors_only(tmp_path, monkeypatch):
    assert _levels_shown(tmp_path, monkeypatch, "-q") == ["error"]
    assert _levels_shown(tmp_path, monkeypatch, "-q", "-v") == ["error"]
