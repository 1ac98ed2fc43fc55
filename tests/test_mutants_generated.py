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
