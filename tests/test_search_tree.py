from optiml.search.tree import Node, node_key, normalize_source


def test_normalize_strips_comments_and_whitespace():
    a = "#define BLOCK 16\n__global__ void k(float* x) {\n  x[0] = 1.0f; // set\n}\n"
    b = "/* header */\n#define   BLOCK 16\n\n__global__ void k(float* x)   {\n\tx[0] = 1.0f;\n}"
    assert normalize_source(a) == normalize_source(b)
    assert normalize_source(a) != normalize_source(a.replace("16", "32"))


def test_normalize_keeps_lines_and_strings_apart():
    # joining lines would merge a macro with the next line: those are different programs
    assert normalize_source("#define X\nfoo") != normalize_source("#define X foo")
    assert normalize_source('printf("a  // b");') == 'printf("a  // b");'


def test_flags_are_part_of_identity():
    assert node_key("x", ()) != node_key("x", ("-use_fast_math",))


def test_widening_limit_grows_with_visits():
    n = Node(id=0, parent=None, source="")
    limits = []
    for v in (0, 1, 4, 9, 16):
        n.visits = v
        limits.append(n.widening_limit(2.0, 0.5))
    assert limits == [2, 2, 4, 6, 8]


def test_a_nodes_repr_is_one_line_without_its_subtree():
    root = Node(0, None, "__global__ void k() {}")
    child = Node(1, root, "__global__ void k() { }", edit="pad tile", visits=3)
    root.children.append(child)
    assert repr(root) == "Node(0, '', pending, None, n=0)" and repr(child) == "Node(1, 'pad tile', pending, None, n=3)"
