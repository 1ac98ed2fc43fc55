"""One partial a chunk, whatever the block, for the ``rules`` proposer: a first kernel whose block of
C threads loads one element a thread into shared memory, sums them with a tree and writes the block's
sum to ``partial[blockIdx.x]`` ties the output's layout to its block size, so no block-size move can
be right on it. :func:`chunk_partials` keeps C as the partial's extent and gives each chunk of C
elements to ``OPTIML_PARTIAL_THREADS`` threads (a warp, or fewer; wider groups add their warps'
sums through shared memory), each summing C / threads elements in registers (coalesced; ``float4``
loads where the chunk is whole and the arrays 16-byte aligned, checked at run time), adding across
the group with ``__shfl_down_sync``; its first thread writes ``partial[chunk]``.
``OPTIML_PARTIAL_CHUNKS_PER_BLOCK`` chunks a block (then tuned, with the threads), so the block is
their product and the grid ``cdiv(cdiv(X, C), OPTIML_PARTIAL_CHUNKS_PER_BLOCK)``.

Accepted: ``sh[t] = (i < LIMIT) ? EXPR : 0;`` (or ``if (i < LIMIT) sh[t] = EXPR; else sh[t] = 0;``)
with ``i`` the one-item index, ``__syncthreads();``, ``for (s = blockDim.x / 2 (or C / 2); s > 0;
s >>= 1 (or s /= 2)) { if (t < s) sh[t] += sh[t + s]; __syncthreads(); }`` and ``if (t == 0)
partial[blockIdx.x] = sh[0];``, ``t`` being ``threadIdx.x``, C a power of two: the launch's block,
a literal or a source constant, and the grid ``cdiv(X, C)``. Everything else is refused with the
reason: another combine than +, a second output, the partial written elsewhere, a block sum that
leaves through an atomic (:func:`optiml.edits.reductions.accumulate_first`'s case), dynamic shared
memory whose size cannot be read, a 2-D launch.
"""
from __future__ import annotations

import re

from .. import expr as _expr
from ..errors import ExprError
from ..source import _walk, parse_source
from .cutree import Transform, _entry_def, _flat, _params, _shared_arrays, _short, _t, _tree
from .reductions import _ZERO, _one_item_index, _strip_parens
from .structural import _cdiv_parts, _free_name, _launch_line, _literal_of, _with_launch

THREADS = 32            # threads a chunk (fewer where the chunk is smaller)
CHUNKS = 8              # chunks a block
THREADS_NAMES = ("OPTIML_PARTIAL_THREADS",)
CHUNKS_NAMES = ("OPTIML_PARTIAL_CHUNKS_PER_BLOCK",)
CHUNK_NAMES = ("OPTIML_PARTIAL_CHUNK",)     # the partial's extent: fixed by the output, never tuned
_NUMBER = ("float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long")
_ATOMIC = re.compile(r"\batomic\w+\s*\(")
_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|cooperative_groups)\b|\bcg::")


def _ns(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _stmts(node) -> list:
    """The statements of ``node``: a block's (comments aside), or the one statement itself."""
    if node is None:
        return []
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]


def _halving(for_node) -> tuple[str, str] | None:
    """(s, start) of ``for (int s = START; s > 0; s >>= 1)`` (``s /= 2``, ``s = s / 2``...), else None."""
    init, cond, update = (for_node.child_by_field_name(k) for k in ("initializer", "condition", "update"))
    if init is None or cond is None or update is None:
        return None
    m = re.fullmatch(r"(?:const\s+)?(?:unsigned\s+int|unsigned|int|size_t|long long)\s+(\w+)\s*=\s*(.+?)\s*;?",
                     _flat(_t(init)))
    if not m:
        return None
    s = m.group(1)
    if _ns(_t(update)) not in (f"{s}>>=1", f"{s}/=2", f"{s}={s}/2", f"{s}={s}>>1"):
        return None
    if _ns(_t(cond)) not in (f"{s}>0", f"{s}>=1", f"0<{s}", f"{s}!=0"):
        return None
    return s, m.group(2)


def _writes_first(body, shared: dict, pointers: set) -> bool:
    """Whether ``body`` writes a shared array's first element to one of the kernel's arrays (``P[...] = SH[0]``)."""
    for n in _walk(body):
        if n.type == "assignment_expression" and _t(n.child_by_field_name("operator")) == "=":
            left, right = n.child_by_field_name("left"), _strip_parens(_t(n.child_by_field_name("right")))
            m = re.fullmatch(r"(\w+)\s*\[\s*0\s*\]", right)
            if left.type == "subscript_expression" and _t(left.child_by_field_name("argument")) in pointers and \
                    m is not None and m.group(1) in shared:
                return True
    return False


def _written(body, pointers: set) -> list[str]:
    """The kernel's arrays that ``body`` writes (assigned, incremented, or through an atomic), in order."""
    out = []
    for n in _walk(body):
        target = None
        if n.type == "assignment_expression":
            target = n.child_by_field_name("left")
        elif n.type == "update_expression":
            target = n.child_by_field_name("argument")
        elif n.type == "call_expression" and _ATOMIC.match(_t(n)):
            args = n.child_by_field_name("arguments").named_children
            target = args[0] if args else None
        while target is not None and target.type in ("subscript_expression", "pointer_expression",
                                                     "parenthesized_expression", "binary_expression"):
            target = target.child_by_field_name("argument") or target.child_by_field_name("left") or \
                (target.named_children[0] if target.named_children else None)
        if target is not None and target.type == "identifier" and _t(target) in pointers and _t(target) not in out:
            out.append(_t(target))
    return out


_C_WORDS = {"size_t", "int", "long", "unsigned", "const", "float", "double", "short", "char", "signed"}


def _names(text: str) -> set[str]:
    """The names a C expression uses (members after a dot and C type words aside)."""
    return {n for n in re.findall(r"(?<![\w.])[A-Za-z_]\w*", text) if n not in _C_WORDS}


def _value(text, constants: dict) -> int | None:
    """``text`` as an integer (a literal, or an expression of the source's constants), else None."""
    lit = _literal_of(text)
    if lit is not None:
        return lit
    try:
        v = _expr.evaluate(str(text), dict(constants))
    except ExprError:
        return None
    return int(v) if float(v).is_integer() else None


def chunk_partials(source: str, entry: str = "", launch=None, threads: int = THREADS,
                   chunks: int = CHUNKS) -> tuple[list[Transform], str | None]:
    """The rewrite (see the module), or ([], why not); ``launch`` is the spec's (grid, block, shared_mem).
    Quiet (no reason) unless the entry has a shared array, a halving loop and a write of the shared
    array's first element (to an array, or through an atomic)."""
    if launch is None:
        return [], None
    root = _tree(source)
    fn, fdecl = _entry_def(root, entry)
    if fn is None:
        return [], None
    body = fn.child_by_field_name("body")
    shared = _shared_arrays(fn)
    params = _params(fdecl)
    pointers = {name for name, _, ptr, _ in params if ptr is not None}
    scalars = {name for name, _, ptr, _ in params if ptr is None}
    loops = [n for n in _walk(body) if n.type == "for_statement" and _halving(n) is not None]
    body_text = _t(body)
    atomic_of_first = any(re.search(rf"\batomic\w+\s*\([^;]*\b{re.escape(sh)}\s*\[\s*0\s*\]", body_text)
                          for sh in shared)
    info = parse_source(source)
    grid, block, smem = launch if info.launch is None else info.launch.over(*launch)
    block_names = {str(b).strip() for b in (block or ())[:1]} | \
        {str(_value(b, info.constants)) for b in (block or ())[:1] if _value(b, info.constants) is not None}
    t_names = _aliases(body)
    one_item = any(_index_of(n, t_names, block_names) for n in _walk(body) if n.type == "init_declarator")
    if not shared or not loops or not one_item or not (atomic_of_first or _writes_first(body, shared, pointers)):
        return [], None
    if _ATOMIC.search(body_text):
        return [], ("not chunked: the block's sum leaves through an atomic into one value (the accumulation "
                    "rewrite's case), not as one partial a block")
    written = _written(body, pointers)
    if len(written) > 1:
        return [], f"not chunked: the kernel writes a second output ({', '.join(written)}), not only one partial a block"
    if not grid or not block or len(grid) != 1 or len(block) != 1:
        return [], f"not chunked: the launch is not 1-D (grid {list(grid or ())}, block {list(block or ())})"
    c = _value(block[0], info.constants)
    if c is None or c < 2 or c > 1024 or c & (c - 1):
        return [], (f"not chunked: the block {block[0]} is not a power of two the rewrite can read, so the tree's "
                    "partial is not known to sum the whole block")
    cd = _cdiv_parts(grid[0])
    if cd is None or _value(cd[1], info.constants) != c:
        return [], f"not chunked: the grid {grid[0]} is not cdiv(X, {c}), so the number of partials is not known"
    count = cd[0]
    if not re.fullmatch(r"[\w\s+\-*()]+", count) or any(n not in scalars and n not in info.constants for n in _names(count)):
        return [], (f"not chunked: the grid's {count} is not made of the kernel's scalars and constants, so the "
                    "kernel cannot tell how many partials to write")
    floats = {name for name, _, ptr, p in params if ptr is not None and
              re.sub(r"\b(const|__restrict__|restrict|volatile)\b", "", _t(p).split("*")[0]).split() == ["float"]}
    found, why = _read(body, shared, pointers, floats, scalars, info.constants, t_names, block_names, c)
    if found is None:
        return [], why
    sh = found["shared"]
    elem = shared[sh].replace("const", "").replace("volatile", "").strip()
    if " ".join(elem.split()) not in _NUMBER:
        return [], f"not chunked: the shared array {sh} holds {elem}, not a number type"
    size_why = _shared_size(fn, sh, elem, smem, info.constants, c)
    if size_why:
        return [], size_why
    names = [_free_name(ns, info, source) for ns in (CHUNK_NAMES, THREADS_NAMES, CHUNKS_NAMES)]
    if None in names:
        return [], "not chunked: no free names for the rewrite's constants"
    chunk_name, threads_name, chunks_name = names
    threads = max(1, min(threads, c))
    text = _rewrite(source, body, found, elem, count, chunk_name, threads_name, chunks_name)
    line = _launch_line((f"cdiv(cdiv({count}, {c}), {chunks_name})",), [f"{chunks_name} * {threads_name}"], 0)
    text = _with_launch(text, [f"#define {chunk_name} {c}", f"#define {threads_name} {threads}",
                               f"#define {chunks_name} {chunks}"], line)
    name = str(block[0]).strip()
    if name in info.constants and len(re.findall(rf"\b{re.escape(name)}\b", text)) == 1:
        # the block's constant (a knob) is used no more: moving it would change nothing
        text = re.sub(rf"(?m)^[ \t]*#[ \t]*define[ \t]+{re.escape(name)}\b[^\n]*\n", "", text)
    vec = " with float4 loads where aligned" if found["vector"] else ""
    return [Transform("partials", text, f"partials of {c} by {threads} threads a chunk, {chunks_name} = {chunks}",
                      f"each block of {c} threads loads one element a thread and pays a shared-memory tree with "
                      f"{c.bit_length() - 1} barriers for one partial; now {threads_name} = {threads} threads sum "
                      f"a chunk of {c} in registers{vec} and add with warp shuffles, {chunks_name} chunks a block "
                      f"(both then tuned): the partials' layout no longer depends on the block.", hint=1.0)], None


def _aliases(body) -> set[str]:
    """``threadIdx.x`` and the names declared as it (``int t = threadIdx.x;``)."""
    out = {"threadIdx.x"}
    for n in _walk(body):
        if n.type == "init_declarator" and n.child_by_field_name("value") is not None and \
                _strip_parens(_flat(_t(n.child_by_field_name("value")))) == "threadIdx.x":
            out.add(_t(n.child_by_field_name("declarator")))
    return out


def _index_of(decl, t_names: set, block_names: set) -> bool:
    """Whether the init declarator ``decl`` declares the one-item index (``blockIdx.x * blockDim.x + t``,
    the block also as the launch's value or name)."""
    value = decl.child_by_field_name("value")
    if value is None:
        return False
    v = _flat(_t(value))
    for alias in t_names - {"threadIdx.x"}:
        v = re.sub(rf"(?<![\w.]){re.escape(alias)}(?!\w)", "threadIdx.x", v)
    return any(_one_item_index(v, b) for b in block_names | {None})


def _read(body, shared: dict, pointers: set, floats: set, scalars: set, constants: dict, t_names: set,
          block_names: set, c: int):
    """The kernel's parts (dict: shared, var, index type, limit, expr node, partial, reads, vector) or (None, why not)."""
    stmts = [s for s in body.named_children if s.type != "comment"]
    index, decls = None, 0
    for s in stmts:
        if s.type != "declaration":
            break
        decls += 1
        if "__shared__" in _t(s).split("[")[0]:
            continue
        for d in s.named_children:
            if d.type != "init_declarator":
                continue
            name, value = _t(d.child_by_field_name("declarator")), d.child_by_field_name("value")
            if name in t_names and value is not None and _strip_parens(_flat(_t(value))) == "threadIdx.x":
                continue
            if index is None and _index_of(d, t_names, block_names):
                t = s.child_by_field_name("type")
                index = (name, _t(t) if t is not None else "int")
            else:
                return None, (f"not chunked: the kernel declares {_short(_t(d))}, not only the thread's index and "
                              "its element's")
    rest = stmts[decls:]
    if index is None:
        return None, "not chunked: no one-item index `i = blockIdx.x * blockDim.x + threadIdx.x`"
    if len(rest) != 4:
        return None, ("not chunked: the kernel does more than load one element a thread, sync, reduce with a tree "
                      "and write one partial")
    load, sync, tree, write = rest
    var, itype = index
    got = _load(load, var, t_names, shared)
    if isinstance(got, str):
        return None, got
    sh, limit, expr = got
    if _ns(_t(sync)) != "__syncthreads();":
        return None, f"not chunked: the load is followed by {_short(_t(sync))}, not a barrier"
    why = _tree_step(tree, sh, t_names, constants, c)
    if why:
        return None, why
    partial, why = _write(write, sh, t_names, pointers)
    if partial is None:
        return None, why
    # what the loaded term may use: the index, the kernel's arguments and constants
    if re.search(r"&&|\|\||\?|[<>=!]", limit) or \
            any(n not in scalars and n not in constants for n in _names(limit)):
        return None, f"not chunked: the load's bound {limit} is not one comparison with the kernel's scalars"
    if _SYNC.search(_t(expr)) or _ATOMIC.search(_t(expr)):
        return None, "not chunked: the loaded term synchronises or is atomic"
    reads, other_use = [], False
    for n in _walk(expr):
        if n.type in ("assignment_expression", "update_expression"):
            return None, f"not chunked: the loaded term {_short(_t(expr))} changes a value"
        if n.type != "identifier":
            continue
        name, up = _t(n), n.parent
        if up is not None and up.type == "call_expression" and up.child_by_field_name("function").id == n.id:
            continue
        if name in (sh, partial):
            return None, f"not chunked: the loaded term reads {name}"
        if name not in pointers and name not in scalars and name not in constants and name != var:
            return None, (f"not chunked: the loaded term uses {name}, not only the element's index and the kernel's "
                          "arguments")
        if name in pointers and up is not None and up.type == "subscript_expression" and \
                _ns(_t(up.child_by_field_name("indices"))) == f"[{var}]":
            reads.append(up)
        elif name == var and up is not None and up.type == "subscript_argument_list" and _ns(_t(up)) == f"[{var}]" \
                and _t(up.parent.child_by_field_name("argument")) in pointers:
            continue
        elif name == var or name in pointers:
            other_use = True
    vector = bool(reads) and not other_use and c % 4 == 0 and \
        all(_t(r.child_by_field_name("argument")) in floats for r in reads)
    return dict(shared=sh, var=var, itype=itype, limit=limit, expr=expr, partial=partial, reads=reads,
                vector=vector), None


def _load(stmt, var: str, t_names: set, shared: dict):
    """(shared array, limit, EXPR node) of ``SH[t] = (var < LIMIT) ? EXPR : 0;`` or
    ``if (var < LIMIT) SH[t] = EXPR; else SH[t] = 0;``, else the reason."""
    why = f"not chunked: the load {_short(_t(stmt))} is not `sh[t] = (i < n) ? x[i] : 0`"

    def target(assign) -> str | None:
        if assign is None or assign.type != "assignment_expression" or _t(assign.child_by_field_name("operator")) != "=":
            return None
        left = assign.child_by_field_name("left")
        if left.type != "subscript_expression" or _t(left.child_by_field_name("argument")) not in shared:
            return None
        if _t(left.child_by_field_name("indices"))[1:-1].strip() not in t_names:
            return None
        return _t(left.child_by_field_name("argument"))

    def bound(cond) -> str | None:
        m = re.fullmatch(rf"{re.escape(var)}\s*<\s*(.+)", _strip_parens(_flat(_t(cond))))
        return m.group(1) if m else None

    def one(node):
        s = _stmts(node)
        return s[0].named_children[0] if len(s) == 1 and s[0].type == "expression_statement" and \
            s[0].named_children else None

    if stmt.type == "expression_statement" and stmt.named_children:
        a = stmt.named_children[0]
        sh = target(a)
        right = a.child_by_field_name("right") if sh else None
        while right is not None and right.type == "parenthesized_expression" and right.named_children:
            right = right.named_children[0]
        if right is None or right.type != "conditional_expression":
            return why
        cond, then, other = (right.child_by_field_name(k) for k in ("condition", "consequence", "alternative"))
        limit = bound(cond)
        if limit is None or not _ZERO.match(_flat(_t(other))):
            return why
        return sh, limit, then
    if stmt.type == "if_statement":
        alt = stmt.child_by_field_name("alternative")
        if alt is None:
            return why
        alt_body = [c for c in alt.named_children if c.type != "comment"]
        a_then = one(stmt.child_by_field_name("consequence"))
        a_else = one(alt_body[0]) if len(alt_body) == 1 else None
        sh = target(a_then)
        limit = bound(stmt.child_by_field_name("condition"))
        if sh is None or limit is None or target(a_else) != sh or \
                _ns(_t(a_else.child_by_field_name("left"))) != _ns(_t(a_then.child_by_field_name("left"))) or \
                not _ZERO.match(_flat(_t(a_else.child_by_field_name("right")))):
            return why
        return sh, limit, a_then.child_by_field_name("right")
    return why


def _tree_step(tree, sh: str, t_names: set, constants: dict, c: int) -> str | None:
    """Why ``tree`` is not ``for (s = C / 2; s > 0; s >>= 1) { if (t < s) SH[t] += SH[t + s]; __syncthreads(); }``."""
    got = _halving(tree) if tree.type == "for_statement" else None
    if got is None:
        return f"not chunked: {_short(_t(tree))} is not a halving tree loop `for (s = blockDim.x / 2; s > 0; s >>= 1)`"
    s, start = got
    start = _ns(_strip_parens(start))
    halves = {"blockDim.x/2", "blockDim.x>>1", str(c // 2), f"{c}/2", f"{c}>>1"}
    halves |= {f"{k}/2" for k, v in constants.items() if v == c} | {f"{k}>>1" for k, v in constants.items() if v == c}
    halves |= {k for k, v in constants.items() if v == c // 2}
    if start not in halves:
        return f"not chunked: the tree starts at {start}, not at half the block ({c // 2})"
    stmts = _stmts(tree.child_by_field_name("body"))
    if len(stmts) != 2 or _ns(_t(stmts[1])) != "__syncthreads();":
        return "not chunked: the tree loop does more than one guarded add and a barrier"
    step = _ns(_t(stmts[0]))
    for tn in t_names:
        adds = (f"{sh}[{tn}]+={sh}[{tn}+{s}];", f"{sh}[{tn}]={sh}[{tn}]+{sh}[{tn}+{s}];", f"{sh}[{tn}]+={sh}[{s}+{tn}];")
        if step in {f"if({tn}<{s}){a}" for a in adds} | {f"if({tn}<{s}){{{a}}}" for a in adds}:
            return None
    return f"not chunked: the tree's step {_short(_t(stmts[0]))} is not `if (t < s) sh[t] += sh[t + s];` (a sum)"


def _write(stmt, sh: str, t_names: set, pointers: set) -> tuple[str | None, str | None]:
    """(P, None) of ``if (t == 0) P[blockIdx.x] = SH[0];``, else (None, why not)."""
    why = f"not chunked: {_short(_t(stmt))} is not `if (t == 0) partial[blockIdx.x] = {sh}[0];`"
    if stmt.type != "if_statement" or stmt.child_by_field_name("alternative") is not None:
        return None, why
    cond = _ns(_strip_parens(_t(stmt.child_by_field_name("condition"))))
    if cond not in {f"{t}==0" for t in t_names} | {f"0=={t}" for t in t_names}:
        return None, why
    inner = _stmts(stmt.child_by_field_name("consequence"))
    if len(inner) != 1 or inner[0].type != "expression_statement":
        return None, why
    m = re.fullmatch(rf"(\w+)\[(.+)\]={re.escape(sh)}\[0\];", _ns(_t(inner[0])))
    if m is None or m.group(1) not in pointers:
        return None, why
    if _strip_parens(m.group(2)) != "blockIdx.x":
        return None, f"not chunked: the partial is written at {m.group(1)}[{m.group(2)}], not at [blockIdx.x]"
    return m.group(1), None


def _shared_size(fn, sh: str, elem: str, smem, constants: dict, c: int) -> str | None:
    """Why the shared array may hold less than the block's C elements (None: it holds them)."""
    for n in _walk(fn):
        if n.type != "array_declarator" or _t(n.child_by_field_name("declarator")) != sh:
            continue
        size = n.child_by_field_name("size")
        if size is None:              # extern __shared__ T sh[]: the launch's bytes
            nbytes = _value(str(smem), constants) if smem is not None else None
            width = 8 if elem in ("double", "long long", "unsigned long long") else 4
            if nbytes is None:
                return f"not chunked: the dynamic shared memory's size {smem} cannot be read"
            return None if nbytes >= c * width else \
                f"not chunked: the dynamic shared memory ({nbytes} bytes) holds fewer than the block's {c} elements"
        v = _value(_t(size), constants)
        if v is None:
            return f"not chunked: the size of {sh}, {_t(size)}, cannot be read"
        return None if v >= c else f"not chunked: {sh} holds {v} elements, fewer than the block's {c}"
    return None


def _rewrite(source: str, body, found: dict, elem: str, count: str, chunk: str, threads: str, chunks: str) -> str:
    """``source`` with the entry's body replaced by the chunked one."""
    var, itype, limit, expr, partial = found["var"], found["itype"], found["limit"], found["expr"], found["partial"]
    itype = re.sub(r"\b(const|volatile)\b", "", itype).strip() or "int"
    acc = " ".join(elem.split())
    scalar_term = _t(expr)
    vector = ""
    if found["vector"]:
        arrays = list(dict.fromkeys(_t(r.child_by_field_name("argument")) for r in found["reads"]))
        lanes = []
        for lane in "xyzw":
            term = source.encode("utf-8")[expr.start_byte:expr.end_byte]
            for r in sorted(found["reads"], key=lambda r: r.start_byte, reverse=True):
                name = _t(r.child_by_field_name("argument"))
                s, e = r.start_byte - expr.start_byte, r.end_byte - expr.start_byte
                term = term[:s] + f"optiml_{name}.{lane}".encode() + term[e:]
            lanes.append(f"                optiml_acc += ({acc})({term.decode('utf-8')});\n")
        aligned = " | ".join(f"reinterpret_cast<size_t>({a})" for a in arrays)
        loads = "".join(f"                const float4 optiml_{a} = reinterpret_cast<const float4 *>({a} + optiml_base)"
                        "[optiml_v];\n" for a in arrays)
        vector = (
            f"        const {itype} optiml_last = ({itype})(optiml_base + {chunk} - 1);\n"
            f"        if (optiml_last < ({limit}) && (({aligned}) & 15) == 0) {{\n"
            "            // a whole chunk, 16-byte aligned: float4 loads, a thread's 16 bytes beside the next's\n"
            "#pragma unroll\n"
            f"            for (int optiml_j = 0; optiml_j < ({chunk} / 4 + {threads} - 1) / {threads}; optiml_j++) {{\n"
            f"                const int optiml_v = optiml_lane + optiml_j * {threads};\n"
            f"                if ({chunk} / 4 % {threads} != 0 && optiml_v >= {chunk} / 4) break;\n"
            f"{loads}{''.join(lanes)}"
            "            }\n"
            "        } else")
    scalar = (
        f"{{\n"
        "#pragma unroll\n"
        f"            for (int optiml_j = 0; optiml_j < ({chunk} + {threads} - 1) / {threads}; optiml_j++) {{\n"
        f"                const int optiml_k = optiml_lane + optiml_j * {threads};\n"
        f"                const {itype} {var} = ({itype})(optiml_base + optiml_k);\n"
        f"                if (optiml_k < {chunk} && {var} < ({limit})) optiml_acc += ({acc})({scalar_term});\n"
        "            }\n"
        "        }\n")
    new_body = (
        "{\n"
        f"    // one partial a chunk of {chunk} elements, summed by {threads} threads; {chunks} chunks a block\n"
        f"    static_assert({threads} >= 1 && {threads} <= 1024 && ({threads} & ({threads} - 1)) == 0,\n"
        f"                  \"{threads} must be a power of two up to 1024\");\n"
        f"    const int optiml_lane = threadIdx.x % {threads};\n"
        f"    const long long optiml_chunk = (long long)blockIdx.x * {chunks} + threadIdx.x / {threads};\n"
        f"    const long long optiml_chunks = ((long long)({count}) + {chunk} - 1) / {chunk};\n"
        f"    const long long optiml_base = optiml_chunk * {chunk};\n"
        f"    {acc} optiml_acc = 0;\n"
        "    if (optiml_chunk < optiml_chunks) {\n"
        f"{vector}{' ' if vector else '        '}{scalar}"
        "    }\n"
        f"    // the group adds its threads' sums: shuffles in each warp (every thread of the block takes part)\n"
        f"    constexpr int optiml_width = {threads} < 32 ? {threads} : 32;\n"
        "    const unsigned optiml_mask = blockDim.x >= 32 ? 0xffffffffu : (1u << blockDim.x) - 1u;\n"
        "#pragma unroll\n"
        "    for (int optiml_o = optiml_width / 2; optiml_o > 0; optiml_o >>= 1)\n"
        "        optiml_acc += __shfl_down_sync(optiml_mask, optiml_acc, optiml_o, optiml_width);\n"
        f"#if {threads} > 32\n"
        f"    __shared__ {acc} optiml_warps[1024 / 32];      // a group wider than a warp: its warps' sums\n"
        "    if (threadIdx.x % 32 == 0) optiml_warps[threadIdx.x / 32] = optiml_acc;\n"
        "    __syncthreads();\n"
        "    if (optiml_lane == 0)\n"
        f"        for (int optiml_w = 1; optiml_w < {threads} / 32; optiml_w++)\n"
        "            optiml_acc += optiml_warps[threadIdx.x / 32 + optiml_w];\n"
        "#endif\n"
        f"    if (optiml_lane == 0 && optiml_chunk < optiml_chunks) {partial}[optiml_chunk] = optiml_acc;\n"
        "}")
    data = source.encode("utf-8")
    return (data[:body.start_byte] + new_body.encode("utf-8") + data[body.end_byte:]).decode("utf-8")
