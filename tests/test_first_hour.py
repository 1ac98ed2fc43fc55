"""A newcomer's first hour: every mistake is one sentence (exit 1, no traceback)."""
import os
import re
import shutil

import pytest
from click.testing import CliRunner

from optiml.cli import main
from tests.conftest import EXAMPLES, assert_one_sentence_error

TRANSPOSE = EXAMPLES / "transpose_naive" / "transpose_naive.cu"


def run(*args, env=None):
    return CliRunner().invoke(main, list(map(str, args)), env=env)


def copy_example(tmp_path, name="transpose_naive"):
    for f in (EXAMPLES / name).iterdir():
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / f"{name}.cu"


# ------------------------------------------------------------------ 1. no tracebacks


def test_build_with_a_cache_dir_that_is_a_file_says_so(tmp_path):
    r = run("build", TRANSPOSE, "--arch", "sm_90", env={"OPTIML_CACHE_DIR": "/dev/null"})
    assert_one_sentence_error(r, "/dev/null", "OPTIML_CACHE_DIR")


def test_build_with_a_cache_dir_that_cannot_be_created_says_so(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = run("build", TRANSPOSE, "--arch", "sm_90", env={"OPTIML_CACHE_DIR": str(blocker / "cache")})
    assert_one_sentence_error(r, str(blocker / "cache"), "OPTIML_CACHE_DIR")


def test_init_into_a_missing_folder_says_so(tmp_path):
    r = run("init", TRANSPOSE, "-o", tmp_path / "nonexistent" / "x.toml")
    assert_one_sentence_error(r, "x.toml", "cannot write")


def test_init_onto_a_folder_says_so_even_with_force(tmp_path):
    (tmp_path / "d").mkdir()
    r = run("init", TRANSPOSE, "-o", tmp_path / "d", "--force")
    assert_one_sentence_error(r, "is a folder")


def test_init_in_a_read_only_folder_says_so(tmp_path):
    k = copy_example(tmp_path)
    (tmp_path / "transpose_naive.toml").unlink()
    tmp_path.chmod(0o555)
    try:
        if os.access(tmp_path, os.W_OK):
            pytest.skip("running as root: a read-only folder is writable anyway")
        r = run("init", k)
        assert_one_sentence_error(r, "cannot write")
    finally:
        tmp_path.chmod(0o755)


def test_init_that_may_not_write_says_so(tmp_path, monkeypatch):
    """The read-only folder as root sees it: the write is refused (PermissionError)."""
    from pathlib import Path

    def refuse(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refuse)
    r = run("init", TRANSPOSE, "-o", tmp_path / "x.toml")
    assert_one_sentence_error(r, "x.toml", "Permission denied")


# ------------------------------------------------------------------ 3. wrong or inconsistent answers


def test_an_unreadable_kernel_is_one_sentence(tmp_path, monkeypatch):
    k = copy_example(tmp_path)
    from pathlib import Path

    real = Path.read_text

    def refuse(self, *a, **kw):
        if self.name == k.name:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", refuse)
    r = run("build", k, "--arch", "sm_90")
    assert_one_sentence_error(r, k.name, "cannot read the kernel", "Permission denied")


def test_a_chmod_000_kernel_is_one_sentence(tmp_path):
    k = copy_example(tmp_path)
    k.chmod(0)
    try:
        if os.access(k, os.R_OK):
            pytest.skip("running as root: a chmod 000 file is readable anyway")
        assert_one_sentence_error(run("build", k, "--arch", "sm_90"), "cannot read the kernel")
    finally:
        k.chmod(0o644)


def test_a_folder_given_as_the_kernel_is_called_a_folder():
    assert_one_sentence_error(run("build", TRANSPOSE.parent, "--arch", "sm_90"), "is a folder")


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
@pytest.mark.parametrize("command", ["build", "eval", "profile", "optimize"])
def test_a_timeout_that_is_not_positive_is_refused(command, value):
    r = run(command, TRANSPOSE, "--arch", "sm_90", "--timeout", value)
    assert_one_sentence_error(r, "--timeout must be a positive number")


def test_an_architecture_nvcc_does_not_know_is_an_arch_error(tmp_path):
    r = run("build", TRANSPOSE, "--arch", "sm_999", env={"OPTIML_CACHE_DIR": str(tmp_path)})
    assert_one_sentence_error(r, "--arch sm_999", "does not know")


def test_build_and_eval_say_the_same_sentence_without_a_gpu(tmp_path):
    env = {"PATH": str(tmp_path), "OPTIML_CACHE_DIR": str(tmp_path)}   # no nvidia-smi on it
    b, e = run("build", TRANSPOSE, env=env), run("eval", TRANSPOSE, env=env)
    assert_one_sentence_error(b, "no GPU was found", "--arch")
    assert_one_sentence_error(e, "no GPU was found", "--arch")
    assert b.output == e.output


TEMPLATE = """
template <typename T>
__global__ void fill(T* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = T(1); }
"""


def _init_then(tmp_path, name, source, *build):
    k = tmp_path / f"{name}.cu"
    k.write_text(source)
    assert run("init", k).exit_code == 0
    # -q: the draft's TODO warning aside
    return run("-q", "build", k, "--arch", "sm_90", *build, env={"OPTIML_CACHE_DIR": str(tmp_path / "cache")})


def test_a_template_entry_never_instantiated_is_said_so(tmp_path):
    r = _init_then(tmp_path, "t0", TEMPLATE)
    assert_one_sentence_error(r, "'fill' is a template that the source never instantiates")


def test_a_template_entry_instantiated_twice_is_refused_naming_both(tmp_path):
    src = TEMPLATE + ("template __global__ void fill<float>(float*, int);\n"
                      "template __global__ void fill<int>(int*, int);\n")
    r = _init_then(tmp_path, "t2", src)
    assert_one_sentence_error(r, "instantiated 2 times", "fill<float>", "fill<int>")


def test_one_instantiation_of_a_template_entry_builds(tmp_path):
    r = _init_then(tmp_path, "t1", TEMPLATE + "template __global__ void fill<float>(float*, int);\n")
    assert r.exit_code == 0 and "registers" in r.output, r.output


def test_unnamed_parameters_get_distinct_names_and_the_draft_loads(tmp_path):
    from optiml.source import parse_source

    params = parse_source("__global__ void k(const float*, float*, int) {}").kernels[0].params
    assert [(p.name, p.is_pointer, p.is_const) for p in params] == [("arg0", True, True), ("arg1", True, False),
                                                                     ("arg2", False, False)]
    r = _init_then(tmp_path, "unnamed", "__global__ void k(const float*, float* y, int) {}\n")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("c_decl, spec_from, spec_to, c_dtype", [
    ("int* x, int n", 'dtype = "int32"\nrole = "output"', 'dtype = "float32"\nrole = "output"', "int32"),
    ("float* x, float a", 'dtype = "float32"\nrole = "scalar"', 'dtype = "int32"\nrole = "scalar"', "float32"),
])
def test_a_same_size_type_mismatch_is_refused(tmp_path, c_decl, spec_from, spec_to, c_dtype):
    k = tmp_path / "k.cu"
    k.write_text(f"__global__ void k({c_decl}) {{ x[0] = 1; }}\n")
    assert run("init", k).exit_code == 0
    spec = tmp_path / "k.toml"
    assert spec_from in spec.read_text()
    spec.write_text(spec.read_text().replace(spec_from, spec_to))
    r = run("build", k, "--arch", "sm_90", env={"OPTIML_CACHE_DIR": str(tmp_path / "cache")})
    wrong = spec_to.split('"')[1]
    assert_one_sentence_error(r, f"has dtype {wrong}", f"({c_dtype})")


# ------------------------------------------------------------------ 4. a spec with TODO lines


@pytest.mark.parametrize("command", ["build", "eval", "profile", "optimize"])
def test_a_spec_still_marked_todo_is_warned_about(tmp_path, command):
    k = copy_example(tmp_path)
    assert run("init", k, "--force").exit_code == 0          # the draft: every guess marked TODO
    r = run(command, k, "--arch", "sm_90", env={"OPTIML_CACHE_DIR": str(tmp_path / "cache"), "PATH": os.environ["PATH"]})
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("WARNING")]
    assert len(warnings) == 1 and "transpose_naive.toml" in warnings[0] and "still marked TODO" in warnings[0], r.output


def test_a_finished_spec_is_not_warned_about(tmp_path):
    k = copy_example(tmp_path)
    r = run("build", k, "--arch", "sm_90", env={"OPTIML_CACHE_DIR": str(tmp_path / "cache")})
    assert r.exit_code == 0 and "TODO" not in r.output, r.output


# ------------------------------------------------------------------ 5. optiml doctor


def test_doctor_reports_each_tool_on_this_machine(tmp_path):
    """nvcc is here and no GPU is (as on CI): every line says ok or missing, exit 0; the key is never shown."""
    import shutil as sh

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvcc").symlink_to(sh.which("nvcc"))          # nvcc, and no nvidia-smi, ncu or compute-sanitizer
    env = {"PATH": str(bindir), "OPTIML_NVCC": None, "OPTIML_COMPUTE_SANITIZER": None,
           "OPTIML_LLM_API_KEY": "sk-very-secret", "OPTIML_LLM_MODEL": "qwen2.5-coder:32b",
           "OPTIML_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    from optiml.build import nvcc_path
    nvcc_path.cache_clear()
    try:
        r = run("doctor", env=env)
        strict = run("doctor", "--strict", env=env)
    finally:
        nvcc_path.cache_clear()
    assert r.exit_code == 0, r.output
    lines = {ln.split()[0]: ln for ln in r.output.splitlines()}
    assert set(lines) == {"nvcc", "ncu", "compute-sanitizer", "pycuda", "torch", "cupy", "GPUs", "LLM"}, r.output
    assert lines["nvcc"].split()[1] == "ok" and re.search(r"\(\d+\.\d+", lines["nvcc"]), lines["nvcc"]
    assert lines["GPUs"].split()[1] == "missing" and "--arch" in lines["GPUs"]
    assert lines["ncu"].split()[1] == "missing" and "install" in lines["ncu"]
    assert "qwen2.5-coder:32b" in lines["LLM"] and "API key set" in lines["LLM"] and "http://127.0.0.1:9/v1" in lines["LLM"]
    assert "sk-very-secret" not in r.output
    assert strict.exit_code == 1 and strict.output == r.output


def test_eval_and_optimize_say_the_same_template_sentence_as_build(tmp_path):
    """The runner's Preparer (eval, profile, optimize) refuses a template entry instantiated twice
    with build's sentence, not "the cubin has no entry"."""
    from optiml.build import NvccBuilder
    from optiml.runner import Candidate, Preparer
    from optiml.spec import load_spec

    src = TEMPLATE + ("template __global__ void fill<float>(float*, int);\n"
                      "template __global__ void fill<int>(int*, int);\n")
    k = tmp_path / "t2.cu"
    k.write_text(src)
    assert run("init", k).exit_code == 0
    spec = load_spec(tmp_path / "t2.toml" if (tmp_path / "t2.toml").exists() else tmp_path / "kernel.toml", k)
    prep = Preparer(spec, src, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    kb, ev = prep.build(Candidate(src))
    assert kb is None and ev.status == "compile_error" and "instantiated 2 times" in ev.message, ev.message


def test_doctor_strict_does_not_count_the_optional_libraries(monkeypatch):
    import optiml.cli.doctor as doctor

    rows = [("nvcc", True, "x"), ("torch", False, "not installed; optional: only for Python references that use it"),
            ("cupy", False, "not installed; optional: only for Python references that use it")]
    monkeypatch.setattr(doctor, "checks", lambda: rows)
    assert run("doctor", "--strict").exit_code == 0
    monkeypatch.setattr(doctor, "checks", lambda: rows + [("GPUs", False, "none found")])
    assert run("doctor", "--strict").exit_code == 1
