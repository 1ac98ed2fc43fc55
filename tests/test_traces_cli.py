"""optiml runs | show | best | export, through click, on a recorded trajectory."""
import json

import click
import pandas as pd
import pytest
from click.testing import CliRunner

from optiml.cli import _Group
from optiml.cli.traces import COMMANDS
from optiml.traces.store import TraceStore
from tests.conftest import assert_one_sentence_error
from tests.test_traces_report import BOUNDED, make_trajectory


@click.group(cls=_Group)
def cli():
    """A group like optiml.cli.main, carrying only the trace commands."""


for _command in COMMANDS:
    cli.add_command(_command)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "optiml.db"
    with TraceStore(path) as store:
        ids = make_trajectory(store)
    return path, ids


def test_runs_lists_and_json(db):
    path, ids = db
    r = CliRunner().invoke(cli, ["runs", "--db", str(path)])
    assert r.exit_code == 0, r.output
    assert "transpose" in r.output and "3/8" in r.output and "~2.00x" in r.output   # candidates beyond the seed
    r = CliRunner().invoke(cli, ["runs", "--json"], env={"OPTIML_DB": str(path)})
    rows = json.loads(r.output)
    assert rows[0]["id"] == ids["run"] and rows[0]["best_speedup"] == pytest.approx(2.0)


def test_show_path_and_node(db):
    path, ids = db
    r = CliRunner().invoke(cli, ["show", str(ids["run"]), "--db", str(path)])
    assert r.exit_code == 0, r.output
    assert "shared load bank conflicts 1.9e9 → 0" in r.output and "achieved occupancy 50% → 94%" in r.output
    assert "+    __shared__ float tile[32][33];" in r.output
    r = CliRunner().invoke(cli, ["show", str(ids["run"]), "--node", str(ids["wrong"]), "--db", str(path)])
    assert r.exit_code == 0 and "wrong_answer" in r.output and "max_abs_err" in r.output


def test_best_writes_the_fastest_verified_kernel(db, tmp_path):
    path, ids = db
    out = tmp_path / "best.cu"
    r = CliRunner().invoke(cli, ["best", str(ids["run"]), "-o", str(out), "--db", str(path)])
    assert r.exit_code == 0, r.output
    assert out.read_text() == BOUNDED


def test_export_csv_loads_in_pandas(db, tmp_path):
    path, ids = db
    out = tmp_path / "run.csv"
    r = CliRunner().invoke(cli, ["export", str(ids["run"]), "-o", str(out), "--db", str(path)])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out)
    assert len(df) == 5 and "achieved_occupancy_pct" in df.columns


def test_user_errors_are_one_line(db, tmp_path):
    path, ids = db
    assert_one_sentence_error(CliRunner().invoke(cli, ["show", "99", "--db", str(path)]), "no run 99")
    assert_one_sentence_error(CliRunner().invoke(cli, ["runs", "--db", str(tmp_path / "nope.db")]), "no trace database here")
    assert not (tmp_path / "nope.db").exists()
    assert_one_sentence_error(CliRunner().invoke(cli, ["export", str(ids["run"]), "-o", str(tmp_path / "x.xlsx"),
                                                       "--db", str(path)]), "--format")
