import pytest

from optiml.errors import SpecError
from optiml.source import dtype_of_c_type, parse_source

SRC = r'''
#include <cuda_fp16.h>
template <int T>
__global__ void __launch_bounds__(256) tmpl(const float* __restrict__ a, float* b, int n) { b[0] = a[0] * T; }
extern "C" __global__ void plain(half* x, long long n, const __nv_bfloat16* __restrict__ y, unsigned char* z, float alpha) {}
__device__ float helper(float v) { return v; }
namespace ns { __global__ void nested(double* d) {} }
'''


def test_finds_every_global_with_parameters():
    info = parse_source(SRC)
    assert [k.name for k in info.kernels] == ["tmpl", "plain", "nested"]
    tmpl, plain, nested = info.kernels
    assert tmpl.templated and not tmpl.extern_c
    assert plain.extern_c and not plain.templated
    a, b, n = tmpl.params
    assert (a.name, a.base_type, a.is_pointer, a.is_const) == ("a", "float", True, True)
    assert (b.name, b.is_pointer, b.is_const) == ("b", True, False)
    assert (n.name, n.is_pointer) == ("n", False)
    assert [dtype_of_c_type(p.base_type) for p in plain.params] == ["float16", "int64", "bfloat16", "uint8", "float32"]
    assert nested.params[0].base_type == "double"


def test_launch_comment_is_read():
    src = '// optiml:launch {grid = ["cdiv(N, 64)", "cdiv(M, 64)"], block = [256], shared_mem = "64 * 4"}\n__global__ void k(float* x) {}\n'
    launch = parse_source(src).launch
    assert launch.grid == ("cdiv(N, 64)", "cdiv(M, 64)")
    assert launch.block == (256,)
    assert launch.shared_mem == "64 * 4"
    assert launch.line == 1


@pytest.mark.parametrize("comment,message", [
    ('// optiml:launch grid = 4', "cannot read"),
    ('// optiml:launch {grid = [4], threads = [2]}', "unknown key"),
    ('// optiml:launch [1, 2]', r"line 1: the '// optiml:launch' comment must hold an inline table \{grid = \[\.\.\.\], "
     r"block = \[\.\.\.\]\}\.$"),
    ('// optiml:launch {grid = [1]', r"line 1: cannot read the '// optiml:launch' comment \(Unclosed inline table"),
])
def test_bad_launch_comment_is_one_sentence(comment, message):
    with pytest.raises(SpecError, match=message):
        parse_source(comment + "\n__global__ void k(float* x) {}\n")


def test_two_launch_comments_are_refused():
    src = "// optiml:launch {block = [1]}\n// optiml:launch {block = [2]}\n__global__ void k(float* x) {}\n"
    with pytest.raises(SpecError, match="only one"):
        parse_source(src)


def test_a_block_index_variable_is_read_as_one_block_a_row():
    """`int row = blockIdx.x;` (what `optiml init` drafts one block a row from); a thread index, a
    lane or a sum are not block indices."""
    from optiml.source import index_facts
    src = ("__global__ void k(const float* x, float* y, int n) {\n"
           "    int row = blockIdx.x;\n    int tid = threadIdx.x;\n    int half = n / 2;\n"
           "    int i = blockIdx.y * 32 + threadIdx.y;\n"
           "    if (tid < n) y[row * n + tid] = x[row * n + tid] + half + i;\n}\n")
    facts = index_facts(src, "k")
    assert facts.block_index == {"row": "x"} and facts.thread_index == {"i": ("y", "32")}


def test_kernel_attributes_the_grammar_lacks_leave_the_kernel_and_its_offsets_whole():
    """``__cluster_dims__`` and ``__maxnreg__`` (a cluster's shape, a register cap) are unknown to
    tree-sitter-cuda, which read them as a declaration swallowing the kernel: the entry was "not a
    __global__ function". They read as blanks of their length, so the kernel, its parameters and the
    byte offsets an edit splices at are the source's own."""
    from optiml.source import index_facts, parse_tree
    src = ("__global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(512) a(const float *x, float *y, int n) "
           "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }\n"
           "__global__ void __maxnreg__(64) b(float *z) { z[0] = 1; }\n"
           "__cluster_dims__(2, 1, 1) __global__ void c(float *w) { w[0] = 2; }\n")
    info = parse_source(src)
    assert [k.name for k in info.kernels] == ["a", "b", "c"]
    assert [p.name for p in info.kernels[0].params] == ["x", "y", "n"]
    root = parse_tree(src).root_node
    assert not root.has_error
    body = next(n for n in root.children if n.type == "function_definition").child_by_field_name("body")
    assert src.encode()[body.start_byte:body.end_byte].decode().startswith("{ int i = blockIdx.x")
    assert index_facts(src, "a") is not None


def test_a_template_entrys_value_is_its_explicit_instantiation_not_a_host_side_use():
    """``template __global__ void k<16>(float*);`` gives TILE its value; host code naming ``k<64>``
    (a function pointer) or ``k<128>`` is not the kernel's instantiation and is left alone."""
    from optiml.source import parse_tree, template_sites

    src = ("template <int TILE>\n__global__ void k(float* x) { x[threadIdx.x] *= TILE; }\n"
           "template __global__ void k<16>(float*);\n"
           "static void (*other)(float*) = k<64>;\n"
           "void host(float* x) { auto f = k<128>; }\n")
    sites = template_sites(parse_tree(src).root_node, "k")
    assert {name: [(s.value, s.kind) for s in v] for name, v in sites.items()} == {"TILE": [(16, "template")]}
    [site] = sites["TILE"]
    assert src[site.start:site.end] == "16"
