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
    with TraceStore(path) as store:
        store.start_run("vadd")
    r = CliRunner().invoke(cli, ["runs", "--json"], env={"OPTIML_DB": str(path)})
    lines = r.output.splitlines()          # JSON Lines, as --help says: one object per run, one per line
    assert len(lines) == 2 and all(ln.startswith("{") for ln in lines), r.output
    rows = [json.loads(ln) for ln in lines]
    assert rows[0]["task"] == "vadd"
    assert rows[1]["id"] == ids["run"] and rows[1]["best_speedup"] == pytest.approx(2.0)


def test_show_path_and_node(db):
    path, ids = db
    r = CliRunner().invoke(cli, ["show", str(ids["run"]), "--db", str(path)])
    assert r.exit_code == 0, r.output
    assert "shared load bank conflicts 1.9e9 → 0" in r.output and "achieved occupancy 50% → 94%" in r.output
    assert "+    __shared__ float tile[32][33];" in r.output
    r = CliRunner().invoke(cli, ["show", str(ids["run"]), "--node", str(ids["wrong"]), "--db", str(path)])
    assert r.exit_code == 0 and "not verified: wrong_answer" in r.output and "max_abs_err 3" in r.output
    r = CliRunner().invoke(cli, ["show", "--node", str(ids["padded"]), "--raw", "--db", str(path)])
    assert r.exit_code == 0 and "smem_ld_bank_conflicts = 0" in r.output and "Pad the tile." in r.output
    assert_one_sentence_error(CliRunner().invoke(cli, ["show", "--raw", "--db", str(path)]), "--raw", "--node")


def test_best_writes_the_fastest_verified_kernel(db, tmp_path):
    path, ids = db
    out = tmp_path / "best.cu"
    r = CliRunner().invoke(cli, ["best", str(ids["run"]), "-o", str(out), "--db", str(path)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert text.endswith(BOUNDED)
    header = text[:-len(BOUNDED)]
    assert all(ln.startswith("//") for ln in header.strip().splitlines())
    assert f"run {ids['run']}, node {ids['bounded']}" in header and "2.00x" in header
    assert "edits from the seed: pad tile to 33 columns; __launch_bounds__(1024, 2)" in header
    assert "nvcc -O3 ..." in header           # the spec gives no nvcc_flags: its default


def test_best_keeps_the_flags_it_was_timed_with(tmp_path):
    """A best that needs a flag the search added (-use_fast_math) says so in its header and with
    --print-flags; -o - writes to standard output, not to a file named '-'; the node optimize
    wrote (the final figure's) is the one written, with the final interleaved speedup."""
    path = tmp_path / "t.db"
    with TraceStore(path) as store:
        run = store.start_run("k", spec_toml="[kernel]\nentry = 'k'\nnvcc_flags = ['-O2', '-lineinfo']\n")
        root = store.add_node(run, None, "__global__ void k() {}\n")
        fast = store.add_node(run, root, "__global__ void k() { }\n", flags={"extra": ["-use_fast_math"]},
                              edit="fast math")
        slow = store.add_node(run, root, "__global__ void k() {  }\n", edit="other")
        for n, ms in ((root, 2.0), (fast, 1.0), (slow, 1.5)):
            store.finish_node(n, {"status": "ok", "median_ms": ms, "build": {"arch": "sm_90"}})
        store.set_run_result(run, {"status": "ok", "speedup": 1.5, "seed_ms": 2.1, "best_ms": 1.4, "best_node": slow})
    r = CliRunner().invoke(cli, ["best", str(run), "--print-flags", "--db", str(path)])
    assert r.exit_code == 0 and r.output.strip() == "-arch=sm_90 -O2 -lineinfo", r.output
    with TraceStore(path) as store:       # without a final figure: the fastest, with its own flag
        store.set_run_result(run, {})
    r = CliRunner().invoke(cli, ["best", str(run), "--print-flags", "-o", "-", "--db", str(path)])
    assert r.exit_code == 0 and r.output.startswith("-arch=sm_90 -O2 -lineinfo -use_fast_math\n// optiml: run 1, node 2")
    assert "nvcc -arch=sm_90 -O2 -lineinfo -use_fast_math ..." in r.output and "2.00x" in r.output
    assert not (tmp_path / "-").exists() and not __import__("os").path.exists("-")
    with TraceStore(path) as store:
        store.set_run_result(run, {"status": "ok", "speedup": 1.5, "seed_ms": 2.1, "best_ms": 1.4, "best_node": slow})
    r = CliRunner().invoke(cli, ["best", str(run), "-o", "-", "--db", str(path)])
    assert "node 3" in r.output and "1.50x (2.1 ms -> 1.4 ms, timed interleaved with the seed)" in r.output
    assert "edits from the seed: other" in r.output


def test_export_csv_loads_in_pandas(db, tmp_path):
    path, ids = db
    out = tmp_path / "run.csv"
    r = CliRunner().invoke(cli, ["export", str(ids["run"]), "-o", str(out), "--db", str(path)])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out)
    assert len(df) == 5 and "achieved_occupancy_pct" in df.columns
    assert df.loc[df["is_best"], "node_id"].tolist() == [ids["bounded"]]     # the node `optiml best` writes


def test_user_errors_are_one_line(db, tmp_path):
    path, ids = db
    assert_one_sentence_error(CliRunner().invoke(cli, ["show", "99", "--db", str(path)]), "no run 99")
    assert_one_sentence_error(CliRunner().invoke(cli, ["runs", "--db", str(tmp_path / "nope.db")]), "no trace database here")
    assert not (tmp_path / "nope.db").exists()
    assert_one_sentence_error(CliRunner().invoke(cli, ["export", str(ids["run"]), "-o", str(tmp_path / "x.xlsx"),
                                                       "--db", str(path)]), "--format")


def test_best_of_a_recorded_run_is_the_kernel_its_final_line_names(tmp_path):
    """A run recorded on an H100 before the final figure kept its node: its final line names the
    edits pad + -use_fast_math (5.25x), while the search's rule alone would pick the padding
    only; `best` writes what the final line names, with its flag and figure."""
    from tests.conftest import ROOT

    db = tmp_path / "r.db"
    db.write_bytes((ROOT / "tests/data/traces/h100_tiled_killed_resumed.db").read_bytes())
    r = CliRunner().invoke(cli, ["best", "1", "-o", "-", "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "edits from the seed: pad Bs[TILE][TILE] -> Bs[TILE][TILE + 1]; flag -use_fast_math" in r.output
    assert "-use_fast_math ..." in r.output and "5.25x (79.49 ms -> 15.14 ms, timed interleaved" in r.output


def _files(folder):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}


def test_viewing_never_writes_the_database(tmp_path):
    """runs, show, best and export open the database read-only: a database (and its folder) made
    read-only can be viewed, and viewing leaves its bytes and mtime as they were, with no -wal or
    -shm file beside it (a tracked fixture stays unchanged in git)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "optiml.db"
    with TraceStore(path) as store:
        ids = make_trajectory(store)
    before = _files(folder)
    assert list(before) == ["optiml.db"]
    run = str(ids["run"])
    out = tmp_path / "export.csv"
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        for args in (["runs"], ["runs", "--json"], ["show", run], ["show", run, "--node", str(ids["padded"])],
                     ["best", run, "-o", "-"], ["best", run, "--print-flags"], ["export", run, "-o", str(out)]):
            r = CliRunner().invoke(cli, [*args, "--db", str(path)])
            assert r.exit_code == 0, (args, r.output)
            assert _files(folder) == before, args
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)
    assert len(pd.read_csv(out)) == 5


def test_an_old_schema_is_viewed_after_optiml_upgrade(tmp_path):
    """tests/data/traces/recorded_h200_runs.db has schema m001: viewing it says, in one sentence,
    to run `optiml upgrade`, and changes nothing; `optiml upgrade` migrates it once."""
    from tests.conftest import DATA

    path = tmp_path / "old.db"
    path.write_bytes((DATA / "traces" / "recorded_h200_runs.db").read_bytes())
    before = _files(tmp_path)
    for args in (["runs"], ["show", "1"], ["best", "1", "-o", "-"], ["export", "1", "-o", str(tmp_path / "x.csv")]):
        assert_one_sentence_error(CliRunner().invoke(cli, [*args, "--db", str(path)]), "optiml upgrade", str(path))
        assert _files(tmp_path) == before, args
    r = CliRunner().invoke(cli, ["upgrade", "--db", str(path)])
    assert r.exit_code == 0 and r.output.strip() == f"{path}: applied m002_resume", r.output
    r = CliRunner().invoke(cli, ["upgrade", "--db", str(path)])
    assert r.exit_code == 0 and "already up to date" in r.output, r.output
    r = CliRunner().invoke(cli, ["runs", "--db", str(path)])
    assert r.exit_code == 0 and "sgemm_tiled_conflicts" in r.output, r.output


def test_viewing_an_empty_file_is_a_user_error(tmp_path):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    assert_one_sentence_error(CliRunner().invoke(cli, ["runs", "--db", str(path)]), "not an optiml trace database")
    assert path.read_bytes() == b""


def test_viewing_sees_what_a_writer_at_work_committed(tmp_path):
    """While `optiml optimize` holds the database (its -wal beside it), the viewers read its
    committed rows through the WAL instead of the main file alone."""
    path = tmp_path / "optiml.db"
    with TraceStore(path) as writer:
        writer.start_run("first")
        assert (tmp_path / "optiml.db-wal").exists()
        writer.start_run("second")
        r = CliRunner().invoke(cli, ["runs", "--db", str(path)])
        assert r.exit_code == 0 and "first" in r.output and "second" in r.output, r.output


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_dash_is_standard_output(db, tmp_path, monkeypatch, fmt):
    """-o - writes the table to standard output (csv by default, json with --format), never a
    file named '-'; parquet is binary and refused in one sentence."""
    import io

    path, ids = db
    monkeypatch.chdir(tmp_path)
    args = ["export", str(ids["run"]), "-o", "-", "--db", str(path)] + (["--format", "json"] if fmt == "json" else [])
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "-").exists()
    df = pd.read_csv(io.StringIO(r.stdout)) if fmt == "csv" else pd.DataFrame(json.loads(r.stdout))
    assert len(df) == 5 and list(df["node_id"]) == [ids[k] for k in ("seed", "padded", "wrong", "bounded", "pending")]
    r = CliRunner().invoke(cli, ["export", str(ids["run"]), "-o", "-", "--format", "parquet", "--db", str(path)])
    assert_one_sentence_error(r, "parquet", "standard output")
    assert not (tmp_path / "-").exists()
    missing = tmp_path / "no.db"         # refused before any work: no database is read or made
    r = CliRunner().invoke(cli, ["export", "-o", "-", "--format", "parquet", "--db", str(missing)])
    assert_one_sentence_error(r, "parquet", "standard output")
    assert not missing.exists()


def test_run_id_defaults_to_the_latest_run(db, tmp_path, monkeypatch):
    """show, best and export without RUN_ID take the newest run and say so on standard error."""
    path, ids = db
    with TraceStore(path) as store:
        older = store.start_run("older")
    with TraceStore(path) as store:              # the trajectory again, now the newest run
        ids = make_trajectory(store)
    assert ids["run"] > older
    note = f"run {ids['run']} (transpose), the latest"
    r = CliRunner().invoke(cli, ["show", "--db", str(path)])
    assert r.exit_code == 0 and note in r.stderr, r.output
    assert r.stdout.startswith(f"run {ids['run']}: transpose") and "step 2:" in r.stdout
    r = CliRunner().invoke(cli, ["show", "--node", str(ids["padded"]), "--db", str(path)])
    assert r.exit_code == 0 and f"node {ids['padded']} of run {ids['run']}" in r.output, r.output
    r = CliRunner().invoke(cli, ["best", "-o", "-", "--db", str(path)])
    assert r.exit_code == 0 and note in r.stderr and r.stdout.endswith(BOUNDED), r.output
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["export", "--db", str(path)])
    assert r.exit_code == 0 and note in r.stderr and (tmp_path / f"run-{ids['run']}.csv").exists(), r.output
    empty = tmp_path / "empty.db"
    TraceStore(empty).close()
    assert_one_sentence_error(CliRunner().invoke(cli, ["show", "--db", str(empty)]), "no runs recorded yet")


def test_a_best_that_names_its_own_architecture_is_written_with_that_one_only(tmp_path):
    """A template for sm_90a carries -arch=sm_90a: the written flags do not also name the build's sm_90."""
    path = tmp_path / "t.db"
    with TraceStore(path) as store:
        run = store.start_run("k", spec_toml="[kernel]\nentry = 'k'\n")
        root = store.add_node(run, None, "__global__ void k() {}\n")
        hop = store.add_node(run, root, "__global__ void k() { }\n", flags={"extra": ["-arch=sm_90a"]}, edit="template")
        for n, ms in ((root, 2.0), (hop, 1.0)):
            store.finish_node(n, {"status": "ok", "median_ms": ms, "build": {"arch": "sm_90"}})
    r = CliRunner().invoke(cli, ["best", str(run), "--print-flags", "--db", str(path)])
    assert r.exit_code == 0 and r.output.strip() == "-O3 -arch=sm_90a", r.output
    with TraceStore(path) as store:                   # the two-word form too
        two = store.add_node(run, root, "__global__ void k() {   }\n", flags={"extra": ["-arch", "sm_90a"]}, edit="t2")
        store.finish_node(two, {"status": "ok", "median_ms": 0.5, "build": {"arch": "sm_90"}})
    r = CliRunner().invoke(cli, ["best", str(run), "--print-flags", "--db", str(path)])
    assert r.exit_code == 0 and r.output.strip() == "-O3 -arch sm_90a", r.output


def test_show_and_best_refuse_what_they_cannot_do_in_one_sentence(db, tmp_path):
    """A node of another run, best with nowhere to write, a run with nothing verified, and a file
    that cannot be written: each one sentence."""
    path, ids = db
    with TraceStore(path) as store:
        other = store.start_run("vadd", kernel_source="// v\n")
        seed = store.add_node(other, None, "// v\n", proposer="seed")
    r = CliRunner().invoke(cli, ["show", str(other), "--node", str(ids["padded"]), "--db", str(path)])
    assert_one_sentence_error(r, f"--node: node {ids['padded']} is not in run {other}.")
    r = CliRunner().invoke(cli, ["show", str(ids["run"]), "--node", str(ids["padded"]), "--db", str(path)])
    assert r.exit_code == 0
    assert_one_sentence_error(CliRunner().invoke(cli, ["best", str(ids["run"]), "--db", str(path)]),
                              "give -o FILE (or -o - for standard output) to write the best kernel, or --print-flags.")
    assert_one_sentence_error(CliRunner().invoke(cli, ["best", str(other), "-o", "-", "--db", str(path)]),
                              f"run {other} has no verified candidate yet, so there is no best kernel to write.")
    assert seed
    out = tmp_path / "missing" / "best.cu"
    r = CliRunner().invoke(cli, ["best", str(ids["run"]), "-o", str(out), "--db", str(path)])
    assert_one_sentence_error(r, f"{out}: cannot write the kernel (No such file or directory).")


def test_a_node_or_run_not_in_the_database_is_one_sentence(db):
    path, ids = db
    for args in (["show", "--node", "999"], ["show", "--node", "999", "--raw"]):
        assert_one_sentence_error(CliRunner().invoke(cli, [*args, "--db", str(path)]), f"{path}: no candidate node 999.")
    assert_one_sentence_error(CliRunner().invoke(cli, ["show", "999", "--db", str(path)]), "no run 999")


def test_the_store_refuses_a_parent_of_another_run_and_a_status_it_does_not_know(db):
    path, ids = db
    with TraceStore(path) as store:
        other = store.start_run("other")
        with pytest.raises(ValueError, match=f"node {ids['seed']} is not in run {other}"):
            store.add_node(other, ids["seed"], "__global__ void k() {}\n")
        with pytest.raises(ValueError, match="unknown node status 'finished'"):
            store.nodes(ids["run"], "finished")
        assert [n.id for n in store.nodes(ids["run"], "pending")] == [ids["pending"]]
