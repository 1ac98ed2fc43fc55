"""The tree-sitter helpers the rules proposer's rewrites share (optiml/edits/cutree.py): a node's
ancestors up to the file, a refusal's quoted code cut to 60 characters, and the entry kernel's
``__shared__`` arrays (not its local arrays)."""
from optiml.edits.cutree import _ancestors, _entry_def, _shared_arrays, _short, _t, _tree
from optiml.source import _walk

KERNEL = """__global__ void k(const float *x, float *y, int n) {
    __shared__ float tile[256];
    __shared__ int counts[32], flags[8];
    float regs[4];
    int idx[2] = {0, 1};
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { regs[0] = x[i]; tile[threadIdx.x] = regs[0]; y[i] = tile[threadIdx.x] + idx[1]; }
}
"""


def test_a_nodes_ancestors_run_from_its_parent_up_to_the_file():
    root = _tree(KERNEL)
    leaf = next(n for n in _walk(root) if n.type == "identifier" and _t(n) == "regs" and
                n.parent.type == "subscript_expression" and n.parent.parent.type == "assignment_expression")
    up = list(_ancestors(leaf))
    assert up[0] == leaf.parent and up[-1].type == "translation_unit"
    assert [a.type for a in up][:2] == ["subscript_expression", "assignment_expression"]
    assert "function_definition" in [a.type for a in up] and "if_statement" in [a.type for a in up]
    assert list(_ancestors(root)) == []


def test_a_refusals_quoted_code_is_cut_to_sixty_characters_on_one_line():
    long = "sh[t] +=   sh[t + s] * weights[blockIdx.x * blockDim.x +\n threadIdx.x] + bias[threadIdx.x % 32];"
    got = _short(long)
    assert len(got) == 60 and got.endswith("...")
    assert got == " ".join(long.split())[:57] + "..."
    assert _short("x" * 60) == "x" * 60 and _short("a\n   b") == "a b"
    assert _short("x" * 61) == "x" * 57 + "..."          # one past: cut


def test_the_shared_arrays_are_the_shared_declarations_only():
    fn, _ = _entry_def(_tree(KERNEL), "k")
    assert _shared_arrays(fn) == {"tile": "float", "counts": "int", "flags": "int"}


def test_the_parameters_are_the_named_ones_with_their_pointer_declarators():
    """An unnamed parameter (a prototype's `float *`) or an array parameter is no name the rewrites
    can use; a pointer's declarator is kept (the rewrites read its qualifiers), a value's is None."""
    from optiml.edits.cutree import _fdecl, _params

    src = "__global__ void k(const float *__restrict__ x, float **pp, int, float a[], int n) { }\n"
    fn, _ = _entry_def(_tree(src), "k")
    got = [(name, _t(ptr) if ptr is not None else None) for name, _, ptr, _ in _params(_fdecl(fn))]
    assert got == [("x", "*__restrict__ x"), ("pp", "*pp"), ("n", None)]
