"""Structural rewrites of the ``rules`` proposer for code nobody wrote for tuning: a
literal launch block made a knob, thread coarsening of a one-item 1-D kernel, and vectorized loads
and stores. Each returns (transforms, why not): the reason a rewrite that looked applicable was
refused, so that the proposer can say it."""
from __future__ import annotations

import re

from ..source import _walk, function_declarator, parse_source
from .cutree import Transform, _entry_def, _params, _splice, _t, _tree


# ----------------------------------------------------------------------------- knobs from literals
# prefixed: a header's own BLOCK_THREADS (CUB's) or BLOCK_SIZE is never redefined
KNOB_NAMES = ("OPTIML_BLOCK_SIZE", "OPTIML_BLOCK_THREADS")


def _literal_of(dim) -> int | None:
    """An integer written as a literal in a launch expression (``1024`` or ``"1024"``), else None."""
    if isinstance(dim, bool):
        return None
    if isinstance(dim, int):
        return dim
    if isinstance(dim, str) and re.fullmatch(r"\s*\d+\s*", dim):
        return int(dim)
    return None


def _toml_dims(dims) -> str:
    return "[" + ", ".join(f'"{d}"' if isinstance(d, str) else str(d) for d in dims) + "]"


def _launch_line(grid, block, smem) -> str:
    """A ``// optiml:launch`` line (the candidate's own launch) for these dimensions."""
    return (f"// optiml:launch {{grid = {_toml_dims(grid)}, block = {_toml_dims(block)}, "
            f"shared_mem = {_toml_dims([smem if smem is not None else 0])[1:-1]}}}")


def _split_args(text: str) -> list[str]:
    """The top-level comma-separated parts of ``text`` (parentheses balanced)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    parts.append(cur.strip())
    return parts


def _cdiv_parts(expr) -> tuple[str, str] | None:
    """(X, B) of a launch expression that is exactly ``cdiv(X, B)``, else None."""
    if not isinstance(expr, str):
        return None
    m = re.fullmatch(r"\s*cdiv\((.*)\)\s*", expr)
    if not m:
        return None
    parts = _split_args(m.group(1))
    return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None


def _with_launch(text: str, defines: list[str], line: str) -> str:
    """``text`` with its ``// optiml:launch`` line replaced by ``line`` (or ``line`` added) and the
    ``#define``s written after its last top-level ``#include`` (a header sees none of them)."""
    found = parse_source(text).launch
    lines = text.splitlines(keepends=True)
    if found is not None:
        lines[found.line - 1] = line + "\n"
        added = []
    else:
        added = [line + "\n"]
    last = max((i for i, ln in enumerate(lines) if ln.lstrip().startswith("#include")), default=-1)
    return "".join(lines[:last + 1] + [d + "\n" for d in defines] + added + lines[last + 1:])


def _free_name(names, info, source: str) -> str | None:
    return next((n for n in names if n not in info.constants and not re.search(rf"\b{n}\b", source)), None)


def tie_block_literal(source: str, entry: str = "", launch=None) -> tuple[list[Transform], str | None]:
    """Knobs from literals: a launch whose block is one literal (``block = [1024]``) and a kernel
    whose shared arrays, halving reduction strides and block-stride loop steps repeat it
    (``__shared__ float sh[1024]``, ``for (s = 512; s > 0; s >>= 1)``, ``i += 1024``) are one
    quantity. The variant names it (``#define BLOCK_SIZE 1024``), writes the name at each of those
    places and in the launch (a ``// optiml:launch`` line carrying the spec's grid and shared memory
    with the literal replaced), so the tuning of named constants can move it. ``launch``: the spec's
    (grid, block, shared_mem). Returns (transforms, why not): a literal that also appears where
    it may mean something else is left alone, and the reason is the second value."""
    if launch is None:
        return [], None
    info = parse_source(source)
    grid, block, smem = launch if info.launch is None else info.launch.over(*launch)   # the source's own, if any
    if not block or len(block) != 1:
        return [], None
    value = _literal_of(block[0])
    if value is None or value < 32 or value & (value - 1):
        return [], None
    root = _tree(source)
    fn, _ = _entry_def(root, entry)
    if fn is None:
        return [], None
    per_block = re.search(r"\b(\w+)\s*\[\s*blockIdx\.x\s*\]\s*(=(?!=)|\+=)", _t(fn))
    if per_block:
        return [], (f"the kernel writes one value a block ({per_block.group(1)}[blockIdx.x]): its block size is the "
                    f"outputs' layout, so the block's literal is not made a knob")
    name = _free_name(KNOB_NAMES, info, source)
    if name is None:
        return [], "no free name for the block size"
    # the launch: the literal is tied only as the divisor of a cdiv(X, B) grid (or of a coarsened
    # cdiv(X, (B) * K)); anywhere else in the grid or the shared memory it may mean something else
    new_grid = []
    for g in grid:
        parts = _cdiv_parts(g)
        times = re.fullmatch(rf"\(\s*{value}\s*\)\s*\*\s*(.+)", parts[1].strip()) if parts is not None else None
        if parts is not None and _literal_of(parts[1]) == value:
            new_grid.append(f"cdiv({parts[0]}, {name})")
        elif times and not re.search(rf"(?<![\w.]){value}(?![\w.])", times.group(1)):   # a coarsened grid
            new_grid.append(f"cdiv({parts[0]}, ({name}) * {times.group(1)})")
        elif re.search(rf"(?<![\w.]){value}(?![\w.])", str(g)):
            return [], f"the launch's grid {g} also holds {value}, so the block's literal is not made a knob"
        else:
            new_grid.append(g)
    if smem is not None and re.search(rf"(?<![\w.]){value}(?![\w.])", str(smem)):
        return [], f"the launch's shared memory {smem} also holds {value}, so the block's literal is not made a knob"
    edits, loose = [], []
    half = value // 2
    for n in _walk(fn):
        if n.type != "number_literal":
            continue
        text = _t(n)
        if not text.isdigit() or int(text) not in (value, half):
            continue
        v = int(text)
        parent = n.parent
        ctx = parent.parent if parent is not None else None
        if v == value and parent is not None and parent.type == "array_declarator" and _is_shared(parent):
            edits.append((n.start_byte, n.end_byte, name))
        elif v == half and _halving_start(n):
            edits.append((n.start_byte, n.end_byte, f"({name} / 2)"))
        elif v == value and parent is not None and parent.type == "assignment_expression" and \
                _t(parent.child_by_field_name("operator") or parent).strip() == "+=" and ctx is not None and \
                ctx.type in ("for_statement", "expression_statement", "comma_expression"):
            edits.append((n.start_byte, n.end_byte, name))
        else:
            loose.append(f"{text} at line {n.start_point[0] + 1}")
    if loose:
        return [], (f"the block's {value} also appears where it may mean something else ({', '.join(loose[:3])}), "
                    f"so it is not made a knob")
    line = _launch_line(new_grid, [name], smem)
    text = _with_launch(_splice(source, edits), [f"#define {name} {value}"], line)
    where = f"{len(edits)} place{'s' if len(edits) != 1 else ''} in the kernel" if edits else "the launch only"
    return [Transform("knob", text, f"knob {name} = {value}",
                      f"the launch's block of {value} threads is written as a literal; named {name} (at {where} "
                      f"and in the launch) so that it can be tuned like any block dimension.", hint=1.0)], None


def _is_shared(array_declarator) -> bool:
    decl = array_declarator.parent
    while decl is not None and decl.type not in ("declaration", "field_declaration"):
        decl = decl.parent
    return decl is not None and "__shared__" in _t(decl).split("[")[0]


def _halving_start(number) -> bool:
    """``number`` starts a loop variable that the loop halves: ``for (int s = 512; ...; s >>= 1)``
    (or ``s /= 2``, ``s = s / 2``, ``s = s >> 1``)."""
    n = number.parent
    while n is not None and n.type not in ("for_statement",):
        if n.type in ("compound_statement", "function_definition"):
            return False
        n = n.parent
    if n is None:
        return False
    init = n.child_by_field_name("initializer")
    update = n.child_by_field_name("update")
    if init is None or update is None or not (init.start_byte <= number.start_byte < init.end_byte):
        return False
    m = re.search(r"(\w+)\s*=\s*\d+", _t(init))
    if not m:
        return False
    var = m.group(1)
    u = re.sub(r"\s+", "", _t(update))
    return u in (f"{var}>>=1", f"{var}/=2", f"{var}={var}/2", f"{var}={var}>>1")


# ----------------------------------------------------------------------------- thread coarsening
ITEMS_NAMES = ("OPTIML_ITEMS_PER_THREAD", "OPTIML_ITEMS")
_INDEX = re.compile(r"(\(\s*(size_t|long long|unsigned|int64_t|long)\s*\)\s*)?")
_ONE_ITEM_INDEX = [re.compile(rf"^{a}\s*\*\s*{b}\s*\+\s*threadIdx\.x$|^threadIdx\.x\s*\+\s*{a}\s*\*\s*{b}$")
                   for a, b in ((r"(\(\s*\w+(\s+\w+)?\s*\)\s*)?blockIdx\.x", r"(\(\s*\w+(\s+\w+)?\s*\)\s*)?blockDim\.x"),
                                (r"(\(\s*\w+(\s+\w+)?\s*\)\s*)?blockDim\.x", r"(\(\s*\w+(\s+\w+)?\s*\)\s*)?blockIdx\.x"))]


def _one_item(source: str, entry: str, launch):
    """The parts of a one-item 1-D kernel (see :func:`grid_stride`) as a dict, or (None, why not)."""
    if launch is None:
        return None, None
    info = parse_source(source)
    grid, block, smem = launch if info.launch is None else info.launch.over(*launch)   # the source's own, if any
    if not grid or len(grid) != 1:
        return None, None
    cd = _cdiv_parts(grid[0])
    if cd is None:
        return None, None
    root = _tree(source)
    fn, _ = _entry_def(root, entry)
    if fn is None:
        return None, None
    body = fn.child_by_field_name("body")
    stmts = [c for c in body.named_children if c.type != "comment"]
    if len(stmts) < 2 or stmts[0].type != "declaration":
        return None, None
    decls = [d for d in stmts[0].named_children if d.type == "init_declarator"]
    if len(decls) != 1 or any(c.type == "," for c in stmts[0].children):
        return None, None
    var_node = decls[0].child_by_field_name("declarator")
    value = decls[0].child_by_field_name("value")
    if var_node is None or value is None or var_node.type != "identifier":
        return None, None
    var, idx = _t(var_node), _t(value)
    flat = re.sub(r"\s+", " ", idx).strip()
    if not any(p.match(flat) for p in _ONE_ITEM_INDEX):     # exactly one item a thread, in order
        return None, None
    type_text = source.encode("utf-8")[stmts[0].start_byte:decls[0].start_byte].decode("utf-8").strip()
    type_text = re.sub(r"\bconst\b\s*", "", type_text)    # the loop moves it
    cond = stmts[1]
    if cond.type != "if_statement" or cond.child_by_field_name("alternative") is not None:
        return None, None
    ctext = re.sub(r"\s+", " ", _t(cond.child_by_field_name("condition"))).strip()
    lt = re.fullmatch(rf"\(\s*{re.escape(var)}\s*<\s*(.+?)\s*\)", ctext)
    ge = re.fullmatch(rf"\(\s*{re.escape(var)}\s*>=\s*(.+?)\s*\)", ctext)
    limit = (lt or ge).group(1) if (lt or ge) else ""
    if not limit or re.search(r"&&|\|\||\?|,|[<>=!]", limit):      # one comparison, nothing more
        return None, None
    consequence = cond.child_by_field_name("consequence")
    if lt and len(stmts) == 2:
        rest = _t(consequence)
    elif ge and re.fullmatch(r"\{?\s*return\s*;\s*\}?", _t(consequence).strip()) and len(stmts) > 2:
        data = source.encode("utf-8")           # everything after the guard, its comments too
        rest = "{" + data[stmts[1].end_byte:body.end_byte - 1].decode("utf-8").rstrip() + "\n    }"
    else:
        return None, None
    why = _coarsen_blocker(rest, var, source)
    if why:
        return None, f"not coarsened: the loop body {why}"
    rest_range = (consequence.start_byte, consequence.end_byte) if lt else (stmts[1].end_byte, body.end_byte - 1)
    return dict(info=info, grid=grid, block=block, smem=smem, cd=cd, body=body, var=var, idx=idx, limit=limit,
                rest=rest, type_text=type_text, fn=fn, rest_range=rest_range), None


def grid_stride(source: str, entry: str = "", launch=None, items: int = 4) -> tuple[list[Transform], str | None]:
    """Thread coarsening for a 1-D index kernel: ``T i = <blockIdx.x, threadIdx.x...>;`` followed by
    ``if (i < LIMIT) BODY`` (or ``if (i >= LIMIT) return; BODY...``) and nothing else becomes a
    grid-stride loop, ``for (T i = ...; i < LIMIT; i += blockDim.x * gridDim.x) BODY``, and the launch's
    ``cdiv(X, B)`` grid becomes ``cdiv(X, (B) * ITEMS_PER_THREAD)`` (a ``// optiml:launch`` line), so
    each thread does ITEMS_PER_THREAD items, a constant the tuning moves. A grid-stride loop covers
    every index once whatever the grid, so the rewrite is right for any value. Refused (with the
    reason) where the body synchronises, returns, breaks, uses shared memory or changes the index."""
    parts, why = _one_item(source, entry, launch)
    if parts is None:
        return [], why
    info, block, smem, cd, body = parts["info"], parts["block"], parts["smem"], parts["cd"], parts["body"]
    var, idx, limit, rest, type_text = parts["var"], parts["idx"], parts["limit"], parts["rest"], parts["type_text"]
    name = _free_name(ITEMS_NAMES, info, source)
    if name is None:
        return [], "not coarsened: no free name for the items per thread"
    loop = f"for ({type_text} {var} = {idx}; {var} < {limit}; {var} += blockDim.x * gridDim.x) {rest.strip()}"
    new_body = "{\n    " + loop + "\n}"
    text = _splice(source, [(body.start_byte, body.end_byte, new_body)])
    new_grid = (f"cdiv({cd[0]}, ({cd[1]}) * {name})",)
    line = _launch_line(new_grid, block, smem)
    text = _with_launch(text, [f"#define {name} {items}"], line)
    return [Transform("coarsen", text, f"grid-stride loop, {name} = {items}",
                      f"one item per thread: a grid-stride loop with {items} items per thread ({name}, then "
                      f"tuned) launches {items}x fewer blocks and amortises each thread's index arithmetic.",
                      hint=0.8)], None


def _coarsen_blocker(body: str, var: str, source: str) -> str | None:
    """Why ``body`` cannot run in a loop over ``var`` (None: it can)."""
    if re.search(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any\w*|__all\w*|__activemask|"
                 r"__reduce\w*|__match\w*|cooperative_groups)\b|_sync\s*\(|\bcg::|\.sync\s*\(", body):
        return "synchronises threads or works across a warp (a loop would change who meets whom)"
    if re.search(r"\b(blockIdx|threadIdx|blockDim|gridDim)\b", body):
        return "uses the thread's place in the grid (a thread now does several items)"
    device_fns = set(re.findall(r"__device__[^;{(]*?\b(\w+)\s*\(", source))
    called = {f for f in device_fns if re.search(rf"\b{re.escape(f)}\s*\(", body)}
    if called:
        return f"calls {', '.join(sorted(called))}, whose body is not checked"
    if re.search(r"\breturn\b", body):
        return "returns early"
    if re.search(r"\b(break|continue|goto)\b", body):
        return "breaks out of its flow"
    if "__shared__" in source:
        return "belongs to a kernel that uses shared memory"
    if re.search(rf"(\b{re.escape(var)}\s*(=[^=]|\+=|-=|\*=|/=|\+\+|--))|((\+\+|--)\s*{re.escape(var)}\b)", body):
        return f"changes {var}"
    return None


# ----------------------------------------------------------------------------- vectorized access
_LANES = "xyzw"


def vectorize_float4(source: str, entry: str = "", launch=None) -> tuple[list[Transform], str | None]:
    """Vectorized global loads and stores for a one-item 1-D kernel (:func:`grid_stride`'s form) whose
    body touches float arrays only as ``A[i]``: each thread takes four consecutive items a step,
    one ``float4`` load per array read and one store per array written, the body run once a lane;
    a scalar loop does the tail, and the whole scalar loop runs instead when a pointer is not 16-byte
    aligned. Both are grid-stride loops, so the launch's ``cdiv(X, B)`` grid is divided by 4. Refused
    where the body uses the index as a value, indexes a float array otherwise, or touches an array
    of another type."""
    parts, why = _one_item(source, entry, launch)
    if parts is None:
        return [], why and why.replace("not coarsened", "not vectorized")
    fn, var, limit, idx, type_text = parts["fn"], parts["var"], parts["limit"], parts["idx"], parts["type_text"]
    rs, re_ = parts["rest_range"]
    fdecl = function_declarator(fn)
    floats = {name for name, _, ptr, param in _params(fdecl) if ptr is not None and
              re.sub(r"\b(const|__restrict__|restrict)\b", "", _t(param).split("*")[0]).split() == ["float"]}
    pointers = {name for name, _, ptr, _ in _params(fdecl) if ptr is not None}
    reads, writes, edits, index_uses = [], [], [], 0
    for n in _walk(fn):
        if not (rs <= n.start_byte < re_):
            continue
        if n.type == "subscript_expression":
            arg, ix = n.child_by_field_name("argument"), n.child_by_field_name("indices")
            name = _t(arg) if arg is not None else ""
            if name not in pointers:
                continue
            if name not in floats:
                return [], f"not vectorized: the body touches {name}, which is not a float array"
            if ix is None or _t(ix).strip()[1:-1].strip() != var:
                return [], f"not vectorized: {_t(n)} is not {name}[{var}]"
            index_uses += 1
            parent = n.parent
            written = parent is not None and parent.type == "assignment_expression" and \
                parent.child_by_field_name("left") is not None and parent.child_by_field_name("left").id == n.id
            op = _t(parent.child_by_field_name("operator")) if written else ""
            if written:
                writes.append(name)
            if not written or op != "=":
                reads.append(name)
            edits.append((n.start_byte - rs, n.end_byte - rs, name))
        elif n.type == "identifier" and _t(n) == var:
            index_uses -= 1
    if not edits:
        return [], None
    if index_uses != 0:
        return [], f"not vectorized: the body uses {var} as a value"
    region = source.encode("utf-8")[rs:re_]
    lanes = []
    for c in _LANES:
        data = region
        for start, end, name in sorted(edits, reverse=True):
            data = data[:start] + f"optiml_{name}.{c}".encode() + data[end:]
        lanes.append("{ " + data.decode("utf-8").strip() + " }")
    arrays = list(dict.fromkeys(reads + writes))
    loads = "".join(f"            float4 optiml_{a} = reinterpret_cast<const float4*>({a})[optiml_v];\n" if a in reads
                    else f"            float4 optiml_{a};\n" for a in arrays)
    stores = "".join(f"            reinterpret_cast<float4*>({a})[optiml_v] = optiml_{a};\n"
                     for a in dict.fromkeys(writes))
    aligned = " | ".join(f"reinterpret_cast<size_t>({a})" for a in arrays)
    rest = parts["rest"].strip()
    new_body = (
        "{\n"
        "    const size_t optiml_stride = (size_t)blockDim.x * gridDim.x;\n"
        "    const size_t optiml_first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    if ((({aligned}) & 15) == 0) {{      // 16-byte aligned: four items a step\n"
        f"        const size_t optiml_vectors = ({limit}) > 0 ? (size_t)({limit}) / 4 : 0;\n"
        "        for (size_t optiml_v = optiml_first; optiml_v < optiml_vectors; optiml_v += optiml_stride) {\n"
        f"{loads}"
        + "".join(f"            {lane}\n" for lane in lanes) +
        f"{stores}"
        "        }\n"
        f"        for ({type_text} {var} = optiml_vectors * 4 + optiml_first; {var} < {limit}; {var} += optiml_stride) {rest}\n"
        "    } else {\n"
        f"        for ({type_text} {var} = {idx}; {var} < {limit}; {var} += optiml_stride) {rest}\n"
        "    }\n"
        "}")
    text = _splice(source, [(parts["body"].start_byte, parts["body"].end_byte, new_body)])
    cd, block, smem = parts["cd"], parts["block"], parts["smem"]
    line = _launch_line((f"cdiv({cd[0]}, ({cd[1]}) * 4)",), block, smem)
    text = _with_launch(text, [], line)
    return [Transform("vectorize", text, "float4 loads and stores",
                      f"the body reads {', '.join(dict.fromkeys(reads)) or 'nothing'} and writes "
                      f"{', '.join(dict.fromkeys(writes)) or 'nothing'} one float at a time; four a step "
                      f"(float4, 16-byte transactions) cut the load and store instructions by four.", hint=0.8)], None
