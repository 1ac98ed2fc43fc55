"""Which framework a spec's GPU function gets and how what it returns is matched to the spec's
outputs (optiml.verify.frameworks), on the CPU: the torch module for ``torch = ...``, one sentence
naming what to install when the named framework is not importable (a framework is made
unimportable here by a None entry in sys.modules, so the check does not depend on what this
machine has installed), and the returned values in the outputs' order. No GPU behaviour: the
aliasing of device buffers is tests/test_frameworks_on_host_memory.py."""
import sys

import pytest

import optiml.verify.frameworks as frameworks
from optiml.verify.frameworks import FrameworkMissing, import_framework, returned_values

torch = pytest.importorskip("torch", reason="torch is not installed here")


def test_a_torch_function_gets_the_torch_module():
    assert import_framework("torch") is torch


@pytest.mark.parametrize("kind, needs, install", [
    ("torch", "needs PyTorch", "pip install torch"),
    ("cupy", "needs CuPy", "pip install cupy"),
])
def test_a_framework_that_does_not_import_is_one_sentence_naming_what_to_install(monkeypatch, kind, needs, install):
    monkeypatch.setitem(sys.modules, kind, None)          # `import <kind>` raises ImportError
    with pytest.raises(FrameworkMissing) as e:
        import_framework(kind)
    said = str(e.value)
    assert f"the spec's {kind} function {needs}, which is not installed where the GPU work runs" in said
    assert install in said and frameworks.INSTALL[kind] in said and "\n" not in said


def test_cupy_is_imported_for_a_cupy_function_not_torch(monkeypatch):
    class FakeCupyModule:
        """Stands in for the cupy module in sys.modules (only its identity is checked)."""

    fake = FakeCupyModule()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert import_framework("cupy") is fake


def test_returned_values_are_matched_to_the_outputs_by_position_or_by_name():
    assert returned_values("y", ["y"]) == ["y"]
    assert returned_values(("a", "b"), ["y", "z"]) == ["a", "b"]
    assert returned_values(["a", "b"], ["y", "z"]) == ["a", "b"]
    assert returned_values({"z": "b", "y": "a", "extra": 0}, ["y", "z"]) == ["a", "b"]


def test_returned_values_that_do_not_fit_the_outputs_say_why():
    with pytest.raises(ValueError, match="the reference returned no value for z"):
        returned_values({"y": 1}, ["y", "z"])
    with pytest.raises(ValueError, match="the reference returned 3 outputs, the spec has 2"):
        returned_values((1, 2, 3), ["y", "z"])
    with pytest.raises(ValueError, match="the reference returned 1 outputs, the spec has 2"):
        returned_values(1, ["y", "z"])
