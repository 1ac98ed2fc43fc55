"""The forms ``reference=`` takes in the Python API (optiml.evaluate/optimize/compile through
``task_files``), and one sentence for each it cannot use: "file.py:function" written into the spec
with the file made absolute; no colon, a file that is not there, a value that is no function, and a
function that cannot be sent to the GPU child (a lock in its closure). No GPU: only the files."""
import threading
import tomllib

import pytest

from optiml.app.api import task_files
from optiml.errors import UserError
from tests.test_api import VADD, VADD_TASK, vadd_args


def files_for(tmp_path, reference):
    return task_files(VADD, args=vadd_args(), workdir=tmp_path / "w", reference=reference, **VADD_TASK)


def test_a_file_and_function_is_written_with_the_file_made_absolute(tmp_path, monkeypatch):
    (tmp_path / "ref.py").write_text("def add(a, b, n):\n    return a + b\n")
    monkeypatch.chdir(tmp_path)
    files = files_for(tmp_path, "ref.py:add")
    assert tomllib.loads(files.spec.read_text())["reference"]["python"] == f"{(tmp_path / 'ref.py').resolve()}:add"
    seed = files_for(tmp_path / "s", "seed")
    assert "reference" not in tomllib.loads(seed.spec.read_text())


@pytest.mark.parametrize("reference, message", [
    ("ref.py", "reference= must be 'seed', a Python function, or 'file.py:function', not 'ref.py'."),
    ("missing.py:add", "reference= names missing.py, which does not exist."),
    (42, "reference= must be 'seed', a Python function, or 'file.py:function', not a int."),
])
def test_a_reference_it_cannot_use_is_one_sentence(tmp_path, monkeypatch, reference, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as e:
        files_for(tmp_path, reference)
    assert str(e.value) == message


def test_a_function_that_cannot_be_pickled_is_one_sentence(tmp_path):
    pytest.importorskip("cloudpickle")
    lock = threading.Lock()

    def locked(a, b, n):
        with lock:
            return a + b

    with pytest.raises(UserError) as e:
        files_for(tmp_path, locked)
    assert str(e.value).startswith("the reference 'locked' cannot be sent to the GPU child (TypeError: ")
    assert str(e.value).endswith("; give reference='file.py:function'.")


def test_without_cloudpickle_a_lambda_is_one_sentence_naming_it_and_a_module_function_is_pickled(tmp_path, monkeypatch):
    """Plain pickle sends a function of a module by name and cannot send a lambda: the sentence says to
    install cloudpickle or give a file."""
    import sys

    monkeypatch.setitem(sys.modules, "cloudpickle", None)          # not installed
    with pytest.raises(UserError) as e:
        files_for(tmp_path, lambda a, b, n: a + b)
    assert str(e.value).startswith("the reference '<lambda>' cannot be sent to the GPU child (")
    assert str(e.value).endswith("); install cloudpickle, or give reference='file.py:function'.")
    files = files_for(tmp_path / "by_name", threading.active_count)     # a module's function: by name
    assert tomllib.loads(files.spec.read_text())["reference"]["python"].endswith("vadd_reference.py:reference")
    assert b"active_count" in (files.spec.parent / "vadd_reference.pkl").read_bytes()
