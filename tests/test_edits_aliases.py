"""Size aliases (``int spatial = dim1 * dim2;``) written as their values before a kernel is read as an
operation (optiml/edits/templates/aliases.py); everything that could change meaning is left alone."""
import pytest

from optiml.edits.templates.aliases import inline_size_aliases

K = """__global__ void k(const float *x, float *y, int a, int b, int n) {{
    {decl}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i * {use}];
}}
"""


def src(decl, use="s"):
    return K.format(decl=decl, use=use)


def test_an_int_product_of_arguments_becomes_its_value():
    out = inline_size_aliases(src("int s = a * b;"), "k")
    assert "int s" not in out and "x[i * (a * b)]" in out


def test_a_use_right_after_the_declarations_semicolon_is_replaced_too():
    """Code written without a space after the declaration: ``int s = a * b;s > 0 ...``."""
    out = inline_size_aliases("__global__ void k(const float *x, float *y, int a, int b) {int s = a * b;"
                              "s > 0 ? (void)0 : (void)0;int i = threadIdx.x;if (i < s) y[i] = x[i];}", "k")
    assert out == ("__global__ void k(const float *x, float *y, int a, int b) {"
                   "(a * b) > 0 ? (void)0 : (void)0;int i = threadIdx.x;if (i < (a * b)) y[i] = x[i];}")


def test_a_wider_type_is_kept_as_a_cast_and_aliases_of_aliases_resolve():
    out = inline_size_aliases(src("const size_t s = (size_t)0 + a;", "s"), "k")      # a cast: not arithmetic
    assert out == src("const size_t s = (size_t)0 + a;", "s")
    out = inline_size_aliases(src("int t = a * b; const long s = t + 1;"), "k")
    assert "x[i * ((long)((a * b) + 1))]" in out


@pytest.mark.parametrize("decl, use", [
    ("int s = a * b; s += 1;", "s"),                       # assigned later
    ("int s = a * b; a = 2;", "s"),                        # an argument it reads changes
    ("int s = a * threadIdx.x;", "s"),                     # not only arguments
    ("float s = a * b;", "s"),                             # not an integer
    ("int s = a * b, t = 2;", "s"),                        # two names in one declaration
    ("int s = a * b; { int s = 3; y[0] = s; }", "s"),      # declared twice
    ("int s = max(a, b);", "s"),                           # a call
])
def test_what_could_change_meaning_is_left_as_written(decl, use):
    assert inline_size_aliases(src(decl, use), "k") == src(decl, use)


def test_a_name_a_macro_uses_is_left_as_written():
    text = "#define AT(i) x[(i) * s]\n" + src("int s = a * b;")
    assert inline_size_aliases(text, "k") == text
