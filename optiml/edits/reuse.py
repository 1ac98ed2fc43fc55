"""Reads once, not once a pass: :func:`cache_rereads` for the ``rules`` proposer.

Kernels written pass by pass (a norm's sum of squares then its scaling, a softmax's max, sum and
write) loop over the same elements several times, and every pass reads them from memory again.
When two or more loops of one block have the same header and read the same element ``A[E]`` of a
read-only array, the first ``CACHE`` iterations of each are unrolled, the first keeps the element
in a register array and the later ones use it; the iterations past ``CACHE`` run as before. That
is right for any trip count, and ``CACHE`` is a constant the tuning moves (the registers it costs
against the traffic it saves).
"""
from __future__ import annotations

import re

from ..source import _walk, parse_source
from .cutree import Transform, _entry_def, _flat, _splice, _t, _tree
from .structural import _free_name

CACHE_NAMES = ("OPTIML_CACHE_ITEMS", "OPTIML_REG_CACHE_ITEMS")   # ..._ITEMS: a name the tuning moves
CACHES = (16, 64)            # the first sizes proposed: a few registers, or a whole 64-long loop
_NUMBER_TYPES = {"float", "double", "int", "unsigned", "unsigned int", "__half", "half", "__nv_bfloat16", "float2",
                 "float4"}
_FLOW = re.compile(r"\b(break|continue|return|goto)\b")
_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|cooperative_groups|cg::)\b")


def _assigned(text: str, name: str) -> bool:
    n = re.escape(name)
    return bool(re.search(rf"(?<![\w.]){n}\s*(=[^=]|\+=|-=|\*=|/=|%=|<<=|>>=|&=|\|=|\^=|\+\+|--)|(\+\+|--)\s*{n}\b", text))


def _header(loop):
    """(var, type, start, limit, step) of ``for (T k = S; k < L; k++ | ++k | k += STEP)``, else None."""
    init, cond, update = (loop.child_by_field_name(k) for k in ("initializer", "condition", "update"))
    if init is None or cond is None or update is None:
        return None
    m = re.fullmatch(r"((?:unsigned\s+|const\s+)?(?:int|long long|size_t|long|unsigned))\s+(\w+)\s*=\s*(.+?)\s*;?",
                     _flat(_t(init)))
    if not m:
        return None
    typ, var, start = m.group(1), m.group(2), m.group(3)
    c = re.fullmatch(rf"{re.escape(var)}\s*<\s*(.+)", _flat(_t(cond)))
    if not c or re.search(r"&&|\|\||\?|[<>=!]", c.group(1)):
        return None
    u = _flat(_t(update)).replace(" ", "")
    if u in (f"{var}++", f"++{var}", f"{var}+=1"):
        step = "1"
    else:
        s = re.fullmatch(rf"{re.escape(var)}\+=(.+)|{re.escape(var)}={re.escape(var)}\+(.+)", u)
        if not s:
            return None
        step = s.group(1) or s.group(2)
    return var, typ, start, c.group(1), step


def _positive_step(step: str, constants) -> bool:
    """A step the rewrite can trust to be positive: literals, blockDim/gridDim, source constants,
    and products of those."""
    for part in re.split(r"\*", step.replace("(", "").replace(")", "")):
        p = part.strip()
        if not (re.fullmatch(r"[1-9]\d*[uU]?", p) or re.fullmatch(r"(blockDim|gridDim)\.[xyz]", p) or p in constants):
            return False
    return True


def _read_only_pointers(fn) -> dict[str, str]:
    """name -> element type of pointers (parameters or locals) declared ``const T *``."""
    out = {}
    for n in _walk(fn):
        if n.type in ("parameter_declaration", "declaration"):
            head = _t(n).split("*")[0] if "*" in _t(n) else ""
            if not head or "const" not in head.split():
                continue
            t = n.child_by_field_name("type")
            elem = _t(t) if t is not None else ""
            for d in _walk(n):
                if d.type == "pointer_declarator":
                    inner = d.child_by_field_name("declarator")
                    while inner is not None and inner.type != "identifier":
                        inner = inner.child_by_field_name("declarator")
                    if inner is not None:
                        out[_t(inner)] = elem
    return out


def _unconditional(node, body) -> bool:
    """``node`` runs whenever ``body`` does: no if, ?:, &&, || or nested loop between them."""
    n = node.parent
    while n is not None and n.id != body.id:
        if n.type in ("if_statement", "conditional_expression", "for_statement", "while_statement",
                      "do_statement", "switch_statement"):
            return False
        if n.type == "binary_expression" and _t(n.child_by_field_name("operator")) in ("&&", "||"):
            return False
        n = n.parent
    return n is not None


def cache_rereads(source: str, entry: str = "", launch=None, caches=CACHES) -> tuple[list[Transform], str | None]:
    """Loops of one block with the same header (``for (int k = S; k < L; k += STEP)``) that read
    the same element ``A[E]`` of a ``const`` array: the first keeps it in registers for the others
    (see the module). Refused (with the reason) where a loop body synchronises, leaves the loop, or
    changes the loop variable, or where what ``E``, ``S``, ``L`` or ``STEP`` name changes between
    the loops."""
    root = _tree(source)
    fn, _ = _entry_def(root, entry)
    if fn is None:
        return [], None
    info = parse_source(source)
    readonly = _read_only_pointers(fn)
    groups: dict[tuple, list] = {}
    for n in _walk(fn):
        if n.type == "for_statement" and n.parent is not None and n.parent.type == "compound_statement":
            h = _header(n)
            if h is not None:
                groups.setdefault((n.parent.id, _flat(_t(n.child_by_field_name("initializer"))), h[3], h[4]), []).append((n, h))
    why = None
    for loops in groups.values():
        if len(loops) < 2:
            continue
        var, typ, start, limit, step = loops[0][1]
        if not _positive_step(step, info.constants):
            why = f"not cached: the loops' step {step} is not known to be positive"
            continue
        # the element read unconditionally in the first loop and read again in a later one
        first_body = loops[0][0].child_by_field_name("body")
        reads = {}
        for n in _walk(first_body):
            if n.type == "subscript_expression":
                arg, ix = n.child_by_field_name("argument"), n.child_by_field_name("indices")
                if arg is not None and ix is not None and _t(arg) in readonly and \
                        re.search(rf"\b{re.escape(var)}\b", _t(ix)) and _unconditional(n, first_body):
                    reads.setdefault(_flat(_t(n)), (_t(arg), _t(ix)))
        later_text = " ".join(_flat(_t(lp.child_by_field_name("body"))) for lp, _ in loops[1:])
        shared_reads = [k for k in reads if k in later_text]
        if not shared_reads:
            continue
        key = shared_reads[0]
        array, index = reads[key]
        elem = readonly[array].replace("const", "").strip()
        if elem not in _NUMBER_TYPES:
            why = f"not cached: {array} holds {elem}"
            continue
        span = source.encode("utf-8")[loops[0][0].start_byte:loops[-1][0].end_byte].decode("utf-8")
        names = set(re.findall(r"[A-Za-z_]\w*", " ".join((index, start, limit, step)))) - {var, "blockDim", "gridDim",
                                                                                            "threadIdx", "blockIdx", "x",
                                                                                            "y", "z", "size_t", "int"}
        changed = sorted(nm for nm in names if _assigned(span, nm))
        if changed:
            why = f"not cached: {', '.join(changed)} changes between or inside the loops"
            continue
        if _assigned(span, array) or re.search(rf"\b{re.escape(array)}\s*\[[^\]]*\]\s*(=[^=]|\+=|-=)", span):
            why = f"not cached: {array} is written between the loops"
            continue
        bad = None
        for lp, _ in loops:
            b = _t(lp.child_by_field_name("body"))
            if _SYNC.search(b):
                bad = "a loop body synchronises threads (an unrolled guard would split the barrier)"
            elif _FLOW.search(b):
                bad = "a loop body leaves the loop early"
            elif _assigned(b, var):
                bad = f"a loop body changes {var}"
        if bad:
            why = f"not cached: {bad}"
            continue
        name = _free_name(CACHE_NAMES, info, source)
        if name is None:
            return [], "not cached: no free name for the cache size"
        reg, u = "optiml_cache", "optiml_u"
        if reg in source:
            continue
        edits = []
        for k, (lp, _) in enumerate(loops):
            body = lp.child_by_field_name("body")
            body_text = _t(body)
            if key not in _flat(body_text):
                continue
            cached = re.sub(re.escape(key).replace(r"\ ", r"\s*"), f"{reg}[{u}]", body_text)
            load = f"{reg}[{u}] = {key};" if k == 0 else ""
            unrolled = (("" if k else f"{elem} {reg}[{name}];\n    ")
                        + "#pragma unroll\n"
                        f"    for (int {u} = 0; {u} < {name}; {u}++) {{\n"
                        f"        const {typ.replace('const', '').strip()} {var} = ({start}) + {u} * ({step});\n"
                        f"        if ({var} < ({limit})) {{ {load} {cached} }}\n"
                        f"    }}\n"
                        f"    for ({typ} {var} = ({start}) + {name} * ({step}); {var} < {limit}; {var} += {step}) {body_text}")
            edits.append((lp.start_byte, lp.end_byte, unrolled))
        if len(edits) < 2:
            continue
        text = _splice(source, edits)
        lines = text.splitlines(keepends=True)
        last = max((i for i, ln in enumerate(lines) if ln.lstrip().startswith("#include")), default=-1)
        out = []
        for cache in caches:
            variant = "".join(lines[:last + 1] + [f"#define {name} {cache}\n"] + lines[last + 1:])
            out.append(Transform("cache", variant, f"cache {key} in registers across {len(edits)} loops, {name} = {cache}",
                                 f"{len(edits)} loops over the same {var} read {key} again each time; the first keeps "
                                 f"the first {cache} elements a thread in registers ({name}, then tuned) so the others "
                                 f"read them there instead of from memory.", hint=0.9 if cache <= 16 else 0.8))
        return out, None
    return [], why
