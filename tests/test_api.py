"""The Python API (optiml.compile / evaluate / optimize, docs/api.md) on this CPU machine: the spec
built from arrays (dtypes, shapes, size names, roles, the draws' ranges) through the same parse_spec
as a file, one sentence for each mistake, a real nvcc build, and evaluate/optimize with the FAKE GPU
parts of tests/test_optimize_fakes.py (a fake GPU worker whose median is BLOCK / 100 ms, a fake
compute-sanitizer): optiml's wiring and the result objects, none of it GPU behaviour."""
import subprocess
import sys
import tomllib

import numpy as np
import pytest

import optiml
from optiml.errors import SpecError, UserError
from optiml.spec import load_spec, spec_data_from_arrays, spec_from_arrays, to_toml
from tests.conftest import ROOT, RUNNER_DEADLINE
from tests.test_optimize_fakes import FakeBlockWorker, FakeSanitizer, fake_gpu  # noqa: F401 (a fixture)
from tests.test_spec import write

pytestmark = RUNNER_DEADLINE

VADD = r"""
#define BLOCK 128
__global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""

TRANSPOSE = r"""
__global__ void transpose(const __half* in, __half* out, const int* perm, int rows, int cols) {
    int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 8 + threadIdx.y;
    if (r < rows && c < cols) out[c * rows + r] = in[r * cols + c];
}
"""

N = 1000


def vadd_args(n=N):
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-3, 5, n).astype(np.float32), rng.uniform(-3, 5, n).astype(np.float32)
    return [a, b, np.zeros(n, np.float32), np.int32(n)]


VADD_TASK = dict(outputs=["c"], grid="cdiv(N, BLOCK)", block="BLOCK", sizes={"N": N})


def test_spec_from_arrays_names_sizes_and_roles():
    spec = spec_from_arrays(VADD, vadd_args(), **VADD_TASK)
    assert spec.entry == "vadd"
    assert [(a.name, a.dtype, a.role, a.shape) for a in spec.args] == [
        ("a", "float32", "input", ("N",)), ("b", "float32", "input", ("N",)), ("c", "float32", "output", ("N",)),
        ("n", "int32", "scalar", ())]
    assert spec.args[3].value == "N"            # the scalar equal to the size follows it to other sizes
    assert spec.timing_sizes == {"N": N} and spec.verify_sizes == ({"N": N}, {"N": N})
    a = spec.args[0].init                        # drawn within the given values' range, not the values
    assert a.dist == "uniform" and -3 <= a.low < -2.9 and 4.9 < a.high <= 5
    assert spec.args[2].init is None and spec.launch.grid == ("cdiv(N, BLOCK)",)


def test_unnamed_dimensions_are_n0_n1_in_order_and_ints_keep_their_range():
    x = np.ones((48, 40), np.float16)
    perm = np.arange(10, dtype=np.int32)
    spec = spec_from_arrays(TRANSPOSE, [x, np.zeros((40, 48), np.float16), perm, 48, 40], outputs=[1],
                            grid=["cdiv(N1, 32)", "cdiv(N0, 8)"], block=[32, 8],
                            verify_sizes=[{"N0": 17, "N1": 33, "N2": 10}, {"N0": 5, "N1": 64, "N2": 10}])
    assert [a.shape for a in spec.args[:3]] == [("N0", "N1"), ("N1", "N0"), ("N2",)]
    assert [a.dtype for a in spec.args] == ["float16", "float16", "int32", "int32", "int32"]   # scalars: the kernel's type
    assert [a.value for a in spec.args[3:]] == ["N0", "N1"]
    assert (spec.args[0].init.dist, spec.args[0].init.std) == ("normal", 1.0)    # np.ones: no range, not constant
    assert (spec.args[2].init.dist, spec.args[2].init.low, spec.args[2].init.high) == ("integers", 0, 10)
    assert spec.verify_sizes[0] == {"N0": 17, "N1": 33, "N2": 10}


def test_the_written_toml_loads_as_the_same_spec(tmp_path):
    data = spec_data_from_arrays(VADD, vadd_args(), atol=1e-5, rtol=0.0, **VADD_TASK)
    text = to_toml(data)
    assert tomllib.loads(text) == data
    (tmp_path / "vadd.cu").write_text(VADD)
    (tmp_path / "vadd.toml").write_text(text)
    loaded = load_spec(tmp_path / "vadd.toml", tmp_path / "vadd.cu")
    built = spec_from_arrays(VADD, vadd_args(), atol=1e-5, rtol=0.0, **VADD_TASK)
    assert loaded.args == built.args and loaded.tolerance("float32").atol == 1e-5
    assert loaded.tolerance("float32").rtol == 0.0


@pytest.mark.parametrize("change, message", [
    (dict(args=vadd_args()[:3]), "args= has 3 values but vadd takes 4 parameters (a, b, c, n)."),
    (dict(args=[vadd_args()[0].astype(np.complex64), *vadd_args()[1:]]),
     "args[0] (a) has dtype complex64, which is not supported (use one of float64,"),
    (dict(outputs=[]), "outputs= is missing: name the arrays vadd writes (e.g. outputs=['c'])"),
    (dict(outputs=["d"]), "outputs= names 'd', which is not a parameter of vadd (a, b, c, n;"),
    (dict(outputs=["n"]), "n is in outputs= but args[3] is a scalar"),
    (dict(outputs=["a"]), "the task from args=: args.a has role output but parameter 'a' is const (const float*)."),
    (dict(args=[*vadd_args()[:3], object()]), "args[3] (n) is a object; give a NumPy array"),
    (dict(grid=None), "grid= is missing"),
    (dict(entry="vsub"), "entry='vsub' is not a __global__ function in the source (found: vadd)."),
    (dict(inouts=["c"]), "c is in both outputs= and inouts=; an array is one or the other."),
    (dict(sizes={"N": 1000.0}), "sizes['N'] must be a whole number, not 1000.0."),
    (dict(sizes={"N": True}), "sizes['N'] must be a whole number, not True."),
    (dict(grid=[True]), "the task from args=: launch.grid[0] must be an integer or an expression string, not True."),
])
def test_each_mistake_is_one_sentence(change, message):
    kw = dict(VADD_TASK, args=vadd_args()) | change
    args = kw.pop("args")
    with pytest.raises(SpecError) as e:
        spec_from_arrays(VADD, args, **kw)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


MY_INT = VADD.replace("int n)", "my_int_t n)").replace("#define BLOCK 128", "#define BLOCK 128\ntypedef int my_int_t;")


@pytest.mark.parametrize("source, args, change, message", [
    (VADD + VADD.replace("vadd", "vsub"), None, {}, "the source has 2 __global__ functions (vadd, vsub); give entry=."),
    ("int x;", None, {}, "the source has 0 __global__ functions (none); give entry=."),
    (MY_INT, [*vadd_args()[:3], "N"], {}, "args[3] (n) is a string but vadd's parameter is my_int_t, whose dtype "
     "optiml does not know; give a NumPy scalar such as np.int32(...)."),
    (VADD, None, dict(atol=float("nan")), "nan is not a finite number; a spec holds finite numbers only."),
    (VADD, None, dict(flops=[1, complex(1, 2)]), "(1+2j) (complex) cannot be written into a spec."),
], ids=["two_kernels", "no_kernel", "a_string_for_a_type_not_known", "a_nan_tolerance", "a_count_not_a_number"])
def test_a_task_from_arrays_that_cannot_be_written_is_one_sentence(source, args, change, message):
    """The source's kernels, a scalar whose type is not known, and a value the spec file cannot hold."""
    with pytest.raises(SpecError) as e:
        to_toml(spec_data_from_arrays(source, vadd_args() if args is None else args, **(VADD_TASK | change)))
    assert str(e.value) == message


def test_numpy_integers_in_a_launch_list_are_plain_integers():
    data = spec_data_from_arrays(VADD, vadd_args(), **(VADD_TASK | dict(grid=[np.int64(8)], block=(np.int32(128),))))
    assert data["launch"]["grid"] == [8] and data["launch"]["block"] == [128]
    assert all(type(v) is int for v in data["launch"]["grid"] + data["launch"]["block"])


def test_a_bool_for_an_integer_parameter_is_its_integer():
    (n,) = [a for a in spec_from_arrays(VADD, [*vadd_args()[:3], True], **VADD_TASK).args if a.name == "n"]
    assert n.role == "scalar" and n.dtype == "int32" and n.value == 1


def test_the_api_refuses_mixed_forms_in_one_sentence(tmp_path):
    with pytest.raises(UserError, match="the kernel is CUDA source: give its arguments with args="):
        optiml.compile(VADD, arch="sm_90")
    kernel, spec = write(tmp_path)
    with pytest.raises(UserError, match="outputs= goes with args="):
        optiml.compile(kernel, outputs=["y"], arch="sm_90")
    with pytest.raises(UserError, match="unknown keyword blocks="):
        optiml.compile(VADD, args=vadd_args(), blocks=128, arch="sm_90", **VADD_TASK)
    with pytest.raises(UserError, match="give either spec= .* or args="):
        optiml.compile(VADD, spec, args=vadd_args(), arch="sm_90", **VADD_TASK)
    with pytest.raises(UserError, match=r"cannot write the task's files \(Not a directory\); give another workdir="):
        optiml.compile(VADD, args=vadd_args(), arch="sm_90", workdir=spec / "sub", **VADD_TASK)


def test_compile_from_arrays_and_from_files_with_nvcc(tmp_path):
    built = optiml.compile(VADD, args=vadd_args(), arch="sm_90", workdir=tmp_path / "w", **VADD_TASK)
    assert built.ok and built.status == "ok" and built.resources.registers > 0 and built.spec.entry == "vadd"
    assert (tmp_path / "w" / "vadd.cu").read_text() == VADD
    assert tomllib.loads((tmp_path / "w" / "vadd.toml").read_text())["kernel"]["entry"] == "vadd"
    kernel, _ = write(tmp_path)
    built = optiml.compile(str(kernel), arch="sm_90")
    assert built.ok and built.spec.entry == "scale" and built.build.arch == "sm_90"
    broken = optiml.compile(VADD.replace("a[i] + b[i]", "a[i] + q[i]"), args=vadd_args(), arch="sm_90", **VADD_TASK)
    assert not broken.ok and broken.status == "compile_error" and "q" in broken.build.log


def test_a_temporary_task_folder_is_removed(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    optiml.compile(VADD, args=vadd_args(), arch="sm_90", **VADD_TASK)
    assert list(tmp_path.iterdir()) == []


def module_reference(a, b, n):
    return a + b


@pytest.mark.parametrize("reference", [module_reference, lambda a, b, n: a + b])
def test_a_python_reference_reaches_the_gpu_childs_loader_in_a_fresh_interpreter(tmp_path, reference):
    """The reference is pickled beside a small module that the GPU child loads by file, as the
    spec's reference.python: a module function by reference (its package's folder put on the
    path), a lambda by value. The child's own loader runs it in a new Python, outside the repo."""
    from optiml.app.api import task_files

    files = task_files(VADD, args=vadd_args(), workdir=tmp_path / "w", reference=reference, **VADD_TASK)
    assert tomllib.loads(files.spec.read_text())["reference"]["python"].endswith("vadd_reference.py:reference")
    code = ("import sys, numpy as np; from pathlib import Path; from optiml.spec import load_spec; "
            "from optiml.verify.inputs import make_case; from optiml.verify.worker import _python_reference, _python_outputs; "
            f"spec = load_spec(Path({str(files.spec)!r}), Path({str(files.kernel)!r})); "
            "data = make_case(spec, {'N': 77}, 5); out = _python_outputs(_python_reference(spec), spec, data); "
            "assert np.array_equal(out['c'], data.arrays['a'] + data.arrays['b']); print('same')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "same", r.stderr


class FakeEvalWorker(FakeBlockWorker):
    """The FAKE GPU worker (median BLOCK / 100 ms), keeping the jobs it was given; untimed when asked."""
    jobs: list = []

    def run(self, job, lend=None):
        FakeEvalWorker.jobs.append(job)
        result = super().run(job, lend)
        if not job.time_it:
            result.timing = None
        return result


@pytest.fixture
def fake_eval_gpu(monkeypatch):
    """``optiml eval``'s GPU child replaced by the FAKE worker."""
    import optiml.gpus as gpus
    import optiml.verify.harness as harness

    monkeypatch.setattr(gpus, "require_gpu", lambda command: None)
    monkeypatch.setattr(harness, "SubprocessHarness", FakeEvalWorker)
    FakeEvalWorker.jobs = []


def test_evaluate_from_arrays_with_a_fake_gpu_worker(fake_eval_gpu):
    result = optiml.evaluate(VADD, args=vadd_args(), arch="sm_90", **VADD_TASK)
    assert result.ok and result.status == "ok" and result.median_ms == pytest.approx(1.28)
    assert result.evaluation.build.arch == "sm_90" and result.to_dict()["status"] == "ok"
    slower = optiml.evaluate(VADD.replace("BLOCK 128", "BLOCK 512"), args=vadd_args(), arch="sm_90", **VADD_TASK)
    assert slower.median_ms == pytest.approx(5.12)


def test_evaluate_of_a_kernel_file_is_what_the_cli_prints(tmp_path, fake_eval_gpu):
    """``optiml eval`` is a thin layer over app.evaluate.evaluate_kernel, which the API calls too."""
    from click.testing import CliRunner

    from optiml.cli import main

    kernel, _ = write(tmp_path)
    result = optiml.evaluate(kernel, arch="sm_90", time_it=False, seed=11)
    assert result.ok and result.spec.entry == "scale" and result.median_ms is None
    assert [j.time_it for j in FakeEvalWorker.jobs] == [False] and result.evaluation.seed == 11
    r = CliRunner().invoke(main, ["eval", str(kernel), "--arch", "sm_90"])
    assert r.exit_code == 0 and f"kernel    {kernel} (entry scale, sm_90)" in r.output
    assert "timing    1.2800 ms median" in r.output


def test_optimize_from_arrays_with_fake_gpu_parts(tmp_path, fake_gpu):
    FakeSanitizer.under = 64
    db = tmp_path / "runs.db"
    result = optiml.optimize(VADD, args=vadd_args(), budget=4, profile=False, db=db, arch="sm_90",
                             options={"parallel": 2, "build_jobs": 1}, **VADD_TASK)
    assert result.db == db and result.run_id == 1 and result.evaluations >= 1
    assert result.speedup == pytest.approx(result.final["speedup"]) and result.speedup > 1
    block = int(result.best_source.split("#define BLOCK ")[1].split()[0])
    assert block >= 64 and result.speedup == pytest.approx(128 / block)
    assert result.flags[:2] == ("-arch=sm_90", "-O3")
    assert result.kernel.parent.parent == tmp_path / "optiml_tasks" and result.kernel.name == "vadd.cu"
    df = result.trajectory
    for col in ("node_id", "parent_id", "depth", "edit", "eval_status", "median_ms", "speedup", "is_best"):
        assert col in df.columns
    assert len(df) == result.evaluations + 1 and df["is_best"].sum() == 1
    best = df[df["is_best"]].iloc[0]
    assert best["node_id"] == result.final["best_node"]
    assert best["median_ms"] == pytest.approx(block / 100)
    root = df[df["parent_id"].isna()].iloc[0]
    assert root["median_ms"] == pytest.approx(1.28) and root["depth"] == 0


def test_optimize_refuses_an_unknown_option_before_any_work(tmp_path):
    with pytest.raises(UserError, match="options: unknown option 'paralel'"):
        optiml.optimize(VADD, args=vadd_args(), db=tmp_path / "t.db", options={"paralel": 2}, **VADD_TASK)
    assert not (tmp_path / "t.db").exists()


def test_import_optiml_stays_light():
    code = ("import sys, optiml; f = optiml.optimize; "
            "heavy = [m for m in ('pandas', 'pycuda', 'openai', 'sqlite_utils') if m in sys.modules]; "
            "assert not heavy, heavy; assert callable(f) and 'evaluate' in dir(optiml)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_example_in_docs_api_md_runs_with_fake_gpu_parts(tmp_path, monkeypatch, fake_gpu, fake_eval_gpu, capsys):
    text = (ROOT / "docs" / "api.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    import optiml.gpus as gpus

    monkeypatch.setattr(gpus, "compute_capability", lambda: "sm_90")    # the FAKE GPU's, for arch=None
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/api.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ok ") and out[0].endswith(" registers") and out[1] == "ok 1.28 ms"
    assert out[2].endswith("x -arch=sm_90 -O3") and "#define BLOCK" in "\n".join(out)
    assert (tmp_path / "optiml.db").is_file() and len(list((tmp_path / "optiml_tasks").iterdir())) == 1


def test_torch_tensors_give_dtypes_and_shapes():
    torch = pytest.importorskip("torch")
    x = torch.ones(64, 8, dtype=torch.bfloat16)
    src = "__global__ void k(const __nv_bfloat16* x, __nv_bfloat16* y, int n) {}"
    spec = spec_from_arrays(src, [x, torch.empty(64, 8, dtype=torch.bfloat16), 512], outputs=["y"], grid=1, block=64)
    assert [(a.dtype, a.shape) for a in spec.args[:2]] == [("bfloat16", ("N0", "N1"))] * 2


def test_a_kernel_that_does_not_compile_is_a_verdict_with_nvccs_sentence(fake_eval_gpu):
    """No GPU job for a kernel nvcc refuses: its status and message say why, as `optiml eval` does."""
    result = optiml.evaluate(VADD + "\nthis_is_not_cuda x;\n", args=vadd_args(), arch="sm_90", **VADD_TASK)
    assert not result.ok and result.status == "compile_error" and FakeEvalWorker.jobs == []
    assert "this_is_not_cuda" in result.message and result.message == result.evaluation.message
    assert result.median_ms is None


def test_evals_lines_say_the_build_the_verdict_and_the_rates(tmp_path, fake_eval_gpu):
    """`optiml eval` as printed: nvcc's warnings under the build line, a kernel nvcc refuses with its
    status, its log and exit 3, both rates a spec's counts give, and --json the same evaluation.
    The GPU worker is the FAKE (1.28 ms at BLOCK 128)."""
    import json

    from click.testing import CliRunner

    from optiml.cli import main
    from tests.test_spec import KERNEL, SPEC

    run = lambda k, *a: CliRunner().invoke(main, ["eval", str(k), "--arch", "sm_90", *a])
    k, _ = write(tmp_path, SPEC.replace('bytes = "8 * N"', 'bytes = "8 * N"\nflops = "1000 * N"'),
                 KERNEL.replace("if (i < n)", "int unused_here = 3; if (i < n)"))
    r = run(k)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    build = next(i for i, ln in enumerate(lines) if ln.startswith("build     ok"))
    assert lines[build + 1].startswith("          ") and "unused_here" in lines[build + 1]
    assert "timing    1.2800 ms median" in r.output and ": 819 GFLOP/s, 6.6 GB/s" in r.output
    as_json = run(k, "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.output)["status"] == "ok"
    (tmp_path / "b").mkdir()
    broken, _ = write(tmp_path / "b", SPEC, KERNEL.replace("alpha * x[i]", "alpha * x[i] + not_declared"))
    r = run(broken)
    assert r.exit_code == 3 and "status    compile_error" in r.output and "not_declared" in r.output
    assert '1 error detected in the compilation of "scale.cu"' in r.output        # nvcc's log, whole
    assert json.loads(run(broken, "--json").output)["status"] == "compile_error"


def test_a_key_that_is_not_a_bare_toml_key_is_written_quoted():
    """to_toml reads back as the same dict whatever the keys: a space, a dash, a letter outside ASCII."""
    data = {"kernel": {"entry": "k"}, "sizes": {"timing": {"a b": 1, "rows-n": 2, "é": 3, "ok_1": 4}}}
    text = to_toml(data)
    assert tomllib.loads(text) == data
    assert 'timing = { "a b" = 1, "rows-n" = 2, "\\u00e9" = 3, ok_1 = 4 }' in text
