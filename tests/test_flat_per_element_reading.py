"""How the flat templates' reader (optiml/edits/templates/flat.py and its helpers) reads a kernel of
one element a thread: outputs stored in braced branches, writes through a parenthesised element's
member, the index's own type, a loop that declares more than its index, helpers whose signature
reads the thread's coordinates, and a thread's sum changed before its one atomic; and the start
point each element type gets."""
import dataclasses

import pytest

from optiml.edits.templates.flat import FLAT_TEMPLATES, recognize_flat
from tests.test_edits_templates import arg, spec_of

N = spec_of(arg("x", "input", ("n",)), arg("y", "output", ("n",)), sizes=("n",))
SUM = spec_of(arg("x", "input", ("n",)), arg("out", "inout", (1,)), sizes=("n",))
ONE = "__global__ void k(const float *x, float *y, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; {} }}"


def test_an_output_stored_in_both_braced_branches_is_moved_as_a_vector():
    """``if (c) { y[i] = a; } else { y[i] = b; }`` stores y on every path: y is an output the
    template stores (not loaded first), its stores written over the template's name."""
    op, why = recognize_flat(ONE.format("if (i < n) { if (x[i] > 0.f) { y[i] = x[i]; } else { y[i] = 0.f; } }"),
                             "k", N)
    assert op is not None, why
    assert op.outs == (("y", "float"),) and op.loaded == ()
    assert op.body == "if (optiml_e_x > 0.f) { optiml_o_y = optiml_e_x; } else { optiml_o_y = 0.f; }"


def test_a_store_through_a_parenthesised_elements_member_is_a_write():
    """``(y[i]).x = ...`` writes y: where y is also read at another element the kernel is refused
    with that reason, and where it is not the kernel is read as a map that keeps y's store as written."""
    src = "__global__ void k(const float *x, float2 *y, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; " \
          "if (i < n) {{ {} }} }}"
    op, why = recognize_flat(src.format("(y[i]).x = y[i + 1].y;"), "k", N)
    assert op is None and why == "not templated: y is written at the element and read at another index"
    op, why = recognize_flat(src.format("(y[i]).x = x[i];"), "k", N)
    assert op is not None, why
    assert op.kind == "map" and op.outs == () and op.body == "(y[i]).x = optiml_e_x;"


def test_the_template_declares_the_index_with_the_kernels_own_type():
    """A ``size_t`` (or ``long long``) index stays that wide in the template's declaration of it, so
    indexing past 2^31 elements stays as the kernel wrote it."""
    for ty in ("size_t", "long long"):
        op, why = recognize_flat(f"__global__ void k(const float *x, float *y, int n) {{ {ty} i = blockIdx.x * "
                                 "blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }", "k", N)
        assert op is not None, why
        assert op.index_decl == f"const {ty} i = ({ty})optiml_i; (void)i;"


def test_a_grid_stride_loop_that_declares_another_variable_is_not_read():
    """``for (int k, i = first; ...)`` declares k beside the index; the template, which declares only
    the index, would lose k's declaration, so the kernel is not read as one element a thread."""
    src = ("__global__ void k(const float *x, float *y, int n) { for (int k, i = blockIdx.x * blockDim.x + threadIdx.x; "
           "i < n; i += blockDim.x * gridDim.x) { k = 2 * i; y[i] = x[i] + (float)k; } }")
    assert recognize_flat(src, "k", N) == (None, None)


def test_a_helper_whose_default_argument_reads_the_thread_index_is_cooperation():
    """A default argument is evaluated with the call, so a helper ``f(float v, unsigned t =
    threadIdx.x)`` called as ``f(x[i])`` reads the thread's coordinates like the per-element code
    would: refused, naming the helper (a helper without it is read)."""
    def source(default, call):
        return (f"__device__ float f(float v, unsigned t{default}) {{ return v + (float)t; }}\n"
                + ONE.format(f"if (i < n) y[i] = {call};"))
    op, why = recognize_flat(source(" = threadIdx.x", "f(x[i])"), "k", N)
    assert op is None and why is not None and "calls f" in why, why
    op, why = recognize_flat(source("", "f(x[i], 3u)"), "k", N)
    assert op is not None and op.body == "optiml_o_y = f(optiml_e_x, 3u);", why


def test_a_threads_sum_changed_before_its_atomic_is_refused_with_the_reason():
    """``atomicAdd(out, s + 1.0f)`` after a thread's grid-stride sum adds one per thread, not per
    element: not rewritten as an atomic an element, and refused with a sentence (nothing raised)."""
    src = ("__global__ void k(const float *x, float *out, int n) { float s = 0.0f; for (int i = blockIdx.x * "
           "blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += x[i]; atomicAdd(out, s + 1.0f); }")
    op, why = recognize_flat(src, "k", SUM)
    assert op is None and why == "not templated: statements after the per-element loop"


def test_an_element_passed_past_a_variadic_macros_named_parameters_is_kept_as_written():
    """``FIRST(1.0f, x[i])`` with ``#define FIRST(a, ...) (a)``: the macro may never evaluate x[i], so
    x is not loaded as the thread's element (read ahead of the body), and its read stays as written."""
    src = "#define FIRST(a, ...) (a)\n" + ONE.format("if (i < n) y[i] = FIRST(1.0f, x[i]);")
    op, why = recognize_flat(src, "k", N)
    assert op is not None, why
    assert op.body == "optiml_o_y = FIRST(1.0f, x[i]);"


@pytest.mark.parametrize("ctype,dtype,vec", [("unsigned char", "uint8", 8), ("__half", "float16", 8),
                                             ("float", "float32", 4), ("double", "float64", 2)])
def test_the_start_point_loads_16_bytes_a_thread_and_at_most_8_elements(ctype, dtype, vec):
    spec = spec_of(arg("x", "input", ("n",), dtype=dtype), arg("y", "output", ("n",), dtype=dtype), sizes=("n",))
    op, why = recognize_flat(f"__global__ void k(const {ctype} *x, {ctype} *y, int n) {{ int i = blockIdx.x * "
                             "blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }", "k", spec)
    assert op is not None, why
    start = next(t for t in FLAT_TEMPLATES if t.kind == op.kind).start_for(op)
    assert (start["OPTIML_THREADS"], start["OPTIML_VEC"]) == (256, vec)


@pytest.mark.parametrize("added,term", [
    ("0.5f * s", "(0.5f) * (optiml_e_x)"), ("s * 0.5f", "(optiml_e_x) * (0.5f)"), ("s / n", "(optiml_e_x) / (n)"),
    ("s", "optiml_e_x"), ("x[0] * s", None)])
def test_a_threads_sum_scaled_by_what_never_changes_is_scaled_an_element(added, term):
    """``atomicAdd(out, X * s)`` after a grid-stride sum: where X is literals and unchanged parameters,
    each element's term is scaled the same way; where X reads an array, the kernel is refused."""
    src = ("__global__ void k(const float *x, float *out, int n) { float s = 0.0f; for (int i = blockIdx.x * "
           f"blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += x[i]; atomicAdd(out, {added}); }}")
    op, why = recognize_flat(src, "k", SUM)
    if term is None:
        assert op is None and why == "not templated: statements after the per-element loop"
    else:
        assert op is not None and op.body == f"optiml_acc = optiml_acc + (OPTIML_ACC)({term});", why


def test_a_maps_start_does_two_vectors_a_thread_from_four_blocks_an_sm_of_132_at_two_each():
    """float32 (4 a vector, 1024 elements a block of 256): 2 vectors a thread from 132 SMs x 4 blocks
    x 2 x 1024 elements on, 1 below; a reduction starts at 4 in flight over 1024 blocks."""
    op, why = recognize_flat(ONE.format("if (i < n) y[i] = 2.f * x[i];"), "k", N)
    assert op is not None, why
    template = next(t for t in FLAT_TEMPLATES if t.kind == op.kind)
    edge = 132 * 4 * 2 * 256 * 4                       # float: 4 elements a vector, 256 threads a block
    assert template.start_for(dataclasses.replace(op, n_timing=edge)) == \
        {"OPTIML_THREADS": 256, "OPTIML_VEC": 4, "OPTIML_ITEMS": 2}
    assert template.start_for(dataclasses.replace(op, n_timing=edge - 1))["OPTIML_ITEMS"] == 1
    reduction = next(t for t in FLAT_TEMPLATES if t.kind == "reduce")
    assert reduction.start_for(op) == {"OPTIML_THREADS": 256, "OPTIML_VEC": 4, "OPTIML_ITEMS": 4, "OPTIML_BLOCKS": 1024}


def test_a_jump_that_stays_in_a_loop_of_the_body_is_kept_and_a_return_from_one_is_refused():
    """Inside the per-element program, a loop of its own may `continue` or `break` (the element's
    work goes on); a `return` from inside that loop leaves the thread early: refused."""
    loop = "if (i < n) {{ float s = 0.f; for (int k = 0; k < 4; ++k) {{ if (x[i] < k) {}; s += x[i] * k; }} y[i] = s; }}"
    for jump in ("continue", "break"):
        op, why = recognize_flat(ONE.format(loop.format(jump)), "k", N)
        assert op is not None and f"{jump};" in op.body, (jump, why)
    op, why = recognize_flat(ONE.format(loop.format("return")), "k", N)
    assert op is None and "leaves early" in why


@pytest.mark.timeout(30)             # the helpers' closure is a loop: a bug there hangs rather than fails
def test_a_helper_that_calls_a_cooperating_helper_is_refused_naming_it():
    """``f`` calls ``g``, which synchronises the block; the kernel calls only ``f``: refused, saying
    it calls f (through a macro too)."""
    helpers = ("__device__ float g(float v) { __syncthreads(); return v; }\n"
               "__device__ float f(float v) { return g(v) + 1.0f; }\n")
    op, why = recognize_flat(helpers + ONE.format("if (i < n) y[i] = f(x[i]);"), "k", N)
    assert op is None and why is not None and "calls f" in why, why
    op, why = recognize_flat(helpers + "#define F(v) f(v)\n" + ONE.format("if (i < n) y[i] = F(x[i]);"), "k", N)
    assert op is None and why is not None and "F" in why, why
