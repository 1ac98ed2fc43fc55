"""Real nvcc builds (nvcc is on CI machines; no GPU is needed to compile)."""
from pathlib import Path

import pytest

from optiml.build import NvccBuilder, normalize_arch, parse_ptxas, plain_name
from optiml.errors import EnvironmentProblem
from optiml.spec import find_spec, load_spec
from tests.conftest import EXAMPLES

EXAMPLE_KERNELS = sorted(EXAMPLES.glob("*/*.cu"))


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    return NvccBuilder("sm_90", cache_dir=tmp_path_factory.mktemp("cache"))


def test_there_are_at_least_five_examples():
    assert len(EXAMPLE_KERNELS) >= 5, EXAMPLE_KERNELS


@pytest.mark.parametrize("kernel", EXAMPLE_KERNELS, ids=lambda p: p.stem)
def test_every_example_builds_and_reports_resources(builder, kernel: Path):
    spec = load_spec(find_spec(kernel), kernel)
    result = builder.build(kernel.read_text(), spec.nvcc_flags, include_dir=kernel.parent, name=kernel.name)
    assert result.ok, result.log
    res = result.entry_resources(spec.entry)
    assert res is not None, result.symbols
    assert 0 < res.registers <= 255
    assert res.spill_stores == 0 and res.spill_loads == 0
    assert Path(result.cubin_path).read_bytes()[:4] == b"\x7fELF"


def test_tiled_example_reports_static_shared_memory(builder):
    kernel = EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu"
    spec = load_spec(find_spec(kernel), kernel)
    res = builder.build(kernel.read_text(), spec.nvcc_flags).entry_resources(spec.entry)
    assert res.smem_static >= 2 * 32 * 32 * 4


def test_compile_error_is_a_status_with_the_log(builder):
    src = "__global__ void k(float* x) { x[0] = undefined_name; }\n"
    result = builder.build(src, ("-O3",), name="broken.cu")
    assert result.status == "compile_error" and result.cubin_path is None
    assert any("undefined_name" in e for e in result.errors)
    assert "broken.cu" in result.log


def test_cache_hit_and_key_depends_on_flags_and_arch(builder, tmp_path):
    src = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"
    first = builder.build(src, ("-O3",))
    second = builder.build(src, ("-O3",))
    assert not first.cached and second.cached and second.cubin_path == first.cubin_path
    assert builder.build(src, ("-O2",)).key != first.key
    other = NvccBuilder("sm_80", cache_dir=builder.cache_dir)
    assert other.key(src, ("-O3",)) != builder.key(src, ("-O3",))


def test_editing_an_included_header_rebuilds(builder, tmp_path):
    """The cache key covers the headers the source includes, nested ones too: after a header
    edit the build is new and its cubin has the new code (the tile size in the header sets the
    static shared memory ptxas reports); a header that appears later also counts."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "tile.h").write_text('#include "inc/size.h"\n')
    (tmp_path / "inc" / "size.h").write_text("#define TILE 16\n")
    src = ('#include "tile.h"\n#include <cuda_fp16.h>\n'
           "__global__ void k(float* x) { __shared__ float s[TILE]; s[threadIdx.x] = x[threadIdx.x];"
           " __syncthreads(); x[threadIdx.x] = s[TILE - 1 - threadIdx.x]; }\n")
    first = builder.build(src, ("-O3",), include_dir=tmp_path)
    assert first.ok and first.entry_resources("k").smem_static == 16 * 4
    assert builder.build(src, ("-O3",), include_dir=tmp_path).cached
    (tmp_path / "inc" / "size.h").write_text("#define TILE 64\n")
    second = builder.build(src, ("-O3",), include_dir=tmp_path)
    assert not second.cached and second.key != first.key
    assert second.entry_resources("k").smem_static == 64 * 4

    late = '#include "later.h"\n__global__ void k(float* x) { x[0] = LATER; }\n'
    assert builder.build(late, ("-O3",), include_dir=tmp_path).status == "compile_error"
    (tmp_path / "later.h").write_text("#define LATER 1.0f\n")
    assert builder.build(late, ("-O3",), include_dir=tmp_path).ok


def test_the_same_source_in_another_folder_is_built_again(builder, tmp_path):
    """An include the key cannot follow (named by a macro) is read from the kernel's own folder: the
    same text beside another header is another build, with that header's tile size in its cubin."""
    src = ('#define PARAMS "params.h"\n#include PARAMS\n'
           "__global__ void k(float* x) { __shared__ float s[TILE]; s[threadIdx.x] = x[threadIdx.x];"
           " __syncthreads(); x[threadIdx.x] = s[TILE - 1 - threadIdx.x]; }\n")
    got = []
    for tile in (16, 32):
        (tmp_path / str(tile)).mkdir()
        (tmp_path / str(tile) / "params.h").write_text(f"#define TILE {tile}\n")
        got.append(builder.build(src, ("-O3",), include_dir=tmp_path / str(tile)))
    assert not got[1].cached and [r.entry_resources("k").smem_static for r in got] == [16 * 4, 32 * 4]


def test_included_headers_follow_quotes_and_include_folders(tmp_path):
    from optiml.build import _include_dirs, included_headers

    (tmp_path / "a" / "sub").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "sub" / "x.h").write_text('#include "y.h"\n#include "x.h"\n')   # y.h beside it; x.h: itself
    (tmp_path / "a" / "sub" / "y.h").write_text("int y;\n")
    (tmp_path / "a" / "y.h").write_text("int other_y;\n")                          # not the one x.h gets
    (tmp_path / "b" / "z.h").write_text("int z;\n")
    src = '#include "sub/x.h"\n  #  include <z.h>\n#include <cuda_runtime.h>\n#include MACRO_NAME\n'
    got = included_headers(src, _include_dirs(("-O3", "-I", str(tmp_path / "b")), tmp_path / "a"))
    r = lambda *parts: str(tmp_path.joinpath(*parts).resolve())  # noqa: E731
    assert set(got) == {r("a", "sub", "x.h"), r("a", "sub", "y.h"), r("b", "z.h"), "missing:cuda_runtime.h"}
    assert got[r("b", "z.h")] == b"int z;\n"


def test_include_folders_in_nvccs_order_and_forms(tmp_path):
    """nvcc searches the flags' -I folders (comma lists split) before the include folder it is
    given last, then -isystem; -include files come first; a relative folder names nothing."""
    from optiml.build import _flag_values, _include_dirs, included_headers

    for d in ("kdir", "flag1", "flag2", "sys"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "t.h").write_text(f"// {d}\n")
    (tmp_path / "sys" / "only_sys.h").write_text("// sys\n")
    (tmp_path / "flag2" / "pre.h").write_text("// pre\n")
    flags = ("-O3", f"-I{tmp_path / 'flag1'},{tmp_path / 'flag2'}", "-Irelative", "-isystem", str(tmp_path / "sys"),
             "--pre-include=pre.h")
    dirs = _include_dirs(flags, tmp_path / "kdir")
    assert dirs == [tmp_path / "flag1", tmp_path / "flag2", tmp_path / "kdir", tmp_path / "sys"]
    got = included_headers('#include "t.h"\n#include <only_sys.h>\n', dirs, tuple(_flag_values(flags, ("-include", "--pre-include"))))
    assert set(got) == {str(tmp_path / p) for p in ("flag1/t.h", "sys/only_sys.h", "flag2/pre.h")}


def test_an_include_name_the_file_system_refuses_is_missing_not_a_crash(builder, tmp_path):
    src = f'#include "{"x" * 300}.h"\n__global__ void k(float* x) {{ x[0] = 1; }}\n'
    assert builder.build(src, ("-O3",), include_dir=tmp_path).status == "compile_error"


def test_a_header_in_an_i_folder_shadows_the_kernel_folder_and_counts(builder, tmp_path):
    """Edit the header nvcc actually reads (the -I one, searched before the kernel's folder)."""
    (tmp_path / "k").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "k" / "t.h").write_text("#define N 32\n")
    (tmp_path / "other" / "t.h").write_text("#define N 16\n")
    src = '#include "t.h"\n__global__ void k(float* x) { __shared__ float s[N]; s[threadIdx.x] = x[0]; __syncthreads(); x[1] = s[N - 1]; }\n'
    flags = ("-O3", f"-I{tmp_path / 'other'}")
    first = builder.build(src, flags, include_dir=tmp_path / "k")
    assert first.ok and first.entry_resources("k").smem_static == 16 * 4
    (tmp_path / "other" / "t.h").write_text("#define N 64\n")
    second = builder.build(src, flags, include_dir=tmp_path / "k")
    assert not second.cached and second.entry_resources("k").smem_static == 64 * 4


def test_timeout_stops_nvcc(tmp_path):
    slow = NvccBuilder("sm_90", cache_dir=tmp_path, timeout_s=0.05)
    result = slow.build("__global__ void k(float* x) { x[0] = 1; }\n")
    assert result.status == "timeout" and "did not finish" in result.log
    # a timeout is not cached: a later build with time to spare succeeds
    assert NvccBuilder("sm_90", cache_dir=tmp_path).build("__global__ void k(float* x) { x[0] = 1; }\n").ok


def test_resource_usage_reflects_the_code(builder):
    spilly = """
__global__ void k(float* x) {
    float a[100];
    for (int i = 0; i < 100; i++) a[i] = x[i * (int)threadIdx.x];
    x[0] = a[(int)threadIdx.x];
}
"""
    result = builder.build(spilly, ("-O3",))
    res = result.entry_resources("k")
    assert res.stack_frame >= 100 * 4     # dynamically indexed array goes to local memory


PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z11sgemm_naivePKfS0_Pfiii' for 'sm_90'
ptxas info    : Function properties for _Z11sgemm_naivePKfS0_Pfiii
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 8192 bytes smem, 380 bytes cmem[0]
ptxas info    : Compile time = 2.687 ms
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""


def test_parse_ptxas():
    res = parse_ptxas(PTXAS_LOG)
    r = res["_Z11sgemm_naivePKfS0_Pfiii"]
    assert (r.registers, r.barriers, r.smem_static, r.cmem) == (40, 1, 8192, 380)
    assert (r.stack_frame, r.spill_stores, r.spill_loads) == (8, 12, 16)
    assert res["k2"].registers == 8 and res["k2"].smem_static == 0


def test_plain_names_of_symbols():
    assert plain_name("_Z11sgemm_naivePKfS0_Pfiii") == "sgemm_naive"
    assert plain_name("_Z2ktILi4EEvPf") == "kt"
    assert plain_name("_ZN2ns6kernelEPf") == "kernel"
    assert plain_name("vadd") == "vadd"


def test_arch_names():
    assert normalize_arch("9.0") == "sm_90" and normalize_arch("sm_90a") == "sm_90a" and normalize_arch("80") == "sm_80"
    with pytest.raises(EnvironmentProblem, match="--arch"):
        normalize_arch("hopper")


def test_a_huge_include_tree_is_cut_at_the_limit_with_one_warning(tmp_path, monkeypatch):
    from loguru import logger

    from optiml import build as build_mod

    monkeypatch.setattr(build_mod, "MAX_HEADERS", 5)
    monkeypatch.setattr(build_mod, "_warned_truncated", [])
    for i in range(10):
        (tmp_path / f"h{i}.h").write_text(f'#include "h{i + 1}.h"\n')
    seen = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    logger.enable("optiml")
    try:
        for _ in range(3):
            got = build_mod.included_headers('#include "h0.h"\n', [tmp_path])
            assert len(got) == 5
    finally:
        logger.remove(sink)
        logger.disable("optiml")
    assert sum("more than 5 included files" in s for s in seen) == 1


def test_code_digest_sees_the_code_not_the_notes(builder, tmp_path):
    """Comments, a dead const and -lineinfo leave the code digest alone; a changed constant, a
    changed flag that changes code and a different kernel do not. Not an ELF cubin: None."""
    from optiml.cubin import code_digest

    src = ("#define F 2.0f\n__global__ void k(float* __restrict__ x, int n) {\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = sinf(x[i]) * F; }\n")
    digest = lambda s, flags=("-O3",): code_digest(builder.build(s, flags).cubin_path)
    base = digest(src)
    assert base is not None and len(base) == 64
    assert digest("// nothing\n" + src) == base
    assert digest(src, ("-O3", "-lineinfo")) == base
    assert digest(src.replace("2.0f", "3.0f")) != base
    assert digest(src, ("-O3", "-use_fast_math")) != base
    assert digest(src.replace("void k(", "void k2(")) != base
    junk = tmp_path / "junk.cubin"
    junk.write_bytes(b"not an elf at all" * 10)
    assert code_digest(str(junk)) is None and code_digest(str(tmp_path / "missing")) is None


def test_code_digest_tells_apart_what_the_code_refers_to(builder):
    """The same instructions reading another global (a relocation) or a constant with other values
    are other programs."""
    from optiml.cubin import code_digest

    src = ("__device__ float a[4] = {1, 2, 3, 4};\n__device__ float b[4] = {1, 2, 3, 4};\n"
           "__constant__ float c[2] = {1.0f, 2.0f};\n"
           "__global__ void k(float* x) { x[threadIdx.x] = a[threadIdx.x & 3] * c[threadIdx.x & 1]; }\n")
    digest = lambda s: code_digest(builder.build(s, ("-O3",)).cubin_path)
    base = digest(src)
    assert digest(src.replace("= a[", "= b[")) != base
    assert digest(src.replace("{1.0f, 2.0f}", "{1.0f, 5.0f}")) != base
    assert digest(src.replace("{1, 2, 3, 4};\n__device__ float b", "{1, 2, 3, 9};\n__device__ float b")) != base


def test_a_candidate_that_names_its_own_architecture_is_built_for_that_one_only(builder):
    """A Hopper template's candidate carries -arch=sm_90a: nvcc gets that one (no second -arch, no
    'incompatible redefinition' warning in the log), and wgmma assembles."""
    src = '__global__ void k(float* x) { asm volatile("wgmma.fence.sync.aligned;\\n" ::); x[0] = 1.0f; }\n'
    result = builder.build(src, ("-O3", "-arch=sm_90a"), name="hopper.cu")
    assert result.status == "ok", result.log
    assert "redefinition" not in result.log
    assert builder.build(src, ("-O3",), name="plain.cu").status == "compile_error"     # sm_90 has no wgmma



@pytest.mark.parametrize("damage", ["half_written_record", "cubin_gone"])
def test_a_damaged_cache_entry_is_built_again(tmp_path, damage):
    """A run killed while it wrote the cache (a record cut short), or a cubin deleted under it: the
    next build of the same source does not trust the entry, builds again and is right."""
    b = NvccBuilder("sm_90", cache_dir=tmp_path)
    src = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"
    first = b.build(src, ("-O3",))
    assert first.ok and b.build(src, ("-O3",)).cached
    entry = tmp_path / first.key
    if damage == "half_written_record":
        record = entry / "build.json"
        record.write_text(record.read_text()[:40])
    else:
        Path(first.cubin_path).unlink()
    again = b.build(src, ("-O3",))
    assert again.ok and not again.cached and Path(again.cubin_path).is_file()
    assert again.entry_resources("k") == first.entry_resources("k")
    assert b.build(src, ("-O3",)).cached
