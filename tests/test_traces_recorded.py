"""A trajectory recorded by `optiml optimize` on an H200 (tests/data/traces/recorded_h200_runs.db):
run 1 is sgemm_tiled_conflicts at budget 12, run 2 sgemm_naive at budget 8 without ncu."""
import shutil

import pandas as pd
from click.testing import CliRunner

from optiml.cli import main
from optiml.traces.store import TraceStore
from tests.conftest import DATA
from optiml.app.records import stored_records


def db_copy(tmp_path):
    """A copy of the recording (schema m001), upgraded: the viewing commands never migrate."""
    dst = tmp_path / "optiml.db"
    shutil.copy(DATA / "traces" / "recorded_h200_runs.db", dst)
    r = CliRunner().invoke(main, ["upgrade", "--db", str(dst)])
    assert r.exit_code == 0 and "applied m002_resume" in r.output, r.output
    return dst


def test_show_attributes_the_gain_to_padding_with_conflicts_falling(tmp_path):
    r = CliRunner().invoke(main, ["show", "1", "--db", str(db_copy(tmp_path))])
    assert r.exit_code == 0, r.output
    assert "pad Bs[TILE][TILE] -> Bs[TILE][TILE + 1]" in r.output
    assert "shared load bank conflicts 1.5e10 →" in r.output
    assert "+    __shared__ float Bs[TILE][TILE + 1];" in r.output
    assert "5.16x vs seed" in r.output


def test_runs_and_export_of_the_recording(tmp_path):
    db = db_copy(tmp_path)
    r = CliRunner().invoke(main, ["runs", "--db", str(db), "--json"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "run1.csv"
    r = CliRunner().invoke(main, ["export", "1", "--db", str(db), "-o", str(out)])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out)
    assert len(df) == 13 and "smem_ld_bank_conflicts" in " ".join(df.columns)


def test_recorded_h100_run_killed_and_resumed_rebuilds_its_tree(tmp_path):
    """tests/data/traces/h100_tiled_killed_resumed.db: `optiml optimize` on the conflicting tile on
    an H100, budget 30, killed with SIGKILL after 140 s and completed with `--resume 1`."""
    from optiml.search import MCTS, SearchConfig
    from optiml.edits.rules import RulesProposer

    dst = tmp_path / "r.db"
    shutil.copy(DATA / "traces" / "h100_tiled_killed_resumed.db", dst)
    with TraceStore(dst) as store:
        recs = stored_records(store, 1)
        assert sum(r["id"] is not None for r in recs) == 31 and all(r["status"] == "ok" for r in recs if r["id"])

        class MustNotEvaluate:                     # a fake: the stored tree needs no evaluation
            def evaluate(self, source, flags):
                raise AssertionError("a stored candidate was evaluated again")

        m = MCTS.from_records(recs, MustNotEvaluate(), RulesProposer(), config=SearchConfig(budget=30))
        assert m.evaluations == 30 and m.run() is not None          # budget already spent: nothing to do
        assert m.best().path() == ("pad Bs[TILE][TILE] -> Bs[TILE][TILE + 1]",)
        assert store.run(1)["result"]["speedup"] > 3
