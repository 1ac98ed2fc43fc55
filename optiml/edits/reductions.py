"""Rewrites of block reductions for the ``rules`` proposer: code nobody wrote for tuning.

- :func:`accumulate_first`: a block-reduction sum that loads ONE element a thread into shared memory
  (``sh[t] = (i < n) ? x[i] : 0;``) sums many first, in a grid-stride loop in a register, so a few
  blocks do the work of thousands and the tree, its barriers and the atomics are paid once per
  ``ITEMS`` elements;
- :func:`warp_shuffle`: the last five steps of a shared-memory tree reduction (``for (s = B / 2;
  s > 0; s >>= 1) { if (t < s) sh[t] += sh[t + s]; __syncthreads(); }``) done with
  ``__shfl_down_sync`` inside one warp, without barriers.

Each returns (transforms, why not); the reason names what did not hold, so the proposer can say it.
Both work on the tree-sitter-cuda tree and refuse whatever they do not recognise exactly.
"""
from __future__ import annotations

import re

from ..source import _walk, parse_source
from .cutree import Transform, _entry_def, _flat, _shared_arrays, _splice, _t, _tree
from .structural import _ONE_ITEM_INDEX, _cdiv_parts, _free_name, _launch_line, _with_launch

ACC_NAMES = ("OPTIML_ITEMS_PER_THREAD", "OPTIML_ITEMS")
ACC_ITEMS = 16
_ZERO = re.compile(r"^\(?\s*0(\.0*)?[fF]?\s*\)?$|^\(?\s*0?\.0+[fF]?\s*\)?$")
_GLOBAL_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|cooperative_groups|cg::)\b")


def _strip_parens(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def _one_item_index(value: str, block_value) -> bool:
    """``value`` is ``blockIdx.x * blockDim.x + threadIdx.x`` (either order, casts allowed), or the
    same with the launch's block written in place of ``blockDim.x``."""
    flat = _flat(value)
    if any(p.match(flat) for p in _ONE_ITEM_INDEX):
        return True
    if block_value is None:
        return False
    b = re.escape(str(block_value))
    cast = r"(\(\s*\w+(\s+\w+)?\s*\)\s*)?"
    return bool(re.fullmatch(rf"{cast}blockIdx\.x\s*\*\s*\(?{b}\)?\s*\+\s*threadIdx\.x|threadIdx\.x\s*\+\s*"
                             rf"{cast}blockIdx\.x\s*\*\s*\(?{b}\)?|{cast}\(?{b}\)?\s*\*\s*blockIdx\.x\s*\+\s*threadIdx\.x",
                             flat))


def _uses(node, name: str) -> list:
    return [n for n in _walk(node) if n.type == "identifier" and _t(n) == name]


def _assignments_to(fn, name: str):
    """Every assignment expression whose left side is ``name[...]``."""
    out = []
    for n in _walk(fn):
        if n.type in ("assignment_expression", "update_expression"):
            left = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if left is not None and left.type == "subscript_expression":
                arg = left.child_by_field_name("argument")
                if arg is not None and _t(arg) == name:
                    out.append(n)
    return out


def accumulate_first(source: str, entry: str = "", launch=None, items: int = ACC_ITEMS) -> tuple[list[Transform], str | None]:
    """Accumulate before reducing: in a kernel whose threads each load one element into a shared
    array (``sh[t] = (i < LIMIT) ? EXPR : 0;`` with ``i`` the one-item index), that sum it with a
    tree (every later write to the array is a ``+=`` or an ``= a + b``), and whose only output is
    an ``atomicAdd`` of the block's sum, each thread first sums ``EXPR`` over a grid-stride loop in
    a register; the launch's ``cdiv(X, B)`` grid becomes ``cdiv(X, (B) * ITEMS)``, ITEMS a constant
    the tuning moves. Right for any grid: the loop covers every index once, and a sum does not care
    which block adds what. Refused (with the reason) when any of that does not hold."""
    if launch is None:
        return [], None
    info = parse_source(source)
    grid, block, smem = launch if info.launch is None else info.launch.over(*launch)
    if not grid or len(grid) != 1 or _cdiv_parts(grid[0]) is None:
        return [], None
    cd = _cdiv_parts(grid[0])
    root = _tree(source)
    fn, _ = _entry_def(root, entry)
    if fn is None:
        return [], None
    shared = _shared_arrays(fn)
    if not shared:
        return [], None
    body = fn.child_by_field_name("body")
    # the one-item index: `int i = blockIdx.x * blockDim.x + threadIdx.x;`
    index = None
    for n in _walk(body):
        if n.type == "init_declarator":
            d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if d is not None and v is not None and d.type == "identifier" and \
                    _one_item_index(_t(v), block[0] if block and len(block) == 1 else None):
                index = (_t(d), n)
                break
    if index is None:
        return [], None
    var, decl = index
    # the load: `SH[...] = (var < LIMIT) ? EXPR : 0;` (or a declaration `T v = ...;`)
    loads = []
    for n in _walk(body):
        if n.type == "conditional_expression":
            cond, then, other = (n.child_by_field_name(k) for k in ("condition", "consequence", "alternative"))
            if cond is None or then is None or other is None:
                continue
            m = re.fullmatch(rf"{re.escape(var)}\s*<\s*(.+)", _strip_parens(_flat(_t(cond))))
            if m and _ZERO.match(_flat(_t(other))):
                loads.append((n, m.group(1), then))
    if len(loads) != 1:
        return [], None
    ternary, limit, expr = loads[0]
    if re.search(r"&&|\|\||\?|[<>=!]", limit):
        return [], "not accumulated: the load's bound is more than one comparison"
    uses = _uses(body, var)
    inside = [u for u in uses if ternary.start_byte <= u.start_byte < ternary.end_byte]
    decl_uses = [u for u in uses if decl.start_byte <= u.start_byte < decl.end_byte]
    if len(inside) + len(decl_uses) != len(uses):
        return [], f"not accumulated: {var} is used beyond the one load (a thread's index means more there)"
    stmt = ternary.parent
    while stmt is not None and stmt.type not in ("expression_statement", "declaration"):
        stmt = stmt.parent
    if stmt is None or stmt.parent is None or stmt.parent.id != body.id:
        return [], "not accumulated: the load is not a statement of the kernel's own body"
    if _GLOBAL_SYNC.search(_t(expr)) or re.search(r"\b(atomic\w+)\s*\(", _t(expr)):
        return [], "not accumulated: the loaded expression synchronises or is atomic"
    target = shared_name = None
    if stmt.type == "expression_statement":
        a = stmt.named_children[0] if stmt.named_children else None
        if a is None or a.type != "assignment_expression" or _t(a.child_by_field_name("operator")) != "=" or \
                a.child_by_field_name("right").id != ternary.id:
            return [], None
        left = a.child_by_field_name("left")
        arg = left.child_by_field_name("argument") if left.type == "subscript_expression" else None
        if arg is None or _t(arg) not in shared:
            return [], None
        shared_name, target = _t(arg), _t(left)
        elem = shared[shared_name]
    else:                                   # `T v = (i < n) ? x[i] : 0;`, v then stored in shared memory
        t = stmt.child_by_field_name("type")
        elem = _t(t) if t is not None else "float"
        init = next((c for c in stmt.named_children if c.type == "init_declarator"), None)
        target = _t(init.child_by_field_name("declarator")) if init is not None else None
        if target is None:
            return [], None
        stores = [a for name in shared for a in _assignments_to(fn, name)
                  if _flat(_t(a.child_by_field_name("right") or a)) == target]
        if len(stores) != 1:
            return [], None
        shared_name = _t(stores[0].child_by_field_name("left").child_by_field_name("argument"))
    if elem.replace("const", "").strip() not in ("float", "double", "int", "unsigned", "unsigned int", "long long",
                                                   "unsigned long long"):
        return [], f"not accumulated: the shared array holds {elem}, not a number type"
    # the tree sums: every other write to the shared array adds
    for a in _assignments_to(fn, shared_name):
        if a.start_byte >= stmt.start_byte and a.end_byte <= stmt.end_byte:
            continue
        if a.type == "update_expression":
            return [], f"not accumulated: {shared_name} is incremented elsewhere"
        op = _t(a.child_by_field_name("operator"))
        right = _flat(_t(a.child_by_field_name("right")))
        left = _flat(_t(a.child_by_field_name("left")))
        if stmt.type == "declaration" and right == target:
            continue
        if op == "+=" and re.fullmatch(rf"{re.escape(shared_name)}\s*\[[^\]]+\]", right):
            continue
        if op == "=" and re.fullmatch(rf"{re.escape(shared_name)}\s*\[[^\]]+\]\s*\+\s*{re.escape(shared_name)}\s*\[[^\]]+\]",
                                      right) and left in right:
            continue
        return [], f"not accumulated: {_flat(_t(a))} is not a sum, so the block's result may not be one"
    # the block's result leaves only through atomicAdd
    text = _t(body)
    atomics = re.findall(r"\b(atomic\w+)\s*\(", text)
    if atomics != ["atomicAdd"]:
        return [], ("not accumulated: the block's result must leave through one atomicAdd"
                    + (f" (found {', '.join(atomics)})" if atomics else " (found none)"))
    fdecl_params = re.findall(r"\b(\w+)\s*\[", text)
    for p in set(fdecl_params) - set(shared):
        if _assignments_to(fn, p):
            return [], f"not accumulated: the kernel also writes {p}, which a grid-stride sum would change"
    name = _free_name(ACC_NAMES, info, source)
    if name is None:
        return [], "not accumulated: no free name for the items per thread"
    j = "optiml_j"
    data = source.encode("utf-8")
    # EXPR with the index replaced by the loop's
    sub = [(u.start_byte - expr.start_byte, u.end_byte - expr.start_byte, j) for u in inside
           if expr.start_byte <= u.start_byte < expr.end_byte]
    e = data[expr.start_byte:expr.end_byte]
    for s, t_, r in sorted(sub, reverse=True):
        e = e[:s] + r.encode() + e[t_:]
    acc_type = elem.replace("const", "").strip()
    loop = (f"{acc_type} optiml_acc = 0;\n"
            f"    for (size_t {j} = (size_t)({var}); {j} < (size_t)({limit}); {j} += (size_t)blockDim.x * gridDim.x)\n"
            f"        optiml_acc += {e.decode('utf-8')};\n    ")
    edits = [(stmt.start_byte, stmt.start_byte, loop), (ternary.start_byte, ternary.end_byte, "optiml_acc")]
    text = _splice(source, edits)
    new_grid = (f"cdiv({cd[0]}, ({cd[1]}) * {name})",)
    line = _launch_line(new_grid, block, smem)
    text = _with_launch(text, [f"#define {name} {items}"], line)
    return [Transform("accumulate", text, f"accumulate {name} = {items} before the block reduction",
                      f"each thread loads one element into {shared_name} and every block pays a tree reduction, its "
                      f"barriers and an atomicAdd for it; summing {items} elements a thread in a register first "
                      f"({name}, then tuned) launches {items}x fewer blocks, so the reduction is paid once per "
                      f"{items} loads and the loads stream.", hint=1.0)], None


# ----------------------------------------------------------------------------- warp shuffles
def warp_shuffle(source: str, entry: str = "", launch=None) -> tuple[list[Transform], str | None]:
    """The last five steps of a shared-memory tree sum in one warp with ``__shfl_down_sync``:
    ``for (int s = START; s > 0; s >>= 1) { if (t < s) SH[t] += SH[t + s]; __syncthreads(); }``
    (``t`` being ``threadIdx.x``) becomes the same loop down to ``s > 32``, then warp 0 adds
    ``SH[t] + SH[t + 32]`` and shuffles down from 16, and lane 0 writes ``SH[0]``; a barrier
    follows, as after the loop, so every thread reads the same ``SH[0]`` as before. Needs a block
    of at least 64 threads (a power of two): the spec's literal block or a source constant, checked
    at compile time by a ``static_assert``. Refused where the loop is anything else."""
    root = _tree(source)
    fn, _ = _entry_def(root, entry)
    if fn is None:
        return [], None
    shared = _shared_arrays(fn)
    if not shared or "__shfl" in _t(fn):
        return [], None
    t_names = {"threadIdx.x"}
    for n in _walk(fn):
        if n.type == "init_declarator":
            d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if d is not None and v is not None and _flat(_t(v)) == "threadIdx.x":
                t_names.add(_t(d))
    out, why = [], None
    for n in _walk(fn):
        if n.type != "for_statement":
            continue
        init, cond, update = (n.child_by_field_name(k) for k in ("initializer", "condition", "update"))
        if init is None or cond is None or update is None:
            continue
        m = re.fullmatch(r"(?:unsigned\s+)?int\s+(\w+)\s*=\s*(.+?)\s*;?", _flat(_t(init)))
        if not m:
            continue
        s, start = m.group(1), m.group(2)
        if _flat(_t(cond)).replace(" ", "") not in (f"{s}>0", f"{s}>=1") or \
                _flat(_t(update)).replace(" ", "") not in (f"{s}>>=1", f"{s}/=2", f"{s}={s}/2", f"{s}={s}>>1"):
            continue
        loop_body = n.child_by_field_name("body")
        stmts = [c for c in (loop_body.named_children if loop_body is not None else []) if c.type != "comment"]
        if len(stmts) != 2 or _flat(_t(stmts[1])).replace(" ", "") != "__syncthreads();":
            why = "not shuffled: the tree loop does more than one guarded add and a barrier"
            continue
        body_text = _flat(_t(stmts[0])).replace(" ", "")
        hit = None
        for tn in t_names:
            for sh in shared:
                elem = shared[sh].replace("const", "").strip()
                forms = (f"if({tn}<{s}){sh}[{tn}]+={sh}[{tn}+{s}];", f"if({tn}<{s}){{{sh}[{tn}]+={sh}[{tn}+{s}];}}",
                         f"if({tn}<{s}){sh}[{tn}]={sh}[{tn}]+{sh}[{tn}+{s}];",
                         f"if({tn}<{s}){{{sh}[{tn}]={sh}[{tn}]+{sh}[{tn}+{s}];}}")
                if body_text in forms and elem in ("float", "double", "int", "unsigned", "unsigned int"):
                    hit = (tn, sh, elem)
        if hit is None:
            why = "not shuffled: the tree loop's step is not `if (t < s) sh[t] += sh[t + s];`"
            continue
        tn, sh, elem = hit
        block = _block_expr(source, launch, start)
        if block is None:
            why = f"not shuffled: the block size behind the tree's start {start} is not known at compile time"
            continue
        old_cond = cond
        new = (f"{_t(n)[:old_cond.start_byte - n.start_byte]}{s} > 32{_t(n)[old_cond.end_byte - n.start_byte:]}\n"
               f"    static_assert(({block}) >= 64 && (({block}) & (({block}) - 1)) == 0, "
               f"\"the warp-shuffle tail needs a power-of-two block of at least 64 threads\");\n"
               f"    if ({tn} < 32) {{\n"
               f"        {elem} optiml_v = {sh}[{tn}] + {sh}[{tn} + 32];\n"
               f"        for (int optiml_o = 16; optiml_o > 0; optiml_o >>= 1)\n"
               f"            optiml_v += __shfl_down_sync(0xffffffffu, optiml_v, optiml_o);\n"
               f"        if ({tn} == 0) {sh}[0] = optiml_v;\n"
               f"    }}\n"
               f"    __syncthreads();")
        text = _splice(source, [(n.start_byte, n.end_byte, new)])
        out.append(Transform("shuffle", text, f"warp-shuffle tail of the {sh} tree" + (f" #{len(out) + 1}" if out else ""),
                             "the tree's last five steps keep most threads idle and pay a barrier each; inside one "
                             "warp, __shfl_down_sync adds registers directly with no barrier and no shared-memory "
                             "traffic.", hint=0.7))
    return (out, None) if out else ([], why)


def _block_expr(source: str, launch, start: str) -> str | None:
    """The block size that the tree's ``start`` halves, as a compile-time expression: the start
    ``B / 2`` (or ``B >> 1``) with B a source constant, or a literal equal to half the spec's
    literal block, or ``blockDim.x / 2`` with a literal or constant block."""
    info = parse_source(source)
    flat = _flat(start).replace(" ", "")
    m = re.fullmatch(r"\(?(\w+)(?:/2|>>1)\)?", flat)
    if m and m.group(1) in info.constants:
        return m.group(1)
    block = None
    if launch is not None:
        _, b, _ = launch if info.launch is None else info.launch.over(*launch)
        if b and len(b) == 1:
            block = b[0]
    if isinstance(block, str) and block.strip() in info.constants:
        half = f"({block.strip()} / 2)"
        if flat in (half.replace(" ", ""), f"{block.strip()}/2", "blockDim.x/2", "(blockDim.x/2)"):
            return block.strip()
        return None
    if isinstance(block, int) or (isinstance(block, str) and block.strip().isdigit()):
        b = int(block)
        if flat.isdigit() and int(flat) * 2 == b or flat in ("blockDim.x/2", "(blockDim.x/2)", "blockDim.x>>1"):
            return str(b)
    return None
