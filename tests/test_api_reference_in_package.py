"""A Python reference given to ``optiml.evaluate``/``optimize`` that is defined in a package's
``__init__.py`` (``mypkg.add``, imported from a folder the GPU child's interpreter does not know):
the folder that holds the package is put on the child's path, so the child's own loader imports
it and computes the reference's outputs. A fresh interpreter stands in for the GPU child; no GPU."""
import os
import subprocess
import sys
import tomllib

import numpy as np

from optiml.app.api import task_files
from tests.conftest import ROOT
from tests.test_api import VADD, VADD_TASK, vadd_args

PACKAGE = "optiml_test_reference_package"


def test_a_reference_from_a_packages_init_is_importable_in_the_gpu_child(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    (lib / PACKAGE).mkdir(parents=True)
    (lib / PACKAGE / "__init__.py").write_text("def add(a, b, n):\n    return a + b\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.delitem(sys.modules, PACKAGE, raising=False)
    import importlib

    package = importlib.import_module(PACKAGE)
    try:
        files = task_files(VADD, args=vadd_args(), workdir=tmp_path / "w", reference=package.add, **VADD_TASK)
    finally:
        sys.modules.pop(PACKAGE, None)
    assert tomllib.loads(files.spec.read_text())["reference"]["python"].endswith("vadd_reference.py:reference")
    _runs_in_a_fresh_interpreter(tmp_path, files)


def _runs_in_a_fresh_interpreter(tmp_path, files):
    """The spec's Python reference computes a + b in a fresh interpreter, as the GPU child would."""
    code = ("import numpy as np; from pathlib import Path; from optiml.spec import load_spec; "
            "from optiml.verify.inputs import make_case; "
            "from optiml.verify.worker import _python_reference, _python_outputs; "
            f"spec = load_spec(Path({str(files.spec)!r}), Path({str(files.kernel)!r})); "
            "data = make_case(spec, {'N': 77}, 5); out = _python_outputs(_python_reference(spec), spec, data); "
            "assert np.array_equal(out['c'], data.arrays['a'] + data.arrays['b']); print('same')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}          # optiml itself, and not the package's folder
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "same", r.stderr


def test_a_reference_typed_in_an_interactive_session_is_importable_in_the_gpu_child(tmp_path):
    """A function of ``__main__`` (a notebook, the interactive interpreter): no folder to add to the
    child's path, and the reference still loads there (pickled by value)."""
    namespace = {"__name__": "__main__"}
    exec("def add(a, b, n):\n    return a + b\n", namespace)
    files = task_files(VADD, args=vadd_args(), workdir=tmp_path / "w", reference=namespace["add"], **VADD_TASK)
    _runs_in_a_fresh_interpreter(tmp_path, files)
