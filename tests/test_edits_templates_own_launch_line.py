"""A GEMM kernel whose source carries its own `// optiml:launch` line (the user chose its grid and
block) gets no template: the rules are told why in one sentence, not handed nothing."""
from optiml.edits.templates import template_transforms
from tests.test_edits_templates import LINEAR, LINEAR_SPEC

LAUNCH = '// optiml:launch {grid = ["cdiv(N, 16)", "cdiv(M, 16)"], block = ["16", "16"]}\n'


def test_a_gemm_is_templated_without_a_launch_line_of_its_own():
    """The plain linear+ReLU GEMM is offered templates on Hopper (the case the refusal departs from)."""
    made, why = template_transforms(LINEAR, "linear_relu", LINEAR_SPEC, arch="sm_90")
    assert why is None and made and all(t.kind == "template" for t in made)


def test_a_gemm_carrying_its_own_launch_line_is_refused_with_the_reason():
    """The same GEMM with its own launch line: no template, and the reason is the launch line."""
    src = LINEAR.replace("__global__", LAUNCH + "__global__", 1)
    assert template_transforms(src, "linear_relu", LINEAR_SPEC, arch="sm_90") == \
        ([], "not templated: the kernel carries its own launch line")
