"""Spec loading: the happy path and one clear sentence for each user error."""
from pathlib import Path

import pytest

from optiml.errors import SpecError
from optiml.source import parse_source
from optiml.spec import find_spec, load_spec

KERNEL = """
#define BLOCK 128
__global__ void scale(const float* x, float* y, int n, float alpha) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}
"""

SPEC = """
[kernel]
entry = "scale"

[sizes]
timing = { N = 1048576 }
verify = [{ N = 1000 }, { N = 77 }]

[[args]]
name = "x"
dtype = "float32"
role = "input"
shape = ["N"]
init = { dist = "uniform", low = -2.0, high = 2.0 }

[[args]]
name = "y"
dtype = "float32"
role = "output"
shape = ["N"]

[[args]]
name = "n"
dtype = "int32"
role = "scalar"
value = "N"

[[args]]
name = "alpha"
dtype = "float32"
role = "scalar"
value = 0.5

[launch]
grid = ["cdiv(N, BLOCK)"]
block = ["BLOCK"]

[counts]
bytes = "8 * N"
"""


def write(tmp_path: Path, spec: str = SPEC, kernel: str = KERNEL) -> tuple[Path, Path]:
    k = tmp_path / "scale.cu"
    k.write_text(kernel)
    s = tmp_path / "scale.toml"
    s.write_text(spec)
    return k, s


def load(tmp_path, spec=SPEC, kernel=KERNEL):
    k, s = write(tmp_path, spec, kernel)
    return load_spec(s, k)


def test_loads_and_resolves_launch_from_kernel_macros(tmp_path):
    spec = load(tmp_path)
    assert spec.entry == "scale"
    assert [a.role for a in spec.args] == ["input", "output", "scalar", "scalar"]
    launch = spec.resolve_launch({"N": 1000}, parse_source(KERNEL))
    assert launch.grid == (8, 1, 1) and launch.block == (128, 1, 1) and launch.shared_mem == 0
    # a candidate that changes the macro changes its launch
    launch = spec.resolve_launch({"N": 1000}, parse_source(KERNEL.replace("BLOCK 128", "BLOCK 256")))
    assert launch.grid == (4, 1, 1) and launch.block == (256, 1, 1)
    assert spec.count("bytes", {"N": 10}) == 80
    assert spec.tolerance("float32").atol == 1e-4        # documented default
    assert spec.tolerance("int32").atol == 0.0


def test_source_launch_comment_overrides_spec(tmp_path):
    spec = load(tmp_path)
    variant = "// optiml:launch {grid = [\"cdiv(N, 4 * BLOCK)\"]}\n" + KERNEL
    launch = spec.resolve_launch({"N": 1024}, parse_source(variant))
    assert launch.grid == (2, 1, 1) and launch.block == (128, 1, 1)


def test_tolerance_override(tmp_path):
    spec = load(tmp_path, SPEC + "\n[tolerance]\nfloat32 = { atol = 0.5 }\n")
    assert spec.tolerance("float32").atol == 0.5 and spec.tolerance("float32").rtol == 1e-4


def test_python_reference_resolved_beside_spec(tmp_path):
    (tmp_path / "ref.py").write_text("def scale(x, n, alpha):\n    return alpha * x\n")
    spec = load(tmp_path, SPEC + '\n[reference]\npython = "ref.py:scale"\n')
    assert spec.reference.kind == "python" and spec.reference.function == "scale"
    assert spec.reference.path == (tmp_path / "ref.py").resolve()


def test_a_python_reference_in_a_folder_whose_name_holds_a_colon(tmp_path):
    """Only the last colon parts the file from the function."""
    (tmp_path / "refs:v2").mkdir()
    (tmp_path / "refs:v2" / "ref.py").write_text("def scale(x, n, alpha):\n    return alpha * x\n")
    spec = load(tmp_path, SPEC + '\n[reference]\npython = "refs:v2/ref.py:scale"\n')
    assert spec.reference.function == "scale"
    assert spec.reference.path == (tmp_path / "refs:v2" / "ref.py").resolve()


def test_find_spec_points_to_init(tmp_path):
    k = tmp_path / "scale.cu"
    k.write_text(KERNEL)
    with pytest.raises(SpecError, match=r"no task spec found .*optiml init"):
        find_spec(k)
    with pytest.raises(SpecError, match="spec file not found"):
        find_spec(k, tmp_path / "other.toml")


@pytest.mark.parametrize("edit,message", [
    (("[kernel]", "[kernal]"), "unknown key 'kernal'"),
    (('entry = "scale"', 'entry = "scael"'), r"kernel.entry 'scael' is not a __global__ function .*found: scale"),
    (('dtype = "float32"\nrole = "input"', 'dtype = "float8"\nrole = "input"'), r"args.x.dtype 'float8' is not supported"),
    (("timing = { N = 1048576 }", "timing = { N = 0 }"), r"sizes.timing.N must be positive"),
    (("timing = { N = 1048576 }", "timing = { N = -5 }"), r"sizes.timing.N must be positive"),
    (("timing = { N = 1048576 }", 'timing = { N = "big" }'), r"sizes.timing.N must be a whole number"),
    (("verify = [{ N = 1000 }, { N = 77 }]", "verify = [{ N = 1000 }]"), "needs at least two size sets"),
    (('grid = ["cdiv(N, BLOCK)"]', 'grid = ["cdiv(N, TILE)"]'), r"launch.grid\[0\]: unknown name 'TILE'"),
    (('shape = ["N"]\ninit', 'shape = ["N * Q"]\ninit'), r"args.x.shape\[0\]: unknown name 'Q'"),
    (('role = "output"', 'role = "result"'), r"args.y.role must be one of"),
    (('value = 0.5', 'value = "alpha"'), r"args.alpha.value: unknown name 'alpha'"),
    (('dist = "uniform", low = -2.0, high = 2.0', 'dist = "gaussian"'), r"args.x.init.dist must be one of"),
    (('dist = "uniform", low = -2.0, high = 2.0', 'dist = "uniform", low = 2.0, high = 1.0'), "must be greater than low"),
    (('block = ["BLOCK"]', 'block = ["BLOCK", 1, 1, 1]'), "1 to 3 dimensions"),
    (('block = ["BLOCK"]', 'block = ["BLOCK - 128"]'), "must be positive"),
    (('role = "output"', 'role = "input"'), "nothing to verify"),
    # values that used to load and fail later, in the GPU child or the timer
    (('value = "N"', "value = 1e300"), r"args.n.value is 1e\+300, outside the range of int32 \(-2147483648 to 2147483647\)"),
    (('value = "N"', 'value = "N * 4096"'), r"args.n.value = 'N \* 4096' is 4294967296 at sizes \{'N': 1048576\}, outside the range of int32"),
    (('value = 0.5', "value = 1e39"), r"args.alpha.value is 1e\+39, outside the range of float32"),
    (('value = 0.5', "value = nan"), r"args.alpha.value is nan; it must be a finite number"),
    (('dist = "uniform", low = -2.0, high = 2.0', 'dist = "normal", std = nan'), r"args.x.init.std must be a finite number, not nan"),
    (('dist = "uniform", low = -2.0, high = 2.0', 'dist = "normal", mean = inf'), r"args.x.init.mean must be a finite number, not inf"),
    (('dist = "uniform", low = -2.0, high = 2.0', 'dist = "normal", std = 0'), r"args.x.init.std must be positive"),
    (('low = -2.0, high = 2.0', 'low = -2.0, high = inf'), r"args.x.init.high must be a finite number, not inf"),
    (('low = -2.0, high = 2.0', 'low = -3e38, high = 3e38'), r"args.x.init.high is too far from low: high - low must be at most 3.40282e\+38"),
    (('low = -2.0, high = 2.0', 'low = -2.0, high = 1e39'), r"args.x.init.high must lie between .* for float32, not 1e\+39"),
    (('dist = "uniform", low = -2.0, high = 2.0', 'dist = "constant", value = 1e39'), r"args.x.init.value must lie between"),
    (('dist = "uniform", low = -2.0, high = 2.0', 'dist = "integers", low = 0, high = 1e30'),
     r"args.x.init.high must lie between -2\*\*63 and 2\*\*63"),
    (('shape = ["N"]\ninit', 'shape = ["2**62"]\ninit'),
     r"args.x.shape = \['2\*\*62'\] at sizes \{'N': 1048576\} needs more than 2\*\*40 bytes \(1 TiB\) of float32"),
    (('shape = ["N"]\ninit', 'shape = ["N", "N", "N"]\ninit'), r"args.x.shape = .* needs more than 2\*\*40 bytes"),
    (('shape = ["N"]\ninit', 'shape = ["2**38 + 1"]\ninit'), r"args.x.shape = .* needs more than 2\*\*40 bytes"),
    (("timing = { N = 1048576 }", "timing = { N = 9223372036854775808 }"), r"sizes.timing.N must be at most 2\*\*63 - 1"),
    (('bytes = "8 * N"', 'bytes = "-8 * N"'), r"counts.bytes = '-8 \* N' is -8388608 at sizes \{'N': 1048576\}; it must be zero or positive"),
    (('grid = ["cdiv(N, BLOCK)"]', 'grid = ["cdiv(N, BLOCK)", 65536]'),
     r"launch.grid\[1\] = 65536 evaluates to 65536 at sizes .*; CUDA allows at most 65535 in grid dimension y"),
    (('grid = ["cdiv(N, BLOCK)"]', 'grid = ["N * N * N"]'), r"CUDA allows at most 2147483647 in grid dimension x"),
    (('block = ["BLOCK"]', 'block = ["BLOCK", 1, 65]'), r"launch.block\[2\] = 65 .*CUDA allows at most 64 in block dimension z"),
    (('block = ["BLOCK"]', 'block = ["BLOCK"]\nshared_mem = "2**32"'), r"launch.shared_mem evaluates to 4294967296 .*at most 4294967295 bytes"),
    (('name = "y"', 'name = "x"'), r"args: the name 'x' is used twice\."),
    (('role = "scalar"\nvalue = 0.5', 'role = "scalar"\nvalue = 0.5\nshape = ["N"]'),
     r"args.alpha.shape is not allowed on a scalar; give value = <number or expression>\."),
    (('role = "output"\nshape = ["N"]', 'role = "output"\nshape = ["N"]\nvalue = 3'),
     r"args.y.value is only for scalars; an output array takes shape and init\."),
    (('role = "output"\nshape = ["N"]', 'role = "output"\nshape = ["N"]\ninit = { dist = "normal" }'),
     r"args.y.init is not used for outputs \(they are poisoned before every launch\)\."),
    (('dist = "uniform", low = -2.0, high = 2.0', 'dist = "integers", low = 0.5, high = 4'),
     r"args.x.init.low integers needs whole-number bounds\."),
    (("verify = [{ N = 1000 }, { N = 77 }]", "verify = [{ N = 1000 }, { N = 77 }]\n[timing]\nwarmup_ms = -1"),
     r"timing.warmup_ms must be zero or positive\."),
    (("verify = [{ N = 1000 }, { N = 77 }]", "verify = [{ N = 1000 }, { N = 77 }]\n[timing]\ntarget_ms = -0.5"),
     r"timing.target_ms must be zero or positive\."),
    (("timing = { N = 1048576 }", "timing = {}"), r"sizes.timing must be a non-empty table of named sizes, e.g. \{N = 4096\}\."),
])
def test_user_errors_are_one_sentence_naming_the_field(tmp_path, edit, message):
    old, new = edit
    assert old in SPEC
    with pytest.raises(SpecError, match=message) as e:
        load(tmp_path, SPEC.replace(old, new, 1))
    assert "\n" not in str(e.value)
    assert str(tmp_path / "scale.toml") in str(e.value)


def test_malformed_toml(tmp_path):
    with pytest.raises(SpecError, match="not valid TOML"):
        load(tmp_path, SPEC + "\n[[args\n")


def test_arguments_must_match_parameters(tmp_path):
    fewer = SPEC.split("[[args]]\nname = \"alpha\"")[0] + SPEC.split("value = 0.5")[1]
    with pytest.raises(SpecError, match=r"lists 3 arguments but scale .* takes 4 \(x, y, n, alpha\)"):
        load(tmp_path, fewer)
    with pytest.raises(SpecError, match=r"args.x is an array \(input\) but parameter 'n' of scale is a scalar"):
        load(tmp_path, SPEC, KERNEL.replace("const float* x, float* y, int n", "int n, const float* x, float* y"))
    with pytest.raises(SpecError, match=r"dtype float32 but parameter 'x' of scale is const double\*"):
        load(tmp_path, SPEC, KERNEL.replace("const float* x", "const double* x"))
    with pytest.raises(SpecError, match=r"role output but parameter 'y' is const"):
        load(tmp_path, SPEC, KERNEL.replace("float* y", "const float* y"))


def test_missing_kernel_file(tmp_path):
    _, s = write(tmp_path)
    with pytest.raises(SpecError, match="kernel file not found"):
        load_spec(s, tmp_path / "nope.cu")


def test_unreadable_spec_or_kernel_is_one_sentence(tmp_path):
    k, s = write(tmp_path)
    with pytest.raises(SpecError, match=r"^" + str(tmp_path) + r": cannot read the spec \(Is a directory\)\.$"):
        load_spec(tmp_path)
    with pytest.raises(SpecError, match=r": cannot read the kernel \(Is a directory\)\.$"):
        load_spec(s, tmp_path)


def test_one_verification_trial_is_rejected_and_says_why(tmp_path):
    """With one input set per size, a kernel that caches its output per size passes verification."""
    for trials in (2, 100):
        assert load(tmp_path, SPEC + f"\n[verify]\ntrials = {trials}\n").verify.trials == trials
    with pytest.raises(SpecError, match=r"verify.trials must be at least 2: .*caches its output per size") as e:
        load(tmp_path, SPEC + "\n[verify]\ntrials = 1\n")
    assert "\n" not in str(e.value) and str(tmp_path / "scale.toml") in str(e.value)
    for trials in (0, -1, 101):
        with pytest.raises(SpecError, match=rf"verify.trials must be between 2 and 100, not {trials}\."):
            load(tmp_path, SPEC + f"\n[verify]\ntrials = {trials}\n")


def test_launch_beyond_cuda_limits_is_a_launch_error(tmp_path):
    """A candidate's launch comment beyond CUDA's grid or block limits: resolve_launch raises a
    SpecError, which the pipeline records as launch_config_error before building anything."""
    from optiml.runner import Candidate, Runner
    from tests.fakes import FakeHarness

    spec = load(tmp_path)
    for table, message in [('{grid = ["cdiv(N, BLOCK)", 65536]}', "CUDA allows at most 65535 in grid dimension y"),
                           ('{grid = [2147483648]}', "CUDA allows at most 2147483647 in grid dimension x"),
                           ('{block = [1, 1, 65]}', "CUDA allows at most 64 in block dimension z"),
                           ('{block = [2048]}', "CUDA allows at most 1024 in block dimension x")]:
        variant = f"// optiml:launch {table}\n" + KERNEL
        with pytest.raises(SpecError, match=rf"kernel source line 1 \(// optiml:launch\)\..*{message}"):
            spec.resolve_launch({"N": 1000}, parse_source(variant))

        class Untouched(FakeHarness):
            arch = None

            def build(self, *a, **k):
                raise AssertionError("a launch error must stop the candidate before the build")
            run = build
        r = Runner.sequential(spec, KERNEL, Untouched(), Untouched()).evaluate(Candidate(variant))
        assert r.status == "launch_config_error" and message in r.message, (r.status, r.message)
    edge = '// optiml:launch {grid = [2147483647, 65535, 65535], block = [1, 1, 64]}\n' + KERNEL
    launch = spec.resolve_launch({"N": 1000}, parse_source(edge))
    assert launch.grid == (2**31 - 1, 65535, 65535) and launch.block == (1, 1, 64)


def test_a_shape_naming_every_size_is_checked_before_the_source_is_read(tmp_path):
    """parse_spec (no kernel read yet) checks each expression that names only sizes, all of them
    included: N - 2000 is negative at the verification size N = 1000."""
    import tomllib

    from optiml.spec.load import parse_spec
    data = tomllib.loads(SPEC.replace('shape = ["N"]\ninit', 'shape = ["N - 2000"]\ninit'))
    with pytest.raises(SpecError, match=r"args\.x\.shape\[0\] = 'N - 2000' is -1000 at sizes \{'N': 1000\}; it must be positive"):
        parse_spec(data, tmp_path / "scale.toml")


@pytest.mark.parametrize("dim, shown", [("1.5", "1.5"), ("true", "True")])
def test_a_dimension_that_is_neither_an_integer_nor_an_expression_is_refused(tmp_path, dim, shown):
    with pytest.raises(SpecError, match=rf"args\.x\.shape\[0\] must be an integer or an expression string, not {shown}\."):
        load(tmp_path, SPEC.replace('shape = ["N"]\ninit', f'shape = [{dim}]\ninit'))


def test_an_integer_beyond_two_to_the_thousandth_is_too_large(tmp_path):
    """A number read from the spec (here a tolerance) as a Python int of any size: past 2**1000 it is
    refused as too large, one sentence, before float() would overflow or round it."""
    import tomllib

    from optiml.spec.load import parse_spec
    data = tomllib.loads(SPEC)
    data["tolerance"] = {"float32": {"atol": 2**1000 + 1}}
    with pytest.raises(SpecError, match=r"tolerance\.float32\.atol is too large"):
        parse_spec(data, tmp_path / "scale.toml")
    data["tolerance"] = {"float32": {"atol": 2**1000}}
    assert parse_spec(data, tmp_path / "scale.toml").tolerance("float32").atol == float(2**1000)


def test_a_zero_dimension_is_refused_and_a_zero_count_is_not(tmp_path):
    with pytest.raises(SpecError, match=r"args\.x\.shape\[0\] = 'N - 1000' is 0 at sizes \{'N': 1000\}; it must be positive"):
        load(tmp_path, SPEC.replace('shape = ["N"]\ninit', 'shape = ["N - 1000"]\ninit'))
    spec = load(tmp_path, SPEC.replace('bytes = "8 * N"', 'bytes = "0 * N"'))
    assert spec.count("bytes", {"N": 10}) == 0
    with pytest.raises(SpecError, match=r"counts\.bytes = '-N' is -1048576 at sizes \{'N': 1048576\}; it must be zero or positive"):
        load(tmp_path, SPEC.replace('bytes = "8 * N"', 'bytes = "-N"'))


def test_a_reference_kind_says_where_it_runs():
    from optiml.spec.model import Reference
    assert [(Reference(k).is_python, Reference(k).on_gpu) for k in ("seed", "python", "torch", "cupy")] == \
        [(False, False), (True, False), (True, True), (True, True)]


def test_the_summary_for_a_proposer_names_the_reference(tmp_path):
    import dataclasses

    from optiml.spec.model import Reference
    spec = load(tmp_path)
    assert "reference: the original kernel's outputs" in spec.summary()
    assert "reference: a Python reference implementation" in dataclasses.replace(spec, reference=Reference("python")).summary()
    assert "reference: a Python reference on torch GPU arrays" in \
        dataclasses.replace(spec, reference=Reference("torch")).summary()


def test_a_name_in_a_message_is_as_written_up_to_60_printable_characters():
    """A spec name shown in a one-line message: as written when printable and at most 60 characters,
    else quoted and cut (a newline or a 61-character name cannot break or flood the line)."""
    from optiml.spec.model import _name

    assert _name("x" * 60) == "x" * 60
    assert _name("x" * 61) != "x" * 61 and len(_name("x" * 61)) <= 60
    assert _name("a\nb") == "'a\\nb'" and _name(3) == "3"


def test_an_array_of_exactly_one_tib_loads(tmp_path):
    """The limit is 2**40 bytes: 2**38 float32 values are allowed (one more is refused, above)."""
    spec = load(tmp_path, SPEC.replace('shape = ["N"]\ninit', 'shape = ["2**38"]\ninit', 1))
    assert spec.args[0].shape == ("2**38",)


def test_files_and_tables_a_spec_cannot_do_without_are_one_sentence_each(tmp_path):
    """No spec file, no argument listed, a shape of no dimension, a kernel that is not text: each is
    one sentence naming the file; a bool input with no init is drawn from 0 and 1."""
    with pytest.raises(SpecError, match=r"nope\.toml: spec file not found\.$"):
        load_spec(tmp_path / "nope.toml", tmp_path / "scale.cu")
    with pytest.raises(SpecError, match=r"scale\.toml: args must list at least one argument\.$"):
        load(tmp_path, "args = []\n" + SPEC.split("[[args]]")[0] + "[launch]\ngrid = [1]\nblock = [1]\n")
    with pytest.raises(SpecError, match=r"args\.x\.shape must have at least one dimension\.$"):
        load(tmp_path, SPEC.replace('shape = ["N"]\ninit', "shape = []\ninit", 1))
    k, s = write(tmp_path)
    k.write_bytes(b"\xff\xfe\x00\x01 not text")
    with pytest.raises(SpecError, match=r"scale\.cu: not a text file\.$"):
        load_spec(s, k)
    spec = load(tmp_path, SPEC.replace('dtype = "float32"\nrole = "input"\nshape = ["N"]\n'
                                       'init = { dist = "uniform", low = -2.0, high = 2.0 }',
                                       'dtype = "bool"\nrole = "input"\nshape = ["N"]'),
                KERNEL.replace("const float* x", "const bool* x"))
    assert spec.args[0].dtype == "bool" and (spec.args[0].init.dist, spec.args[0].init.low,
                                             spec.args[0].init.high) == ("integers", 0, 2)
