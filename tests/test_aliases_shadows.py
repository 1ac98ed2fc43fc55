"""A size alias (``int s = a * b;``) shadowed by an inner declaration without a value is left as
written by :func:`inline_size_aliases`: the inner ``s`` is another variable."""
from optiml.edits.templates.aliases import inline_size_aliases

SHADOWED = """__global__ void k(const float *x, float *y, int a, int b, int n) {
    int s = a * b;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i * s];
    if (i == 0) {
        int s;
        asm("mov.u32 %0, %%laneid;" : "=r"(s));
        y[0] = x[s];
    }
}
"""


def test_an_alias_shadowed_by_a_declaration_without_a_value_is_left_as_written():
    assert inline_size_aliases(SHADOWED, "k") == SHADOWED


def test_without_the_shadow_the_alias_is_inlined():
    plain = SHADOWED.replace("        int s;\n", "        int t;\n").replace('"=r"(s)', '"=r"(t)').replace("x[s]", "x[t]")
    out = inline_size_aliases(plain, "k")
    assert "int s" not in out and "x[i * (a * b)]" in out and "x[t]" in out


LAMBDA = """__global__ void k(const float *x, float *y, int a, int b) {
    int s = a * b;
    auto f = [](PARAM) { return s + 1; };
    int i = threadIdx.x;
    if (i < s) y[i] = x[i] * f(2);
}
"""


def test_an_alias_shadowed_by_a_lambdas_parameter_is_left_as_written():
    """A lambda's parameter of the alias's name (by value, with a default, by reference or a pointer)
    is another variable: replacing it would leave ``[](int (a * b))``."""
    for param in ("int s", "int s = 3", "int &s", "const int &s"):
        src = LAMBDA.replace("PARAM", param)
        assert inline_size_aliases(src, "k") == src, param
    out = inline_size_aliases(LAMBDA.replace("PARAM", "int t"), "k")
    assert "int s" not in out and "if (i < (a * b))" in out
