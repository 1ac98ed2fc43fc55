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

from .. import expr as _expr
from ..errors import ExprError
from ..source import _walk, parse_source
from ..spec.space import TUNABLE_NAME, constant_sites, template_sites
from .cutree import Transform, _entry_def, _params, _splice, _t, _tree  # noqa: F401 (Transform re-exported)
from .atomics import privatize_atomics  # noqa: F401 (in _STRUCTURAL)
from .partials import chunk_partials  # noqa: F401 (in _STRUCTURAL)
from .reductions import accumulate_first, warp_shuffle  # noqa: F401 (in _STRUCTURAL)
from .reuse import cache_rereads  # noqa: F401 (in _STRUCTURAL)
from .structural import grid_stride, tie_block_literal, vectorize_float4  # noqa: F401 (in _STRUCTURAL, re-exported)

MAX_THREADS = 1024
MAX_STATIC_SMEM = 48 * 1024
REG_CAPS = (32, 64, 128)

_TUNABLE = TUNABLE_NAME
_BLOCKISH = re.compile(r"(BLOCK|THREADS|TPB)")
_FOUR_BYTE = {"float", "int", "unsigned", "unsigned int", "uint32_t", "int32_t"}


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


def tune_constants(source: str, entry: str = "", block: tuple[str, ...] | None = None, launch=None) -> list[Transform]:
    """Integer tunables (``#define BLOCK 16``, ``constexpr int TILE = 32;``) to neighbouring powers
    of two, keeping threads per block <= 1024 and static shared memory <= 48 KiB. An integer template
    argument of the entry is one where its name looks like a tunable's in any case (cuda-samples'
    ``block_size``) or the launch (``launch``: the spec's (grid, block, shared_mem)) uses it, its
    values kept to what the launch's block allows."""
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
    # template arguments the entry passes (`reduce<256>(...)`, `template __global__ void k<16>(...)`),
    # named like a tunable and written with one value everywhere: every site moves together
    grid_dims, block_dims_ = (tuple(launch[0] or ()), tuple(launch[1] or ())) if launch else ((), ())
    launched = set().union(*(_expr.names_in(str(d)) for d in grid_dims + block_dims_)) if launch else set()
    for name, sites in sorted(template_sites(root, entry).items()):
        value = sites[0].value
        if name in defs or not (_TUNABLE.search(name.upper()) or name in launched) or value < 1 or \
                len({st.value for st in sites}) != 1:
            continue
        for new in _neighbours(value):
            if _BLOCKISH.search(name.upper()) and new > min(MAX_THREADS, cap or MAX_THREADS):
                continue
            env = dict(info.constants, **{name: new})
            threads = [_eval(str(d), env) for d in (dims or block_dims_)]
            if threads and all(t is not None for t in threads) and \
                    not 1 <= math.prod(int(t) for t in threads) <= min(MAX_THREADS, cap or MAX_THREADS):
                continue
            out.append(Transform(
                "tune", _splice(source, [(st.start, st.end, str(new)) for st in sites]), f"{name} {value} -> {new}",
                f"{name} is a template argument of the kernel ({len(sites)} place{'s' if len(sites) != 1 else ''}); "
                f"{new} changes the work per block and the occupancy/reuse trade-off "
                f"({'halving' if new < value else 'doubling'} it).", hint=0.7))
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
    """True when ``body`` uses ``name`` and every use is a plain read ``name[...]`` (conservative)."""
    used = False
    for n in _walk(body):
        if n.type != "identifier" or _t(n) != name:
            continue
        used = True
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
    return used


def add_const(source: str, entry: str = "") -> list[Transform]:
    """``const`` on pointer parameters of the entry kernel whose pointee is provably only read."""
    root = _tree(source)
    fn, fd = _entry_def(root, entry)
    if fd is None:
        return []
    body = fn.child_by_field_name("body")
    # a macro may write through a parameter out of the tree's sight (a template's OPTIML_C(m, n) y[...]),
    # its body continued over several lines
    joined = re.sub(r"\\\s*\n", " ", source)
    in_macros = " ".join(ln for ln in joined.splitlines() if ln.lstrip().startswith("#define"))
    edits, names = [], []
    for name, _ident, ptr, p in _params(fd):
        if ptr is None or _t(p).split()[0] == "const" or re.search(r"\bconst\b", _t(p).split("*")[0]):
            continue
        if re.search(rf"\b{re.escape(name)}\b", in_macros):
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
    ``-maxrregcount=N`` caps below the current register count, down to half of it (a cap below that
    spills half of what the kernel keeps live: the H100 GEMM runs verified such caps at 255 registers
    only to time them slower)."""
    out = []
    if not any(f.lstrip("-") == "use_fast_math" for f in flags) and fast_math_matters(source):
        out.append(Transform("flag", source, "flag -use_fast_math",
                             "fast approximate transcendentals, division and flush-to-zero; kept only "
                             "if the outputs still pass the task's tolerances (verification decides).",
                             flags=("-use_fast_math",), hint=0.5))
    if registers and not any(f.lstrip("-").startswith("maxrregcount") for f in flags):
        for cap in REG_CAPS:
            if registers / 2 <= cap < registers:
                out.append(Transform("flag", source, f"flag -maxrregcount={cap}",
                                     f"caps registers at {cap} per thread (now {registers}) so more warps "
                                     "fit per SM; spills would show in the build log and the timing.",
                                     flags=(f"-maxrregcount={cap}",), hint=0.5))
    return out


def all_transforms(source: str, entry: str = "", flags: tuple[str, ...] = (),
                   registers: int | None = None, threads: int | None = None,
                   auto_tune: bool = True, launch=None, refused: list | None = None) -> list[Transform]:
    """Every transform above for ``source`` (an unparseable source gives what still applies);
    ``auto_tune`` False leaves the integer constants alone (a declared space tunes its own);
    ``launch``: the spec's (grid, block, shared_mem), for a literal block to become a knob.
    ``refused``, when given, receives (rewrite, why) for each structural rewrite that looked
    applicable and was not made."""
    out = []
    out += tune_constants(source, entry, launch=launch) if auto_tune else []
    for name, rewrite in _structural(auto_tune):
        try:
            made, why = rewrite(source, entry, launch)
        except Exception as e:          # a bug in a rewrite costs its proposal, not the run
            from loguru import logger

            logger.warning("the {} rewrite failed on this source ({}: {}); skipped", name, type(e).__name__, e)
            continue
        out += made
        if why and not made and refused is not None:
            refused.append((name, why))
    out += pad_shared(source)
    out += add_restrict(source, entry)
    out += add_const(source, entry)
    out += add_pragma_unroll(source)
    out += add_launch_bounds(source, entry, threads)
    out += flag_variants(source, flags, registers)
    return [t for t in out if t.source != source or t.flags]


# name, rewrite function (looked up at call time, so a test may replace one), adds a tuned constant
_STRUCTURAL = (("knob", "tie_block_literal", True), ("coarsen", "grid_stride", True),
               ("vectorize", "vectorize_float4", False), ("accumulate", "accumulate_first", True),
               ("cache", "cache_rereads", True), ("shuffle", "warp_shuffle", False),
               ("privatize", "privatize_atomics", True), ("partials", "chunk_partials", True))


def _structural(auto_tune: bool):
    """(name, rewrite) of the structural rewrites; without ``auto_tune`` (a declared space tunes
    its own names) those that add a constant to tune are left out."""
    return [(name, globals()[fn]) for name, fn, tuned in _STRUCTURAL if auto_tune or not tuned]
