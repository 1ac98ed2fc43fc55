"""Safe source transformations for the ``rules`` proposer: pure functions, source in, variants out.

Each function returns a list of :class:`Transform` (the whole new source, extra nvcc flags, a short
stable ``edit`` description, a rationale, and a ``hint`` in (0, 1] saying how likely the transform
is to matter for this source). Matching uses tree-sitter-cuda; edits are text replacements on the
byte ranges of the tree, so formatting and comments elsewhere are untouched. A transform that is
not certainly safe is not produced: when unsure, don't.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .. import expr as _expr
from ..errors import ExprError
from ..source import _parser, _walk, function_declarator, parse_source
from ..spec.space import TUNABLE_NAME, constant_sites

MAX_THREADS = 1024
MAX_STATIC_SMEM = 48 * 1024
REG_CAPS = (32, 64, 128)

_TUNABLE = TUNABLE_NAME
_BLOCKISH = re.compile(r"(BLOCK|THREADS|TPB)")
_FOUR_BYTE = {"float", "int", "unsigned", "unsigned int", "uint32_t", "int32_t"}


@dataclass(frozen=True)
class Transform:
    kind: str                    # tune | knob | coarsen | vectorize | pad | restrict | const | unroll | launch_bounds | flag
    source: str
    edit: str
    rationale: str
    flags: tuple[str, ...] = ()  # extra nvcc flags this variant adds
    hint: float = 1.0


# ----------------------------------------------------------------------------- tree helpers
def _tree(source: str):
    return _parser().parse(source.encode("utf-8")).root_node


def _t(node) -> str:
    return node.text.decode("utf-8", "replace")


def _splice(source: str, edits: list[tuple[int, int, str]]) -> str:
    """Replace byte ranges (start, end, text) of ``source``; ranges must not overlap."""
    data = source.encode("utf-8")
    for start, end, text in sorted(edits, reverse=True):
        data = data[:start] + text.encode("utf-8") + data[end:]
    return data.decode("utf-8")


def _entry_def(root, entry: str = ""):
    """The ``__global__`` function_definition named ``entry`` (or the only/first one)."""
    found = []
    for n in _walk(root):
        if n.type == "function_definition" and any(c.type == "__global__" for c in n.children):
            fd = _fdecl(n)
            if fd is not None:
                found.append((_t(fd.child_by_field_name("declarator")), n, fd))
    for name, n, fd in found:
        if not entry or name == entry:
            return n, fd
    return None, None


_fdecl = function_declarator


def _params(fdecl):
    """(name, identifier node, pointer_declarator node or None, param node) of each parameter."""
    out = []
    plist = fdecl.child_by_field_name("parameters")
    for p in plist.children if plist is not None else []:
        if p.type != "parameter_declaration":
            continue
        d, ptr = p.child_by_field_name("declarator"), None
        while d is not None and d.type == "pointer_declarator":
            ptr = d
            d = d.child_by_field_name("declarator")
        if d is not None and d.type == "identifier":
            out.append((_t(d), d, ptr, p))
    return out


def _constant_defs(root):
    """name -> (value, start byte, end byte of the integer literal) for tunable integer constants."""
    return {name: (site.value, site.start, site.end) for name, site in constant_sites(root).items()}


def _eval(text, env):
    try:
        return _expr.evaluate(text, env)
    except ExprError:
        return None


# ----------------------------------------------------------------------------- launch geometry
def block_dims(source: str, entry: str = "") -> tuple[str, ...] | None:
    """The entry's block dimensions as expressions, when the source shows them.

    From a ``// optiml:launch`` comment if present, else from ``blockIdx.x * NAME`` style indexing
    with constant NAMEs (x, y, z in order). None when unknown.
    """
    info = parse_source(source)
    if info.launch is not None and info.launch.block:
        return tuple(str(b) for b in info.launch.block)
    fn, _ = _entry_def(_tree(source), entry)
    if fn is None:
        return None
    body = _t(fn.child_by_field_name("body"))
    dims = {}
    for axis in "xyz":
        for pat in (rf"blockIdx\.{axis}\s*\*\s*([A-Za-z_]\w*)", rf"([A-Za-z_]\w*)\s*\*\s*blockIdx\.{axis}\b"):
            m = re.search(pat, body)
            if m and m.group(1) in info.constants:
                dims[axis] = m.group(1)
                break
    if "x" not in dims:
        return None
    return tuple(dims[a] for a in "xyz" if a in dims)


def _literal_launch_bounds(fn) -> int | None:
    for c in fn.children:
        if c.type == "launch_bounds":
            nums = [x for x in c.children if x.type == "number_literal"]
            return int(_t(nums[0])) if nums and _t(nums[0]).isdigit() else None
    return None


def _static_smem(root, env) -> int | None:
    total = 0
    for n in _walk(root):
        if n.type != "declaration" or not any(_t(c) == "__shared__" for c in n.children if c.type == "type_qualifier"):
            continue
        if any(_t(c) == "extern" for c in n.children):
            continue
        d = n.child_by_field_name("declarator")
        count = 1
        while d is not None and d.type == "array_declarator":
            size = d.child_by_field_name("size")
            v = _eval(_t(size), env) if size is not None else None
            if v is None:
                return None
            count *= int(v)
            d = d.child_by_field_name("declarator")
        ty = n.child_by_field_name("type")
        total += count * (8 if ty is not None and _t(ty) in ("double", "long long", "size_t") else 4)
    return total


# ----------------------------------------------------------------------------- 1. tunables
def _neighbours(v: int) -> list[int]:
    lo = 1 << (v.bit_length() - 1) if v > 1 else 0
    lo = lo // 2 if lo == v else lo
    hi = 1 << v.bit_length()
    return [x for x in (lo, hi) if x >= 1]


def tune_constants(source: str, entry: str = "", block: tuple[str, ...] | None = None) -> list[Transform]:
    """Integer tunables (``#define BLOCK 16``, ``constexpr int TILE = 32;``) to neighbouring powers
    of two, keeping threads per block <= 1024 and static shared memory <= 48 KiB."""
    root = _tree(source)
    defs = _constant_defs(root)
    info = parse_source(source)
    dims = block or block_dims(source, entry)
    fn, _ = _entry_def(root, entry)
    cap = _literal_launch_bounds(fn) if fn is not None else None
    out = []
    for name, (value, start, end) in sorted(defs.items()):
        if not _TUNABLE.search(name) or value < 1:
            continue
        for new in _neighbours(value):
            env = dict(info.constants)
            env[name] = new
            if dims:
                threads = [_eval(d, env) for d in dims]
                if all(t is not None for t in threads):
                    n = math.prod(int(t) for t in threads)
                    if n > min(MAX_THREADS, cap or MAX_THREADS) or n < 1:
                        continue
                elif _BLOCKISH.search(name) and new > MAX_THREADS:
                    continue
            elif _BLOCKISH.search(name) and new > min(MAX_THREADS, cap or MAX_THREADS):
                continue
            smem = _static_smem(root, env)
            if smem is not None and smem > MAX_STATIC_SMEM:
                continue
            role = "block dimension" if dims and any(name in _expr.names_in(d) for d in dims) else "tunable"
            out.append(Transform(
                "tune", _splice(source, [(start, end, str(new))]), f"{name} {value} -> {new}",
                f"{name} is a {role}; {new} changes the work per block and the occupancy/reuse trade-off "
                f"({'halving' if new < value else 'doubling'} it, within the hardware limits).",
                hint=1.0 if role == "block dimension" else 0.7))
    return out


# ----------------------------------------------------------------------------- 2. shared padding
def pad_shared(source: str) -> list[Transform]:
    """``__shared__ float S[A][B];`` -> ``S[A][B + 1]`` for 4-byte 2-D arrays whose last dimension
    is a power of two or a named constant (the layout that makes column accesses hit one bank)."""
    root = _tree(source)
    consts = parse_source(source).constants
    lane_vars = {"threadIdx.x"}
    for n in _walk(root):   # variables initialised from threadIdx.x (tx = threadIdx.x)
        if n.type == "init_declarator" and n.child_by_field_name("value") is not None \
                and "threadIdx.x" in _t(n.child_by_field_name("value")):
            lane_vars.add(_t(n.child_by_field_name("declarator")))
    out = []
    for n in _walk(root):
        if n.type != "declaration" or not any(_t(c) == "__shared__" for c in n.children if c.type == "type_qualifier"):
            continue
        ty = n.child_by_field_name("type")
        outer = n.child_by_field_name("declarator")
        if ty is None or " ".join(_t(ty).split()) not in _FOUR_BYTE or outer is None or outer.type != "array_declarator":
            continue
        inner = outer.child_by_field_name("declarator")
        if inner is None or inner.type != "array_declarator" or inner.child_by_field_name("declarator").type != "identifier":
            continue
        last, first = outer.child_by_field_name("size"), inner.child_by_field_name("size")
        if last is None or first is None:
            continue
        lt = _t(last)
        v = int(lt) if last.type == "number_literal" and lt.isdigit() else (consts.get(lt) if last.type == "identifier" else None)
        if not isinstance(v, int) or v < 2 or v & (v - 1):
            continue
        name = _t(inner.child_by_field_name("declarator"))
        before = f"{name}[{_t(first)}][{lt}]"
        # column access: the first index varies with threadIdx.x, so a warp strides by a full row
        column = _lane_indexed(root, name, lane_vars)
        out.append(Transform(
            "pad", _splice(source, [(last.end_byte, last.end_byte, " + 1")]),
            f"pad {before} -> {name}[{_t(first)}][{lt} + 1]",
            f"{name} rows are {v} words long, so accesses down a column fall in one shared-memory bank; "
            "one word of padding per row spreads them over all 32 banks (indexing stays valid).",
            hint=1.0 if column else 0.5))
    return out


def _lane_indexed(root, name, lane_vars) -> bool:
    """Whether some ``name[i][j]`` has a first index ``i`` involving a threadIdx.x-derived variable."""
    for n in _walk(root):
        arg = n.child_by_field_name("argument") if n.type == "subscript_expression" else None
        if arg is not None and _t(arg) == name and n.parent is not None and n.parent.type == "subscript_expression":
            idx = _t(n.child_by_field_name("indices"))
            if any(re.search(rf"(?<![\w.]){re.escape(v)}(?!\w)", idx) for v in lane_vars):
                return True
    return False


# ----------------------------------------------------------------------------- 3. qualifiers
def add_restrict(source: str, entry: str = "") -> list[Transform]:
    """``__restrict__`` on every pointer parameter of the entry kernel that lacks it (one variant)."""
    root = _tree(source)
    _, fd = _entry_def(root, entry)
    if fd is None:
        return []
    edits, names = [], []
    for name, ident, ptr, _p in _params(fd):
        if ptr is not None and "__restrict__" not in _t(ptr) and "restrict" not in _t(ptr):
            edits.append((ident.start_byte, ident.start_byte, "__restrict__ "))
            names.append(name)
    if not edits:
        return []
    return [Transform("restrict", _splice(source, edits), f"__restrict__ on {', '.join(names)}",
                      "promises the compiler that the pointer arguments do not alias, so loads can be "
                      "reordered, kept in registers and routed through the read-only cache.", hint=0.6)]


_WRITE_OPS = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}


def _only_read(body, name: str) -> bool:
    """True when every use of ``name`` in ``body`` is a plain read ``name[...]`` (conservative)."""
    for n in _walk(body):
        if n.type != "identifier" or _t(n) != name:
            continue
        sub = n.parent
        if sub is None or sub.type != "subscript_expression" or sub.child_by_field_name("argument") != n:
            return False        # pointer arithmetic, passed to a call, aliased, shadowed...: unsure
        node, up = sub, sub.parent
        while up is not None and up.type in ("subscript_expression", "parenthesized_expression", "field_expression"):
            node, up = up, up.parent
        if up is None:
            return False
        if up.type == "assignment_expression" and up.child_by_field_name("left") == node:
            return False
        if up.type == "update_expression" or (up.type == "pointer_expression" and _t(up).startswith("&")):
            return False
    return True


def add_const(source: str, entry: str = "") -> list[Transform]:
    """``const`` on pointer parameters of the entry kernel whose pointee is provably only read."""
    root = _tree(source)
    fn, fd = _entry_def(root, entry)
    if fd is None:
        return []
    body = fn.child_by_field_name("body")
    edits, names = [], []
    for name, _ident, ptr, p in _params(fd):
        if ptr is None or _t(p).split()[0] == "const" or re.search(r"\bconst\b", _t(p).split("*")[0]):
            continue
        if _only_read(body, name):
            edits.append((p.start_byte, p.start_byte, "const "))
            names.append(name)
    if not edits:
        return []
    return [Transform("const", _splice(source, edits), f"const on {', '.join(names)}",
                      "these pointers are only read in the kernel; const lets the compiler use "
                      "read-only (non-coherent) loads for them.", hint=0.5)]


# ----------------------------------------------------------------------------- 4. pragma unroll
def _const_expr(node, env) -> bool:
    return node is not None and _eval(_t(node), env) is not None


def add_pragma_unroll(source: str) -> list[Transform]:
    """``#pragma unroll`` before each ``for`` loop whose bounds are compile-time constants."""
    root = _tree(source)
    env = parse_source(source).constants
    data = source.encode("utf-8")
    out, seen = [], {}
    for n in _walk(root):
        if n.type != "for_statement" or n.parent is None or n.parent.type != "compound_statement":
            continue
        line_start = data.rfind(b"\n", 0, n.start_byte) + 1
        indent = data[line_start:n.start_byte].decode("utf-8", "replace")
        if indent.strip():
            continue
        prev = n.prev_named_sibling
        if prev is not None and _t(prev).lstrip().startswith("#pragma"):
            continue
        if data[:line_start].rstrip().rsplit(b"\n", 1)[-1].lstrip().startswith(b"#pragma"):
            continue
        init, cond = n.child_by_field_name("initializer"), n.child_by_field_name("condition")
        if init is None or cond is None or cond.type != "binary_expression":
            continue
        decl = init.child_by_field_name("declarator") if init.type == "declaration" else None
        if decl is None or decl.type != "init_declarator" or not _const_expr(decl.child_by_field_name("value"), env):
            continue
        var = _t(decl.child_by_field_name("declarator"))
        left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
        bound = right if _t(left) == var else left if _t(right) == var else None
        if bound is None or not _const_expr(bound, env):
            continue
        header = " ".join(_t(n)[: _t(n).find(")") + 1].split()) if ")" in _t(n) else _t(cond)
        seen[header] = seen.get(header, 0) + 1
        header += f" #{seen[header]}" if seen[header] > 1 else ""   # identical loops stay distinct
        out.append(Transform(
            "unroll", _splice(source, [(line_start, line_start, f"{indent}#pragma unroll\n")]),
            f"#pragma unroll {header}",
            "the trip count is a compile-time constant, so full unrolling removes the loop overhead "
            "and lets the compiler keep indices in registers and schedule the loads early.", hint=0.6))
    return out


# ----------------------------------------------------------------------------- 5. launch bounds
def add_launch_bounds(source: str, entry: str = "", threads: int | None = None,
                      block: tuple[str, ...] | None = None) -> list[Transform]:
    """``__launch_bounds__(N)`` on the entry kernel: N is ``threads`` when given, else the product of
    the block dimensions written with their macro names (so it follows later block-size tuning)."""
    root = _tree(source)
    fn, fd = _entry_def(root, entry)
    if fn is None or any(c.type == "launch_bounds" for c in fn.children):
        return []
    env = parse_source(source).constants
    if threads is None:
        dims = block or block_dims(source, entry)
        if not dims or any(_eval(d, env) is None for d in dims):
            return []
        bound = " * ".join(f"({d})" if not re.fullmatch(r"\w+", d) else d for d in dims)
        value = math.prod(int(_eval(d, env)) for d in dims)
    else:
        bound, value = str(threads), threads
    if not 1 <= value <= MAX_THREADS:
        return []
    return [Transform(
        "launch_bounds", _splice(source, [(fd.start_byte, fd.start_byte, f"__launch_bounds__({bound}) ")]),
        f"__launch_bounds__({bound})",
        f"tells the compiler the block never exceeds {value} threads, so it can budget registers "
        "for full occupancy instead of the worst case of 1024 threads.", hint=0.6)]


# ----------------------------------------------------------------------------- 6. build flags
_FAST_MATH_WORK = re.compile(
    r"(?<![/*])/(?![/*=])|/=|\b(?:__)?(?:sqrt|rsqrt|cbrt|exp|exp2|exp10|expm1|log|log2|log10|log1p|pow|sin|cos|tan|"
    r"sincos|asin|acos|atan|atan2|sinh|cosh|tanh|erf|erfc|fdivide|frcp|fsqrt|fdiv|frsqrt)f?(?:_r[nzud])?\s*\(")


def fast_math_matters(source: str) -> bool:
    """Whether ``-use_fast_math`` can change the code: a division, a square root or a
    transcendental call in it (comments aside). Without one it only changes denormal handling."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    code = "\n".join(ln for ln in code.splitlines() if not ln.lstrip().startswith("#include"))
    return bool(_FAST_MATH_WORK.search(code))


def flag_variants(source: str, flags: tuple[str, ...] = (), registers: int | None = None) -> list[Transform]:
    """``-use_fast_math`` (where the code divides, takes roots or calls transcendentals), and
    ``-maxrregcount=N`` caps below the current register count."""
    out = []
    if not any(f.lstrip("-") == "use_fast_math" for f in flags) and fast_math_matters(source):
        out.append(Transform("flag", source, "flag -use_fast_math",
                             "fast approximate transcendentals, division and flush-to-zero; kept only "
                             "if the outputs still pass the task's tolerances (verification decides).",
                             flags=("-use_fast_math",), hint=0.5))
    if registers and not any(f.lstrip("-").startswith("maxrregcount") for f in flags):
        for cap in REG_CAPS:
            if cap < registers:
                out.append(Transform("flag", source, f"flag -maxrregcount={cap}",
                                     f"caps registers at {cap} per thread (now {registers}) so more warps "
                                     "fit per SM; spills would show in the build log and the timing.",
                                     flags=(f"-maxrregcount={cap}",), hint=0.5))
    return out


def all_transforms(source: str, entry: str = "", flags: tuple[str, ...] = (),
                   registers: int | None = None, threads: int | None = None,
                   auto_tune: bool = True, launch=None) -> list[Transform]:
    """Every transform above for ``source`` (an unparseable source gives what still applies);
    ``auto_tune`` False leaves the integer constants alone (a declared space tunes its own);
    ``launch``: the spec's (grid, block, shared_mem), for a literal block to become a knob."""
    out = []
    out += tune_constants(source, entry) if auto_tune else []
    if auto_tune:
        for rewrite in (tie_block_literal, grid_stride, vectorize_float4):
            try:
                out += rewrite(source, entry, launch)[0]
            except Exception as e:          # a bug in a rewrite costs its proposal, not the run
                from loguru import logger

                logger.warning("the {} rewrite failed on this source ({}: {}); skipped", rewrite.__name__,
                               type(e).__name__, e)
    out += pad_shared(source)
    out += add_restrict(source, entry)
    out += add_const(source, entry)
    out += add_pragma_unroll(source)
    out += add_launch_bounds(source, entry, threads)
    out += flag_variants(source, flags, registers)
    return [t for t in out if t.source != source or t.flags]


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
    name = _free_name(KNOB_NAMES, info, source)
    if name is None:
        return [], "no free name for the block size"
    # the launch: the literal is tied only as the divisor of a cdiv(X, B) grid; anywhere else in the
    # grid or the shared memory it may mean something else
    new_grid = []
    for g in grid:
        parts = _cdiv_parts(g)
        if parts is not None and _literal_of(parts[1]) == value:
            new_grid.append(f"cdiv({parts[0]}, {name})")
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
    line = (f"// optiml:launch {{grid = {_toml_dims(new_grid)}, block = [\"{name}\"], "
            f"shared_mem = {_toml_dims([smem if smem is not None else 0])[1:-1]}}}")
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
    line = (f"// optiml:launch {{grid = {_toml_dims(new_grid)}, block = {_toml_dims(block)}, "
            f"shared_mem = {_toml_dims([smem if smem is not None else 0])[1:-1]}}}")
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
    line = (f"// optiml:launch {{grid = {_toml_dims((f'cdiv({cd[0]}, ({cd[1]}) * 4)',))}, block = {_toml_dims(block)}, "
            f"shared_mem = {_toml_dims([smem if smem is not None else 0])[1:-1]}}}")
    text = _with_launch(text, [], line)
    return [Transform("vectorize", text, "float4 loads and stores",
                      f"the body reads {', '.join(dict.fromkeys(reads)) or 'nothing'} and writes "
                      f"{', '.join(dict.fromkeys(writes)) or 'nothing'} one float at a time; four a step "
                      f"(float4, 16-byte transactions) cut the load and store instructions by four.", hint=0.8)], None

