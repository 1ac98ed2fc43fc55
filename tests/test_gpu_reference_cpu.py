"""GPU references in the spec (``[reference] torch = ...`` / ``cupy = ...``) and what the GPU child
does with a function's results, checked on the CPU: the spec's keys and their one-sentence
errors, the sentence for a framework that is not installed, and how returned values reach the
output buffers (with CPU torch tensors standing in for the aliased device buffers: the copy logic,
not GPU behaviour; tests/gpu/test_gpu_reference.py runs it on a GPU)."""
import pytest

from optiml.errors import SpecError
from optiml.spec import find_spec, load_spec
from optiml.verify.frameworks import DeviceFunction, FrameworkMissing, import_framework
from tests.test_spec import SPEC, load

REF = "def scale(x, n, alpha):\n    return alpha * x\n"


def with_reference(table: str) -> str:
    return SPEC + "\n[reference]\n" + table


def test_torch_and_cupy_references_are_read_beside_the_spec(tmp_path):
    (tmp_path / "ref.py").write_text(REF)
    spec = load(tmp_path, with_reference('torch = "ref.py:scale"\n'))
    r = spec.reference
    assert (r.kind, r.function, r.path) == ("torch", "scale", (tmp_path / "ref.py").resolve())
    assert r.on_gpu and r.is_python and "torch GPU arrays" in spec.summary()
    spec = load(tmp_path, with_reference('cupy = "ref.py:scale"\nkind = "cupy"\n'))
    assert spec.reference.kind == "cupy" and spec.reference.on_gpu
    host = load(tmp_path, with_reference('python = "ref.py:scale"\n')).reference
    assert host.is_python and not host.on_gpu
    seed = load(tmp_path).reference
    assert not seed.is_python and not seed.on_gpu


@pytest.mark.parametrize("table, said", [
    ('torch = "ref.py:scale"\npython = "ref.py:scale"\n', "reference.torch and python both name a reference; keep one"),
    ('kind = "torch"\n', "reference.torch is missing (kind = 'torch' needs torch = 'file.py:function')."),
    ('kind = "jax"\n', "reference.kind must be 'seed', 'python', 'torch' or 'cupy', not 'jax'."),
    ('cupy = "nothere.py:scale"\n', "reference.cupy names 'nothere.py', which does not exist beside the spec."),
    ('torch = "ref.py"\n', "reference.torch must be 'file.py:function'"),
])
def test_reference_errors_are_one_sentence(tmp_path, table, said):
    (tmp_path / "ref.py").write_text(REF)
    with pytest.raises(SpecError) as e:
        load(tmp_path, with_reference(table))
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_missing_framework_is_one_sentence_naming_what_to_install():
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(FrameworkMissing) as e:
            import_framework("cupy")
        assert "needs CuPy, which is not installed" in str(e.value) and "pip install cupy" in str(e.value)
    else:
        pytest.skip("CuPy is installed here")


def test_the_baseline_names_its_framework(tmp_path):
    (tmp_path / "ref.py").write_text(REF)
    spec = load(tmp_path, SPEC + '\n[baseline]\ncupy = "ref.py:scale"\n')
    assert spec.baseline.framework == "cupy"
    assert load(tmp_path, SPEC + '\n[baseline]\ntorch = "ref.py:scale"\n').baseline.framework == "torch"
    assert load(tmp_path, SPEC + '\n[baseline]\npython = "ref.py:scale"\n').baseline.framework == "torch"


def test_the_kernelbench_examples_load(tmp_path):
    from pathlib import Path

    for name in ("kb_softmax", "kb_rmsnorm"):
        kernel = Path(__file__).parents[1] / "examples" / name / f"{name}.cu"
        assert load_spec(find_spec(kernel), kernel).reference.is_python


# -- what the child writes: CPU tensors in place of the aliased buffers -------------------------

torch = pytest.importorskip("torch", reason="torch is not installed here")


def cpu_function(fn):
    """A DeviceFunction on CPU torch tensors (no GPU, no stream): its result handling only."""
    f = object.__new__(DeviceFunction)
    f.kind, f.fw, f.fn, f.device = "torch", torch, fn, torch.device("cpu")
    return f


class Outs:
    def __init__(self, spec_text, tmp_path):
        (tmp_path / "ref.py").write_text(REF)
        self.spec = load(tmp_path, spec_text)


def test_returned_values_are_copied_into_the_outputs(tmp_path):
    spec = Outs(SPEC, tmp_path).spec
    x = torch.arange(6, dtype=torch.float32)
    y = torch.full((6,), float("nan"))
    f = cpu_function(lambda x, n, alpha: alpha * x)
    f.write(spec, f.fn(x=x, n=6, alpha=0.5), {"y": y})
    assert torch.equal(y, 0.5 * x)
    y.fill_(float("nan"))
    f.write(spec, {"y": (2 * x).double()}, {"y": y})        # a dict, another dtype: cast on the way in
    assert torch.equal(y, 2 * x) and y.dtype == torch.float32
    y.fill_(float("nan"))
    f.write(spec, (x.reshape(2, 3),), {"y": y})               # a tuple, another shape of the same size
    assert torch.equal(y, x)


def test_a_function_that_names_an_output_writes_it_in_place(tmp_path):
    spec = Outs(SPEC, tmp_path).spec

    def scale(x, y, n, alpha):
        torch.mul(x, alpha, out=y)
    f = cpu_function(scale)
    x, y = torch.arange(4, dtype=torch.float32), torch.zeros(4)
    f.write(spec, f.fn(x=x, y=y, n=4, alpha=2.0), {"y": y})
    assert torch.equal(y, 2 * x) and "y" in f.params
    with pytest.raises(ValueError, match="the function returned nothing; return y or take it as parameters"):
        cpu_function(lambda x, n, alpha: None).write(spec, None, {"y": y})     # it names no output: None is a result


@pytest.mark.parametrize("result, said", [
    ((torch.zeros(6), torch.zeros(6)), "the reference returned 2 outputs, the spec has 1"),
    ({"z": torch.zeros(6)}, "the reference returned no value for y"),
    (torch.zeros(5), "the reference's y has 5 elements, the spec's shape (6,) has 6"),
])
def test_a_wrong_result_is_one_sentence(tmp_path, result, said):
    spec = Outs(SPEC, tmp_path).spec
    f = cpu_function(None)
    with pytest.raises(ValueError) as e:
        f.write(spec, result, {"y": torch.zeros(6)})
    assert str(e.value) == said
