"""`optiml init --kernelbench TASK.py KERNEL.cu`: a spec and a Python reference (the Model's
forward) from a KernelBench-format task, on the shipped examples. Needs torch (skipped without)."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from optiml.draft import draft_kernelbench
from optiml.errors import SpecError
from optiml.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TASKS = {"kb_softmax": "softmax_task.py", "kb_rmsnorm": "rmsnorm_task.py"}


def need_torch():
    return pytest.importorskip("torch", reason="the KernelBench tasks are PyTorch modules: pip install torch")


def init(tmp_path, name):
    return draft(tmp_path, (EXAMPLES / name / TASKS[name]).read_text(), name, (EXAMPLES / name / f"{name}.cu").read_text(),
                 TASKS[name])


_DRAFTED: dict[tuple, tuple[str, str]] = {}


def draft(tmp_path, task_text, name, kernel_text, task_file="task.py"):
    """``optiml init --kernelbench`` of a task and a kernel written here: the spec, loaded, and its text.
    The same task and kernel are drafted once a process (the texts name no folder: checked here), and
    each test gets its own copy of the files."""
    (tmp_path / task_file).write_text(task_text)
    kernel = tmp_path / f"{name}.cu"
    kernel.write_text(kernel_text)
    key = (task_text, name, kernel_text, task_file)
    if key not in _DRAFTED:
        _DRAFTED[key] = draft_kernelbench(tmp_path / task_file, kernel_text, kernel)
        assert not any(str(tmp_path) in t for t in _DRAFTED[key])
    spec_text, ref_text = _DRAFTED[key]
    (tmp_path / f"{name}.toml").write_text(spec_text)
    (tmp_path / f"{name}_ref.py").write_text(ref_text)
    return load_spec(tmp_path / f"{name}.toml", kernel), spec_text


def module(path):
    spec = importlib.util.spec_from_file_location(f"t_{path.stem}_{abs(hash(path))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_softmax_task_becomes_a_spec(tmp_path):
    need_torch()
    spec, text = init(tmp_path, "kb_softmax")
    assert [(a.name, a.role, a.dtype, a.shape) for a in spec.args] == [
        ("x", "input", "float32", ("batch_size", "dim")), ("y", "output", "float32", ("batch_size", "dim")),
        ("batch_size", "scalar", "int32", ()), ("dim", "scalar", "int32", ())]
    assert spec.timing_sizes == {"batch_size": 8192, "dim": 8192}
    verify = spec.verify_sizes
    assert len(verify) >= 2 and all(v["dim"] < 8192 for v in verify)
    assert any(n % 2 for v in verify for n in v.values())       # at least one odd size
    assert spec.reference.function == "reference" and spec.reference.path.name == "kb_softmax_ref.py"
    assert spec.reference.kind == "torch"                  # the Model's forward on the GPU's tensors
    assert spec.launch.grid == ("batch_size",)
    assert spec.count("bytes", {"batch_size": 10, "dim": 7}) == 2 * 4 * 10 * 7        # each array once


def test_fused_task_takes_the_models_parameter_and_attribute(tmp_path):
    need_torch()
    spec, text = init(tmp_path, "kb_rmsnorm")
    args = {a.name: a for a in spec.args}
    assert [a.name for a in spec.args] == ["x", "weight", "y", "batch_size", "features", "eps"]
    assert (args["weight"].role, args["weight"].shape) == ("input", ("features",))
    assert args["y"].role == "output" and args["eps"].value == pytest.approx(1e-6)
    assert "the Model's weight" in text


@pytest.mark.parametrize("name", sorted(TASKS))
def test_reference_matches_the_tasks_forward(tmp_path, name):
    torch = need_torch()
    spec, _ = init(tmp_path, name)
    task = module(tmp_path / TASKS[name])
    ref = module(tmp_path / f"{name}_ref.py").reference
    sizes = spec.verify_sizes[0]
    rng = np.random.default_rng(1)
    kwargs, shapes = {}, {}
    for a in spec.args:
        if a.role == "input":
            shape = tuple(sizes[d] for d in a.shape)
            kwargs[a.name] = rng.standard_normal(shape).astype(np.float32) + (1.0 if a.name == "weight" else 0.0)
        elif a.role == "scalar":
            kwargs[a.name] = sizes.get(a.name, a.value)
    out = ref(**{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()})
    out = (out,) if isinstance(out, torch.Tensor) else out      # tensors in (on the CPU here), tensors out
    for k, v in sizes.items():
        setattr(task, k, v)
    model = task.Model(*task.get_init_inputs())
    with torch.no_grad():
        if "weight" in kwargs:
            model.weight.copy_(torch.from_numpy(kwargs["weight"]))
        expected = model(torch.from_numpy(kwargs["x"])).numpy()
    assert len(out) == 1 and out[0].shape == expected.shape == (sizes["batch_size"], expected.shape[1])
    np.testing.assert_allclose(out[0].numpy(), expected, rtol=1e-6, atol=1e-7)
    # the baseline: the same forward in eager PyTorch, named in the spec
    assert spec.baseline is not None and spec.baseline.function == "baseline"
    assert spec.baseline.label == "PyTorch eager (the Model's forward)"
    base = module(tmp_path / f"{name}_ref.py").baseline
    got = base(**{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()})
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-7)


LINEAR_TASK = """import torch
import torch.nn as nn

batch_size = 64
in_features = 96
out_features = 48


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
"""
LINEAR_KERNEL = """__global__ void linear_relu(const float* x, const float* w, const float* b, float* y,
                            int batch_size, int out_features, int in_features) {
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    if (row < batch_size && col < out_features) {
        float s = 0.f;
        for (int k = 0; k < in_features; ++k) s += x[row * in_features + k] * w[col * in_features + k];
        y[row * out_features + col] = fmaxf(s + b[col], 0.f);
    }
}
"""


def test_a_linear_tasks_baseline_is_cublas_through_the_models_forward_on_the_cases_own_parameters(tmp_path):
    """nn.Linear + ReLU: the baseline (eager, and the torch.compile variant the spec names in a
    comment) computes the reference's outputs from the case's tensors, its parameters the tensors
    themselves: a changed weight changes its result (no stale copy in the cached Model)."""
    torch = need_torch()
    spec, spec_text = draft(tmp_path, LINEAR_TASK, "linear_relu", LINEAR_KERNEL)
    assert spec.baseline.path.name == "linear_relu_ref.py" and "linear_relu_ref.py:baseline_compiled" in spec_text
    sizes = dict(batch_size=37, out_features=48, in_features=96)      # a GEMM: its flops, for the compute bound
    assert spec.count("flops", sizes) == 2 * 37 * 48 * 96
    ref = module(tmp_path / "linear_relu_ref.py")
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(s, generator=g) for s in ((37, 96), (48, 96), (48,)))
    args = dict(x=x, w=w, b=b, y=torch.empty(37, 48), batch_size=37, out_features=48, in_features=96)
    want = torch.relu(x @ w.T + b)
    torch.testing.assert_close(ref.reference(**args), want)
    torch.testing.assert_close(ref.baseline(**args), want)
    w.mul_(-1.0)                                   # the same buffer, new values: the baseline sees them
    torch.testing.assert_close(ref.baseline(**args), torch.relu(x @ w.T + b))


def test_the_baseline_runs_the_task_module_once_a_shape_never_in_a_timed_call(tmp_path):
    """A timed baseline call is the forward alone: the task module is executed (and the Model built)
    once for each shapes, dtypes and numbers, not in every call, whose host time would fall in the
    baseline's timing (0.58 to 1.2 ms for KernelBench 40's torch.compile, a forward of about 0.5 ms)."""
    torch = need_torch()
    draft(tmp_path, LINEAR_TASK, "linear_relu", LINEAR_KERNEL)
    ref = module(tmp_path / "linear_relu_ref.py")
    runs = []
    real = ref.load_task
    ref.load_task = lambda *a, **k: runs.append(a) or real(*a, **k)
    g = torch.Generator().manual_seed(5)

    def args(m):
        x, w, b = (torch.randn(s, generator=g) for s in ((m, 96), (48, 96), (48,)))
        return dict(x=x, w=w, b=b, y=torch.empty(m, 48), batch_size=m, out_features=48, in_features=96)
    first = args(37)
    for _ in range(3):
        torch.testing.assert_close(ref.baseline(**first), torch.relu(first["x"] @ first["w"].T + first["b"]))
    assert len(runs) == 1
    other = args(41)
    torch.testing.assert_close(ref.baseline(**other), torch.relu(other["x"] @ other["w"].T + other["b"]))
    ref.baseline(**first)
    assert len(runs) == 2
    doubled = dict(first, x=first["x"].double(), w=first["w"].double(), b=first["b"].double())
    ref.baseline(**doubled)                     # another dtype: a Model of its own
    assert len(runs) == 3


@pytest.mark.parametrize("name", sorted(TASKS))
def test_shipped_specs_load(name):
    spec = load_spec(EXAMPLES / name / f"{name}.toml", EXAMPLES / name / f"{name}.cu")
    assert spec.reference.path.is_file() and not any(
        "TODO" in line for line in (EXAMPLES / name / f"{name}.toml").read_text().splitlines())


def test_without_torch_one_sentence_names_pip_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    kernel = EXAMPLES / "kb_softmax" / "kb_softmax.cu"
    with pytest.raises(SpecError, match="pip install torch"):
        draft_kernelbench(EXAMPLES / "kb_softmax" / TASKS["kb_softmax"], kernel.read_text(), kernel)


def test_not_a_kernelbench_task_is_one_sentence(tmp_path):
    need_torch()
    (tmp_path / "t.py").write_text("x = 1\n")
    kernel = EXAMPLES / "kb_softmax" / "kb_softmax.cu"
    with pytest.raises(SpecError, match="Model, get_inputs and get_init_inputs"):
        draft_kernelbench(tmp_path / "t.py", kernel.read_text(), kernel)


MSE_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


batch_size = 4096
dim = 1024


def get_inputs():
    return [torch.rand(batch_size, dim), torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
"""
MSE_KERNEL = """__global__ void mse(const float *p, const float *t, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.f;
    for (; i < n; i += blockDim.x * gridDim.x) { float d = p[i] - t[i]; s += d * d; }
    atomicAdd(out, s / n);
}
"""


def test_a_loss_kernels_count_and_atomic_total_are_drafted_so_the_spec_runs(tmp_path):
    """An `int n` no size names is the first array's element count (the launch in the same terms, not
    in the kernel's own scalar, which the spec could not evaluate), and an output the kernel adds
    into with atomicAdd starts at 0 (inout), not poisoned."""
    need_torch()
    spec, text = draft(tmp_path, MSE_TASK, "mse", MSE_KERNEL)
    args = {a.name: a for a in spec.args}
    assert args["out"].role == "inout" and args["out"].init.value == 0.0
    # init's test on the CPU emulation also starts the total at 0, so the draft is confirmed there
    assert 'value = "batch_size * dim"  # verified on the CPU emulation' in text
    assert "verified on the CPU emulation at the verify sizes" in text and "the draft fails" not in text
    assert args["n"].value == "batch_size * dim"
    assert "(batch_size * dim)" in spec.launch.grid[0] and "n," not in spec.launch.grid[0]


def test_the_init_command_writes_the_spec_and_reference_and_keeps_existing_ones_unless_forced(tmp_path):
    """`optiml init --kernelbench` as a user types it (with --no-test: the draft as read): the spec and
    the reference beside it, then one sentence where the reference exists already, and --force."""
    need_torch()
    import shutil

    from click.testing import CliRunner

    from optiml.cli import main
    from tests.conftest import assert_one_sentence_error

    for f in ("kb_softmax.cu", TASKS["kb_softmax"]):
        shutil.copy(EXAMPLES / "kb_softmax" / f, tmp_path / f)
    kernel, task = tmp_path / "kb_softmax.cu", tmp_path / TASKS["kb_softmax"]
    args = ["init", str(kernel), "--kernelbench", str(task), "--no-test"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"wrote {tmp_path / 'kb_softmax.toml'} (") and "testing the draft" not in r.output
    assert r.output.rstrip().endswith(f"then run: optiml eval {kernel}")
    ref = tmp_path / "kb_softmax_ref.py"
    assert load_spec(tmp_path / "kb_softmax.toml", kernel).entry == "softmax_kernel" and "def reference(" in ref.read_text()
    (tmp_path / "kb_softmax.toml").unlink()
    ref.write_text("# mine\n")
    assert_one_sentence_error(CliRunner().invoke(main, args), f"{ref}: already exists; pass --force to overwrite it.")
    assert ref.read_text() == "# mine\n" and not (tmp_path / "kb_softmax.toml").exists()
    r = CliRunner().invoke(main, [*args, "--force"])
    assert r.exit_code == 0 and "def reference(" in ref.read_text()


GOOD_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


N = 4096


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
"""
RELU = "__global__ void relu(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; " \
       "if (i < n) y[i] = fmaxf(x[i], 0.f); }\n"


@pytest.mark.parametrize("task, kernel, said", [
    (None, RELU, "{task}: no such task file."),
    (GOOD_TASK.replace("import torch.nn as nn", "import torch.nn as nn\nimport not_a_module_here"), RELU,
     "{task}: importing it failed (ModuleNotFoundError: No module named 'not_a_module_here')."),
    (GOOD_TASK, "__device__ float twice(float v) { return 2.f * v; }\n",
     "{kernel}: no __global__ function found to match the task's arguments to."),
    (GOOD_TASK.replace("return torch.relu(x)", "assert x.shape[0] == 4096\n        return torch.relu(x)"), RELU,
     "{task}: the task does not run at reduced sizes (AssertionError: ), so optiml cannot tell its dimensions apart"),
    (GOOD_TASK.replace("return [torch.randn(N)]", "return [torch.randn(N), 'mean']").replace(
        "def forward(self, x):", "def forward(self, x, how):"), RELU,
     "{task}: get_inputs() returns something other than tensors and numbers; only those are supported."),
    (GOOD_TASK.replace("return [torch.randn(N)]", "return [torch.randn(N), 0.5]").replace(
        "def forward(self, x):", "def forward(self, x, a):"), RELU,
     "{task}: get_inputs() passes the number 0.5 to forward (its input 1), and the kernel has no float argument left "
     "to take it."),
], ids=["no_task_file", "import_fails", "no_kernel", "not_at_reduced_sizes", "a_string_input", "a_number_no_argument_takes"])
def test_init_kernelbench_says_what_is_wrong_in_one_sentence(tmp_path, task, kernel, said):
    """`optiml init --kernelbench` on a task or a kernel it cannot draft from: one sentence naming the
    file and what is wrong with it, and no spec written."""
    need_torch()
    from click.testing import CliRunner

    from optiml.cli import main
    from tests.conftest import assert_one_sentence_error

    k, t = tmp_path / "relu.cu", tmp_path / "task.py"
    k.write_text(kernel)
    if task is not None:
        t.write_text(task)
    r = CliRunner().invoke(main, ["init", str(k), "--kernelbench", str(t), "--no-test"])
    assert_one_sentence_error(r, said.format(task=t, kernel=k))
    assert not (tmp_path / "relu.toml").exists()


@pytest.mark.parametrize("signature, body, scratch", [
    # a scratch buffer between the inputs: b and the output keep their own pointers (by position, b
    # went to the scratch buffer and the output to b, a const pointer)
    ("const float* a, float* part, const float* b, float* out", "part[i] = a[i]; out[i] = part[i] + b[i];", "part"),
    # a scratch buffer before an output named like none: the output is the pointer only written
    ("const float* a, const float* b, float* tmp, float* z", "tmp[i] = a[i]; z[i] = tmp[i] + b[i];", "tmp"),
    # after it, as by position
    ("const float* a, const float* b, float* z, float* tmp", "tmp[i] = a[i]; z[i] = a[i] + b[i];", "tmp"),
], ids=["between_the_inputs", "before_the_output", "last"])
def test_a_scratch_pointer_is_left_out_wherever_it_stands(tmp_path, signature, body, scratch):
    """A pointer the task has no array for (a scratch buffer): the inputs and the output go to the
    pointers that fit them (an output never to a const pointer, an input not to one only written), and
    the one left over is drafted as a TODO."""
    need_torch()
    (tmp_path / "task.py").write_text(GOOD_TASK.replace("def forward(self, x):\n        return torch.relu(x)",
                                                        "def forward(self, a, b):\n        return a + b")
                                      .replace("return [torch.randn(N)]", "return [torch.randn(N), torch.randn(N)]"))
    k = tmp_path / "add.cu"
    k.write_text(f"__global__ void add({signature}, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; "
                 f"if (i < n) {{ {body} }} }}\n")
    text, ref = draft_kernelbench(tmp_path / "task.py", k.read_text(), k, test=False)
    (tmp_path / "add.toml").write_text(text)
    (tmp_path / "add_ref.py").write_text(ref)
    spec = load_spec(tmp_path / "add.toml", k)
    roles = {a.name: (a.role, "TODO" in text[text.index(f'name = "{a.name}"'):].split("\n\n")[0])
             for a in spec.args if a.role != "scalar"}
    out = next(n for n in roles if n not in ("a", "b", scratch))
    assert roles == {"a": ("input", False), "b": ("input", False), out: ("output", False), scratch: ("input", True)}


def test_where_the_kernels_use_of_its_pointers_is_not_known_const_still_says_which_is_an_input():
    """Pointers the kernel hands to code outside the file (nothing known of their reads and writes): an
    output never goes to a const pointer, even one named like an output, and an input prefers a const
    one to a writable scratch buffer."""
    from types import SimpleNamespace as P

    from optiml.draft.kernelbench import _matched_pointers

    def names(pointers, roles):
        return [p.name for p in _matched_pointers(pointers, [(r, i, None, None) for i, r in enumerate(roles)], {})]
    assert names([P(name="x", is_const=True), P(name="tmp", is_const=False), P(name="out", is_const=True)],
                 ["input", "output"]) == ["x", "tmp"]
    assert names([P(name="a", is_const=True), P(name="part", is_const=False), P(name="b", is_const=True),
                  P(name="y", is_const=False)], ["input", "input", "output"]) == ["a", "b", "y"]


def test_a_kernel_with_more_pointers_than_the_task_has_arrays_gets_todo_lines_and_no_test(tmp_path):
    """A pointer the task has no array for is drafted as a TODO (dtype, role, shape), and the launch is
    not tested, saying why; the spec still loads."""
    need_torch()
    (tmp_path / "task.py").write_text(GOOD_TASK)
    k = tmp_path / "relu.cu"
    k.write_text("__global__ void relu(const float* x, float* y, float* scratch, int n) { int i = blockIdx.x * "
                 "blockDim.x + threadIdx.x; if (i < n) { scratch[i] = x[i]; y[i] = fmaxf(x[i], 0.f); } }\n")
    text, ref = draft_kernelbench(tmp_path / "task.py", k.read_text(), k, test=True)
    (tmp_path / "relu_ref.py").write_text(ref)
    scratch = text[text.index('name = "scratch"'):].split("\n\n")[0]
    assert scratch == ('name = "scratch"\ndtype = "float32"  # TODO: the task has 2 arrays; what is this pointer?\n'
                       'role = "input"  # TODO\nshape = [1]  # TODO')
    assert "(not tested: the kernel's pointers and the task's arrays differ in number)" in text
    (tmp_path / "relu.toml").write_text(text)
    assert [a.name for a in load_spec(tmp_path / "relu.toml", k).args] == ["x", "y", "scratch", "n"]
