"""The command line on a machine without a GPU: help, init, build, and one-sentence errors."""
import json
import os
import subprocess
import sys


import pytest
from click.testing import CliRunner

from optiml.cli import main
from optiml.spec import load_spec
from tests.conftest import EXAMPLES, ROOT, assert_one_sentence_error
from tests.test_spec import KERNEL, SPEC, write


def run(*args, env=None):
    return CliRunner().invoke(main, list(map(str, args)), env=env)


def test_import_and_help_need_no_gpu_libraries():
    code = ("import sys, optiml, optiml.cli, optiml.runner, optiml.verify.harness, optiml.profiler; "
            "heavy = [m for m in ('pycuda', 'openai', 'pandas') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    r = subprocess.run([sys.executable, "-m", "optiml", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "eval" in r.stdout and "init" in r.stdout


def test_init_writes_a_draft_that_loads(tmp_path):
    k = tmp_path / "scale.cu"
    k.write_text(KERNEL)
    r = run("init", k)
    assert r.exit_code == 0, r.output
    draft = (tmp_path / "scale.toml").read_text()
    assert "TODO" in draft and 'entry = "scale"' in draft
    spec = load_spec(tmp_path / "scale.toml", k)
    assert [a.role for a in spec.args] == ["input", "output", "scalar", "scalar"]
    assert spec.args[0].dtype == "float32" and spec.args[2].dtype == "int32"
    assert r.output.strip().endswith(f"then run: optiml eval {k}")
    # a second init does not overwrite
    r = run("init", k)
    assert r.exit_code != 0 and "--force" in r.output
    # a spec written elsewhere: the next command names it
    r = run("init", k, "-o", tmp_path / "other.toml")
    assert r.exit_code == 0 and r.output.strip().endswith(f"optiml eval {k} --spec {tmp_path / 'other.toml'}"), r.output


def test_init_lists_other_kernels_and_takes_entry(tmp_path):
    k = tmp_path / "two.cu"
    k.write_text("__global__ void first(float* a, int n) {}\n__global__ void second(const double* x, double* y, long long n) {}\n")
    assert run("init", k, "--entry", "second").exit_code == 0
    text = (tmp_path / "two.toml").read_text()
    assert 'entry = "second"' in text and "first" in text and '"float64"' in text and '"int64"' in text
    r = run("init", k, "--entry", "third", "-o", tmp_path / "x.toml")
    assert r.exit_code == 1 and "first, second" in r.output


def test_build_reports_resources_without_gpu():
    kernel = EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu"
    r = run("build", kernel, "--arch", "sm_90", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["status"] == "ok" and data["resources"]["smem_static"] >= 8192


def test_builds_text_line_names_registers_then_the_cache(tmp_path, monkeypatch):
    """`optiml build` without --json: one line, ptxas's figures, and "cached" on the second build;
    a build whose ptxas figures were not read still says ok and where it came from."""
    from optiml.build import BuildResult
    from optiml.cli.kernel import _build_line

    monkeypatch.setenv("OPTIML_CACHE_DIR", str(tmp_path / "cache"))
    k, _ = write(tmp_path)
    first, second = (run("build", k, "--arch", "sm_90") for _ in range(2))
    assert first.exit_code == second.exit_code == 0, first.output
    assert first.output.startswith("build     ok (sm_90, ") and " registers, " in first.output
    assert "cached" not in first.output and ", cached): " in second.output
    bare = BuildResult("ok", "k", "sm_90", cached=True)
    assert _build_line(bare, None) == "build     ok (sm_90, cached)"


def test_build_of_broken_kernel_exits_3_with_the_log(tmp_path):
    k, _ = write(tmp_path, kernel=KERNEL.replace("alpha * x[i]", "alpha * x[i] + missing"))
    r = run("build", k, "--arch", "sm_90")
    assert r.exit_code == 3 and "compile_error" in r.output and "missing" in r.output


@pytest.mark.parametrize("setup,message", [
    (lambda d: write(d)[0].parent / "nope.cu", "kernel file not found"),
    (lambda d: (d / "lonely.cu").write_text(KERNEL) and d / "lonely.cu", "optiml init"),
    (lambda d: write(d, SPEC.replace('dtype = "float32"\nrole = "input"', 'dtype = "complex64"\nrole = "input"'))[0], "complex64"),
    (lambda d: write(d, SPEC.replace('entry = "scale"', 'entry = "scal"'))[0], "found: scale"),
    (lambda d: write(d, SPEC + "\n[[args\n")[0], "not valid TOML"),
])
def test_user_errors_are_one_line_without_traceback(tmp_path, setup, message):
    kernel = setup(tmp_path)
    r = subprocess.run([sys.executable, "-m", "optiml", "eval", str(kernel)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_eval_without_gpu_says_so(tmp_path):
    k, _ = write(tmp_path)
    env = dict(os.environ, PATH="/nonexistent")
    r = subprocess.run([sys.executable, "-m", "optiml", "eval", str(k)], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 1 and "no GPU" in r.stderr and "Traceback" not in r.stderr


def test_build_without_nvcc_says_so(tmp_path):
    k, _ = write(tmp_path)
    env = dict(os.environ, OPTIML_NVCC=str(tmp_path / "no-such-nvcc"))
    r = subprocess.run([sys.executable, "-m", "optiml", "build", str(k), "--arch", "sm_90"],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 1 and "nvcc was not found" in r.stderr and "Traceback" not in r.stderr


def test_optimize_errors_are_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")        # no nvidia-smi on this machine either way
    assert_one_sentence_error(run("optimize", "--db", tmp_path / "t.db"), "give the KERNEL to optimize, or --resume RUN")
    assert_one_sentence_error(run("optimize", "--resume", 1, "--db", tmp_path / "missing.db"), "no trace database here")
    db = tmp_path / "old.db"
    db.write_bytes((ROOT / "tests/data/traces/recorded_h200_runs.db").read_bytes())
    assert_one_sentence_error(run("optimize", "--resume", 7, "--db", db), "no run 7")
    # recorded on another machine: its spec path is gone
    assert_one_sentence_error(run("optimize", "--resume", 1, "--db", db), "spec", "is gone")
    spec = EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.toml"
    changed = tmp_path / "changed.toml"
    changed.write_text(spec.read_text() + "\n# edited\n")
    assert_one_sentence_error(run("optimize", "--resume", 1, "--db", db, "--spec", changed), "changed since run 1 started")
    import sqlite3

    recorded = tmp_path / "recorded.toml"         # the spec as the run stored it (the example's has changed since)
    with sqlite3.connect(db) as con:
        recorded.write_text(con.execute("select spec_toml from runs where id = 1").fetchone()[0])
    assert_one_sentence_error(run("optimize", "--resume", 1, "--db", db, "--spec", recorded,
                                  EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu"), "no GPU was found",
                              "`optimize` run kernels")


def test_optimize_into_an_unwritable_or_foreign_database_says_so(tmp_path):
    kernel = EXAMPLES / "sgemm_naive" / "sgemm_naive.cu"
    assert_one_sentence_error(run("optimize", kernel, "--db", tmp_path / "no-such-dir" / "t.db"),
                              "cannot write the trace database")
    (tmp_path / "junk.db").write_text("not sqlite " * 100)
    assert_one_sentence_error(run("optimize", kernel, "--db", tmp_path / "junk.db"), "not an optiml trace database")
