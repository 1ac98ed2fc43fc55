"""The examples' declared tuning spaces and ``bench/search_quality/record_space.py``, which records
one (no GPU here: its dry run builds every point; its recording runs through the real runner with a
scripted harness)."""
import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from types import SimpleNamespace

import pytest

from optiml.expr import evaluate
from optiml.spec import load_task
from optiml.spec.space import read_point
from optiml.verify.harness import HarnessResult, TimingResult
from tests.conftest import EXAMPLES, ROOT
from tests.fakes import FakeHarness

SCRIPT = ROOT / "bench" / "search_quality" / "record_space.py"
NEW_SPACES = {"stencil2d", "sgemm_regblock", "transpose_tiled", "softmax_tuned"}


def _script():
    spec = importlib.util.spec_from_file_location("record_space", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def brute_force(toml_path) -> tuple[list[dict], int]:
    """The points of a spec's [tune] table that satisfy its restrictions at every size set, read
    from the TOML itself (not through optiml's TuneSpace), and the number before the restrictions."""
    data = tomllib.loads(toml_path.read_text())
    table = dict(data["tune"])
    restrictions = table.pop("restrictions", [])
    sizes = [data["sizes"]["timing"], *data["sizes"]["verify"]]
    names = list(table)
    combos = list(itertools.product(*table.values()))
    valid = [dict(zip(names, c)) for c in combos
             if all(evaluate(r, {**s, **dict(zip(names, c))}) for r in restrictions for s in sizes)]
    return valid, len(combos)


def tuned_examples():
    return sorted(p.parent.name for p in EXAMPLES.glob("*/*.toml") if "tune" in tomllib.loads(p.read_text()))


def test_the_four_spaces_are_declared():
    assert NEW_SPACES <= set(tuned_examples())


@pytest.mark.parametrize("name", tuned_examples())
def test_an_examples_space_loads_and_its_seed_point_satisfies_it(name):
    kernel = EXAMPLES / name / f"{name}.cu"
    source, spec = load_task(kernel, None)
    seed = read_point(source, spec.entry, spec.tune)
    assert set(seed) == set(spec.tune.names), seed
    for n, v in seed.items():
        assert v in spec.tune.values(n), (n, v, spec.tune.values(n))
    assert spec.tune.restrictions
    assert spec.tune_problem(source) is None
    assert seed in brute_force(kernel.with_suffix(".toml"))[0]


@pytest.mark.parametrize("name, low, high", [("stencil2d", 30, 60), ("sgemm_regblock", 300, 500),
                                             ("transpose_tiled", 20, 60), ("softmax_tuned", 30, 150)])
def test_a_space_has_the_size_it_was_declared_for(name, low, high):
    kernel = EXAMPLES / name / f"{name}.cu"
    source, spec = load_task(kernel, None)
    points, total = _script().enumerate_space(source, spec)
    valid, combos = brute_force(kernel.with_suffix(".toml"))
    assert [p for p, _ in points] == valid and total == combos
    assert low <= len(points) <= high, len(points)


def test_the_dry_run_enumerates_the_transpose_space_and_builds_every_point(tmp_path):
    kernel = EXAMPLES / "transpose_tiled" / "transpose_tiled.cu"
    valid, combos = brute_force(kernel.with_suffix(".toml"))
    env = dict(os.environ, OPTIML_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(SCRIPT), str(kernel), "--dry-run", "--arch", "sm_90"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    n = len(valid)
    assert f"{n} of {combos} points satisfy the restrictions; {n} of the {n} built compile" in r.stdout, r.stdout
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("[")]
    assert len(progress) == n and all(": build ok (" in ln and " registers" in ln for ln in progress), r.stderr[-2000:]
    assert len(list((tmp_path / "cache").rglob("*.cubin"))) >= n


def test_the_dry_run_says_which_points_do_not_compile(tmp_path):
    """A point whose source nvcc refuses is counted, with its status, not lost or fatal."""
    for f in ("transpose_tiled.cu", "transpose_tiled.toml", "baseline.py"):
        shutil.copy(EXAMPLES / "transpose_tiled" / f, tmp_path / f)
    cu = tmp_path / "transpose_tiled.cu"
    cu.write_text(cu.read_text().replace("__syncthreads();", "static_assert(PAD == 1, \"padded only\");\n    __syncthreads();"))
    env = dict(os.environ, OPTIML_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(SCRIPT), str(cu), "--dry-run", "--arch", "sm_90", "--limit", "4"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "32 of 48 points satisfy the restrictions; 2 of the 4 built compile for sm_90, 2 do not (compile_error 2)" \
        in r.stdout, r.stdout


class TimedByTheTile(FakeHarness):
    """Scripted GPU results: a point runs in TILE / 100 + PAD / 1000 ms, except TILE 16 with PAD 0,
    which computes a wrong answer."""

    def run(self, job, lend=None):
        c = job.candidate.constants
        if (c["TILE"], c["PAD"]) == (16, 0):
            return HarnessResult("wrong_output", "scripted: wrong at element 3", device_name="Scripted GPU")
        ms = c["TILE"] / 100 + c["PAD"] / 1000
        t = TimingResult(ms, ms, ms, ms, ms, ms, 0.0, 10, 3, 1, True)
        return HarnessResult("ok", timing=t, device_name="Scripted GPU")


def test_a_recording_has_one_row_per_point_with_the_runners_status_and_median(tmp_path, build_cache, monkeypatch):
    monkeypatch.setenv("OPTIML_CACHE_DIR", str(build_cache))
    mod = _script()
    kernel = EXAMPLES / "transpose_tiled" / "transpose_tiled.cu"
    source, spec = load_task(kernel, None)
    points, total = mod.enumerate_space(source, spec)
    points = points[:6]           # TILE 8 and 16, PAD 0 and 1
    out = tmp_path / "spaces" / "t.json"
    args = SimpleNamespace(kernel=kernel, output=out, name=None, gpu=0, jobs=2, timeout=60.0)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(kernel), "-o", str(out)])
    assert mod.record(args, "sm_90", source, spec, points, total, harness_factory=lambda d: TimedByTheTile()) == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == "optiml-space/1" and doc["name"] == "transpose_tiled" and doc["entry"] == "transpose_tiled"
    assert doc["kernel"] == "examples/transpose_tiled/transpose_tiled.cu"
    assert doc["spec"] == "examples/transpose_tiled/transpose_tiled.toml"
    assert doc["gpu"] == "Scripted GPU" and re.fullmatch(r"\d{4}-\d\d-\d\d", doc["recorded"]) and doc["command"].startswith("python3 bench/search_quality/record_space.py ")
    assert list(doc["tune_params"]) == ["TILE", "ROWS_PER_THREAD", "PAD"]
    assert doc["tune_params"]["ROWS_PER_THREAD"] == [1, 2, 4, 8, 16, 32]
    assert doc["restrictions"] == list(spec.tune.restrictions)
    assert doc["seed_point"] == {"TILE": 32, "ROWS_PER_THREAD": 4, "PAD": 1}
    assert doc["points"] == [
        [8, 1, 0, "ok", 0.08], [8, 1, 1, "ok", 0.081], [8, 2, 0, "ok", 0.08], [8, 2, 1, "ok", 0.081],
        [16, 1, 0, "wrong_output", None], [16, 1, 1, "ok", 0.161]]


def test_a_spec_without_a_tune_table_is_one_sentence():
    r = subprocess.run([sys.executable, str(SCRIPT), "examples/transpose_naive/transpose_naive.cu", "--dry-run"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("record_space.py: examples/transpose_naive/transpose_naive.toml has no [tune] table, "
                                "so there is no space to record (see docs/spec.md).")


def test_without_a_gpu_the_recording_is_one_sentence(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("nvcc", "cu++filt", "c++filt"):           # what it may use, but no nvidia-smi
        if shutil.which(tool):
            (bindir / tool).symlink_to(shutil.which(tool))
    env = dict(os.environ, PATH=str(bindir), OPTIML_CACHE_DIR=str(tmp_path / "cache"))
    out = tmp_path / "s.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "examples/transpose_tiled/transpose_tiled.cu", "-o", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no GPU was found" in lines[0], r.stderr
    assert not out.exists()
