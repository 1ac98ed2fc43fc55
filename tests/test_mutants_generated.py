"""bench/mutants/generated.py: mutants made from a module's own code. Each changes exactly one
place that occurs once in the file, still parses, and they spread over the module's functions."""
import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("generated", ROOT / "bench" / "mutants" / "generated.py")
generated = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generated)

MODULE = '''"""A small module."""


def clamp(x, lo, hi):
    if x < lo:
        return lo
    return hi if x > hi else x


def both(a, b):
    return a and not b


def label(n):
    return f"{n + 1} items" if n != 1 else "one item"


def one(x):
    return x + 1


def two(x):
    return x + 1
'''


def test_each_generated_mutant_changes_one_unique_place_and_still_parses(tmp_path):
    pkg = tmp_path / "optiml"
    pkg.mkdir()
    (pkg / "small.py").write_text(MODULE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_small.py").write_text("from optiml.small import clamp\n")
    (tmp_path / "tests" / "test_other.py").write_text("import os\n")
    ms = generated.generate(pkg / "small.py", tmp_path, per_module=8)
    assert len(ms) == 8
    for file, old, new, tests in ms:
        assert file == "optiml/small.py" and tests == ("tests/test_small.py",)
        assert MODULE.count(old) == 1 and old != new
        ast.parse(MODULE.replace(old, new))
    changed = {new for _, _, new, _ in ms}
    assert any("x <= lo" in n for n in changed) or any("x >= hi" in n or "x <= hi" in n for n in changed)
    # spread: every one of the five functions gets one before any gets a second
    def function_of(old):
        return MODULE[:MODULE.index(old) + len(old)].rsplit("def ", 1)[-1].split("(")[0]
    assert sorted(function_of(old) for _, old, _, _ in ms[:5]) == ["both", "clamp", "label", "one", "two"]
    # the same line in two functions: widened to its def line to be told apart
    assert any(old.startswith("def one(x):") for _, old, _, _ in ms)
    # nothing inside the f-string is touched (its inner positions are unreliable before Python 3.12)
    assert not any("{n - 1}" in n or "{n + 2}" in n for n in changed)


def test_the_module_of_a_changed_file_list(tmp_path):
    assert generated.tests_of(ROOT / "optiml" / "edits" / "hygiene.py", ROOT)     # some test imports it


def test_a_modules_own_test_files_come_before_its_packages():
    """The judge is imported by name by few test files and reached through its package by many:
    its own run first, so a killed mutant stops early (pytest -x)."""
    tests = generated.tests_of(ROOT / "optiml" / "runner" / "judge.py", ROOT)
    name = ".".join(("runner", "judge"))        # not written out: this file is no test of the judge
    own = [t for t in tests if name in (ROOT / t).read_text()]
    assert own and list(tests[:len(own)]) == own and len(tests) > len(own)
    assert "tests/test_mutants_generated.py" not in tests


def _mutants_module():
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("mutants_tool", ROOT / "bench" / "mutants" / "mutants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutants_tool"] = mod          # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_a_mutant_runs_first_the_tests_that_execute_its_lines(tmp_path, monkeypatch):
    """--coverage: the tests recorded as running a mutant's lines decide it (a failure there is the
    kill, a pass the survival; with --thorough a survivor also gets the import-based selection); a
    mutant on lines no test ran in-process gets the import-based selection as before."""
    coverage = __import__("pytest").importorskip("coverage")
    tool = _mutants_module()
    data = coverage.CoverageData(basename=str(tmp_path / ".coverage"))
    data.set_context("tests/test_a.py::test_one|run")
    data.add_lines({"/elsewhere/optiml/foo.py": [3, 4]})
    data.set_context("tests/test_b.py::test_two[x-1]|run")
    data.add_lines({"/elsewhere/optiml/foo.py": [4, 7]})
    data.set_context("")
    data.add_lines({"/elsewhere/optiml/foo.py": [1]})
    data.write()
    cov = tool.CoverageMap(tmp_path / ".coverage", tmp_path)
    assert cov.tests_for("optiml/foo.py", 3, 3) == ("tests/test_a.py::test_one",)
    assert set(cov.tests_for("optiml/foo.py", 4, 4)) == {"tests/test_a.py::test_one", "tests/test_b.py::test_two[x-1]"}
    assert cov.tests_for("optiml/foo.py", 5, 6) == () and cov.tests_for("optiml/foo.py", 1, 1) == ()
    assert cov.tests_for("optiml/bar.py", 1, 9) == ()

    copy = tmp_path / "copy"
    (copy / "optiml").mkdir(parents=True)
    (copy / "optiml" / "foo.py").write_text("a = 1\n\nb = 2\nc = 3\n\n\nd = 4\n")
    runs = []

    def fake_pytest(where, tests, timeout):        # a fake runner: which tests ran, what they "found"
        runs.append(tuple(tests))
        return ("failed" if "tests/test_a.py::test_one" in tests else "passed"), 1.0, ""
    monkeypatch.setattr(tool, "pytest", fake_pytest)
    m = tool.Mutant("foo", "optiml/foo.py", "b = 2", "b = 3", ("tests/test_foo.py",), generated=True)
    assert tool.run_mutant(copy, m, 10, cov)[0] == "killed"
    assert runs == [("tests/test_foo.py", "tests/test_a.py::test_one")]     # the module's own file first
    runs.clear()
    m = tool.Mutant("foo", "optiml/foo.py", "d = 4", "d = 5", ("tests/test_foo.py",), generated=True)
    assert tool.run_mutant(copy, m, 10, cov)[0] == "survived"
    assert runs == [("tests/test_foo.py", "tests/test_b.py::test_two[x-1]")]
    runs.clear()
    assert tool.run_mutant(copy, m, 10, cov, thorough=True)[0] == "survived"
    assert runs == [("tests/test_foo.py", "tests/test_b.py::test_two[x-1]"), ("tests/test_foo.py", *tool.PLANTED)]
    runs.clear()
    # a covering test in the module's own file is not named twice; a file not named after it is not first
    m = tool.Mutant("foo", "optiml/foo.py", "d = 4", "d = 5", ("tests/test_other.py", "tests/test_b.py"), generated=True)
    tool.run_mutant(copy, m, 10, cov)
    assert runs == [("tests/test_b.py::test_two[x-1]",)]
    runs.clear()
    m = tool.Mutant("foo", "optiml/foo.py", "d = 4", "d = 5", ("tests/test_foo.py", "tests/test_b.py"), generated=True)
    data.set_context("tests/test_foo.py::test_d|run")
    data.add_lines({"/elsewhere/optiml/foo.py": [7]})
    data.write()
    cov = tool.CoverageMap(tmp_path / ".coverage", tmp_path)
    tool.run_mutant(copy, m, 10, cov)
    assert runs == [("tests/test_foo.py", "tests/test_b.py::test_two[x-1]")]
    runs.clear()
    m = tool.Mutant("foo", "optiml/foo.py", "a = 1", "a = 2", ("tests/test_foo.py",), generated=True)
    (copy / "optiml" / "bar.py").write_text("x = 1\n")
    tool.run_mutant(copy, tool.Mutant("bar", "optiml/bar.py", "x = 1", "x = 2", ("tests/test_bar.py",), generated=True), 10, cov)
    assert runs == [("tests/test_bar.py", *tool.PLANTED)]      # no test ran the module: the import-based ones
    runs.clear()
    tool.run_mutant(copy, m, 10, cov)                # line 1 ran at import only: the tests of the module's lines,
    assert runs[0][0] == "tests/test_foo.py"         # after the files named after it (a test may only read the value)
    assert set(runs[0][1:]) == {"tests/test_a.py::test_one", "tests/test_b.py::test_two[x-1]"}
    # a def line (its defaults run at import): the tests that ran the function's body
    src = "import os\n\n\ndef f(a=1):\n    return a\n"
    data.set_context("tests/test_c.py::test_f|run")
    data.add_lines({"/elsewhere/optiml/baz.py": [5]})
    data.write()
    cov = tool.CoverageMap(tmp_path / ".coverage", tmp_path)
    assert cov.tests_near("optiml/baz.py", src, 4, 4) == ("tests/test_c.py::test_f",)
    # a hand-written mutant runs the tests written for it, whatever the map says
    runs.clear()
    tool.run_mutant(copy, tool.Mutant("foo", "optiml/foo.py", "b = 2", "b = 3", ("tests/test_foo.py",)), 10, cov)
    assert runs == [("tests/test_foo.py", *tool.PLANTED)]
    assert (copy / "optiml" / "foo.py").read_text().startswith("a = 1\n\nb = 2")


def test_with_the_maps_timings_a_mutant_runs_its_quickest_tests_first(tmp_path, monkeypatch):
    """A map made with each test's seconds (pytest --durations=0, summed over setup, call and
    teardown) orders a mutant's tests: those that run its lines first, then its own files' other
    tests; each group by file, the files whose tests take least first, each file's quickest first; a
    test with no timing goes last in its group."""
    coverage = __import__("pytest").importorskip("coverage")
    tool = _mutants_module()
    report = ("== slowest durations ==\n"
              "40.00s call     tests/test_foo.py::test_slow_build\n"
              "2.50s setup    tests/test_a.py::test_one\n"
              "0.50s call     tests/test_a.py::test_one\n"
              "0.01s teardown tests/test_a.py::test_one\n"
              "0.20s call     tests/test_foo.py::test_quick[a b]\n"
              "1.00s call     tests/test_b.py::test_two[x-1]\n"
              "(3 durations < 0.005s hidden.)\n")
    seconds = tool.seconds_of_tests(report)
    assert seconds == {"tests/test_foo.py::test_slow_build": 40.0, "tests/test_a.py::test_one": 3.01,
                       "tests/test_foo.py::test_quick[a b]": 0.2, "tests/test_b.py::test_two[x-1]": 1.0}
    data = coverage.CoverageData(basename=str(tmp_path / ".coverage"))
    for test in ("tests/test_a.py::test_one", "tests/test_b.py::test_two[x-1]", "tests/test_c.py::test_new"):
        data.set_context(test + "|run")
        data.add_lines({"/elsewhere/optiml/foo.py": [3]})
    data.write()
    tool.durations_path(tmp_path / ".coverage").write_text(__import__("json").dumps(seconds))
    cov = tool.CoverageMap(tmp_path / ".coverage", tmp_path)
    copy = tmp_path / "copy"
    (copy / "optiml").mkdir(parents=True)
    (copy / "optiml" / "foo.py").write_text("a = 1\n\nb = 2\n")
    runs = []
    monkeypatch.setattr(tool, "pytest", lambda where, tests, timeout: runs.append(tuple(tests)) or ("failed", 1.0, ""))
    m = tool.Mutant("foo", "optiml/foo.py", "b = 2", "b = 3", ("tests/test_foo.py",), generated=True)
    assert tool.run_mutant(copy, m, 10, cov)[0] == "killed"
    assert runs == [("tests/test_b.py::test_two[x-1]", "tests/test_a.py::test_one", "tests/test_c.py::test_new",
                     "tests/test_foo.py::test_quick[a b]", "tests/test_foo.py::test_slow_build")]


def test_a_modules_own_tests_are_the_files_named_after_it_or_its_package():
    tool = _mutants_module()
    assert tool.named_after("tests/test_spec_fuzz.py", "optiml/spec/checks.py")
    assert tool.named_after("tests/test_checks.py", "optiml/spec/checks.py")
    assert not tool.named_after("tests/test_api.py", "optiml/spec/checks.py")
    assert tool.named_after("tests/test_best_ties.py", "optiml/best.py")
    assert not tool.named_after("tests/test_search.py", "optiml/best.py")


def test_a_survivor_listed_as_equivalent_is_reported_with_its_reason_and_left_out_of_the_score(tmp_path, monkeypatch, capsys):
    """The tool over a small repository whose mutants all survive (a FAKE run_mutant): the one listed in
    equivalent.py is counted apart with its reason, the score is killed / (total - equivalent), an entry
    that a killed mutant matches is reported for review (one that matches nothing is not), and the
    JSON says 'equivalent' and why."""
    import json
    import subprocess
    tool = _mutants_module()
    repo = tmp_path / "repo"
    (repo / "optiml").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "optiml" / "foo.py").write_text("def f(a):\n    if a > 1:\n        return a + 1\n    return 0\n")
    (repo / "tests" / "test_foo.py").write_text("from optiml.foo import f\n\n\ndef test_f():\n    assert f(0) == 0\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    made = __import__("sys").modules["generated"].generate(repo / "optiml" / "foo.py", repo)
    assert len(made) >= 3
    listed = made[0][2].strip()
    wrong = made[2][2].strip()                          # a killed one's text
    monkeypatch.setattr(tool.equivalent, "EQUIVALENT", (("optiml/foo.py", listed, "a reason given"),
                                                        ("optiml/foo.py", wrong, "wrongly listed"),
                                                        ("optiml/foo.py", "no such text", "not drawn")))
    outcomes = {m[2]: "survived" if i < 2 else "killed" for i, m in enumerate(made)}
    monkeypatch.setattr(tool, "run_mutant", lambda copy, m, *a, **k: (outcomes[m.new], 0.1))
    out = tmp_path / "out.json"
    rc = tool.main(["--repo", str(repo), "--skip-baseline", "--generated-only", "--module",
                    str(repo / "optiml" / "foo.py"), "--json", str(out)])
    text = capsys.readouterr().out
    n = len(made)
    row = next(line.split() for line in text.splitlines() if line.startswith("foo "))
    assert row == ["foo", str(n - 2), "1", str(n), f"{100 * (n - 2) / (n - 1):.0f}%"], text
    assert "a reason given" in text and "'no such text'" not in text
    assert text.split("yet a test fails on a mutant it matches")[1].splitlines()[1] == f"  optiml/foo.py: {wrong!r}"
    assert rc == (0 if (n - 2) / (n - 1) >= 0.9 else 1)
    rows = json.loads(out.read_text())
    assert [r["outcome"] for r in rows].count("equivalent") == 1
    assert next(r for r in rows if r["outcome"] == "equivalent")["why"] == "a reason given"


def test_another_seed_draws_fresh_mutants_the_standing_set_does_not_hold(tmp_path):
    pkg = tmp_path / "optiml"
    pkg.mkdir()
    (pkg / "small.py").write_text(MODULE)
    standing = generated.generate(pkg / "small.py", tmp_path, per_module=4)
    fresh = generated.generate(pkg / "small.py", tmp_path, per_module=4, seed=1)
    assert len(standing) == len(fresh) == 4
    assert not {m[1:3] for m in standing} & {m[1:3] for m in fresh}
    assert generated.generate(pkg / "small.py", tmp_path, per_module=4) == standing      # the same each time


def test_a_mutants_tests_stopped_at_the_limit_leave_nothing_running(tmp_path):
    """At the limit the tool stops the tests and what they started, also a process that left their
    process group for one of its own (nvcc under a builder): none is left holding a core."""
    import os
    import subprocess
    import sys
    import time

    import pytest

    tool = _mutants_module()
    pids = tmp_path / "pids"
    script = ("import subprocess, sys, time\n"
              "quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
              "a = subprocess.Popen(['sleep', '300'], **quiet)\n"
              "b = subprocess.Popen(['sleep', '300'], start_new_session=True, **quiet)\n"
              f"open({str(pids)!r}, 'w').write(f'{{a.pid}} {{b.pid}}')\n"
              "time.sleep(300)\n")
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        tool.run_all_stopped([sys.executable, "-c", script], tmp_path, dict(os.environ), 2.0)
    assert time.monotonic() - t0 < 30
    _all_stopped(pids)
    done = tool.run_all_stopped([sys.executable, "-c", "print('ok')"], tmp_path, dict(os.environ), 30.0)
    assert done.returncode == 0 and done.stdout == "ok\n"
    # tests that end on their own (a failure) and leave a child waiting, its output in a file of its own
    # (a fake compute-sanitizer's log): it is stopped at their end too
    left = ("import subprocess\n"
            "b = subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL)\n"
            f"open({str(pids)!r}, 'w').write(str(b.pid))\n"
            "raise SystemExit(1)\n")
    assert tool.run_all_stopped([sys.executable, "-c", left], tmp_path, dict(os.environ), 30.0).returncode == 1
    _all_stopped(pids)


def _all_stopped(pids):
    import time

    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                state = open(f"/proc/{pid}/stat").read().split()[2]
            except OSError:
                break                               # gone
            if state == "Z":                        # stopped, waiting for its parent (gone too) to be reaped
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"process {pid} is still running")
