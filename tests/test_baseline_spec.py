"""[baseline] in the task spec: a Python callable (file.py:function beside the spec) to compare the
best kernel with, and one clear sentence naming the field for each mistake."""
import pytest

from optiml.errors import SpecError
from tests.test_spec import SPEC, load

TORCH = "import torch\n\ndef scale(x, n, alpha):\n    return alpha * x\n"


def test_baseline_resolved_beside_spec(tmp_path):
    (tmp_path / "vendor.py").write_text(TORCH)
    spec = load(tmp_path, SPEC + '\n[baseline]\npython = "vendor.py:scale"\nname = "torch (cuBLAS)"\n')
    assert spec.baseline.path == (tmp_path / "vendor.py").resolve() and spec.baseline.function == "scale"
    assert spec.baseline.label == "torch (cuBLAS)"
    spec = load(tmp_path, SPEC + '\n[baseline]\npython = "vendor.py:scale"\n')
    assert spec.baseline.label == "vendor.py:scale"
    assert load(tmp_path).baseline is None


@pytest.mark.parametrize("table, said", [
    ('[baseline]\nname = "torch"\n', "scale.toml: baseline.torch is missing ([baseline] needs torch = "
                                     "'file.py:function'"),
    ('[baseline]\ntorch = "vendor.py:scale"\ncupy = "vendor.py:scale"\n',
     "baseline.cupy and torch both name a baseline; keep one."),
    ('[baseline]\npython = "vendor.py"\n', "scale.toml: baseline.python must be 'file.py:function', not "),
    ('[baseline]\npython = "nothere.py:scale"\n', "scale.toml: baseline.python names 'nothere.py', which does not "
                                                  "exist beside the spec."),
    ('[baseline]\npython = "vendor.py:not a name"\n', "baseline.python must end in a Python function name"),
    ('[baseline]\npython = "vendor.txt:scale"\n', "baseline.python names 'vendor.txt', which is not a .py file."),
    ('[baseline]\npython = 3\n', "baseline.python must be a string, not int"),
    ('[baseline]\npython = "vendor.py:scale"\ncommand = "x"\n', "unknown key 'command' in baseline"),
    ('baseline = "vendor.py:scale"\n', "scale.toml: baseline must be a table"),
])
def test_baseline_errors_are_one_sentence(tmp_path, table, said):
    (tmp_path / "vendor.py").write_text(TORCH)
    (tmp_path / "vendor.txt").write_text(TORCH)
    text = table + SPEC if not table.startswith("[") else SPEC + "\n" + table
    with pytest.raises(SpecError) as e:
        load(tmp_path, text)
    msg = str(e.value)
    assert said in msg and msg.count("\n") == 0
