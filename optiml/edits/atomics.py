"""Privatized atomics for the ``rules`` proposer: a kernel of one item a thread whose only use of an
output array is ``atomicAdd(&A[k], v)`` (a histogram, a scatter-add into a few bins) becomes one
where each block keeps its own copy of the bins in shared memory, adds into that copy, and merges it
into A once, with one global atomic a non-zero bin; and, since a block's copy only pays off over many
items, a grid-stride loop over the items with a grid of at most ``OPTIML_PRIV_BLOCKS`` blocks (then
tuned).

The bins' count must be readable from the index: ``k = E % B`` (or ``E & M`` with M + 1 a power of
two), B a literal or the kernel's scalars, or an element of an array of unsigned bytes (256). The copy holds ``OPTIML_PRIV_CAP`` bins (B where it is a
literal, else 4096); a launch whose B is larger adds to A directly, as the kernel did. Refused with
the reason where the kernel already cooperates (barriers, shared memory), reads or writes A otherwise,
uses an atomic's result, returns inside the item, or is not one item a thread.
"""
from __future__ import annotations

import re

from ..source import _walk
from .cutree import Transform, _params, _splice, _t
from .reductions import _strip_parens as _strip
from .structural import _free_name, _launch_line, _one_item, _with_launch

CAP = 4096
BLOCKS = 1024
_MASK = re.compile(r"^(.*)&\s*(0[xX][0-9a-fA-F]+|\d+)[uU]?$")


def _top_level(text: str, op: str) -> tuple[str, str] | None:
    """(left, right) of ``text`` split at its last top-level ``op`` (outside parentheses), else None."""
    depth, at = 0, None
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and ch == op and (op != "&" or (text[i - 1:i] != "&" and text[i + 1:i + 2] != "&")):
            at = i
    return None if at is None else (text[:at].strip(), text[at + 1:].strip())


_BYTE = r"(?:unsigned\s+char|uint8_t|uchar|u_char)"


def _bins(index: str, rest: str, bytes_: set = frozenset()) -> str | None:
    """The bins' count an index is bounded by (``E % B``, ``E & M``, an unsigned byte: 256), following
    one local assignment; ``bytes_``: the kernel's arrays of unsigned bytes."""
    index = _strip(index)
    if re.fullmatch(r"\w+", index):
        m = re.search(rf"\b(?:const\s+)?({_BYTE}|(?:unsigned\s+)?(?:int|long|long long|size_t|unsigned|uint32_t|int64_t))"
                      rf"\s+{re.escape(index)}\s*=\s*([^;]+);", rest)
        if m is None or len(re.findall(rf"\b{re.escape(index)}\s*(=[^=]|\+=|-=|\+\+|--)", rest)) != 1:
            return None
        if re.fullmatch(_BYTE, m.group(1)):
            return "256"
        index = _strip(m.group(2))
    byte = re.fullmatch(r"(?:\(\s*(?:unsigned\s+)?(?:int|unsigned|size_t|long)\s*\)\s*)?(\w+)\s*\[[^\[\]]+\]", index)
    if byte is not None and byte.group(1) in bytes_:
        return "256"
    mod = _top_level(index, "%")
    if mod is not None and mod[1]:
        return _strip(mod[1])
    mask = _top_level(index, "&")
    if mask is not None:
        value = int(mask[1].rstrip("uU"), 0) if re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)[uU]?", mask[1]) else None
        if value is not None and (value + 1) & value == 0:
            return str(value + 1)
    return None


def privatize_atomics(source: str, entry: str = "", launch=None) -> tuple[list[Transform], str | None]:
    """The rewrite (see the module), or ([], why not); ``launch`` is the spec's (grid, block, shared_mem)."""
    if not re.search(r"\batomicAdd\s*\(", source):
        return [], None
    parts, why = _one_item(source, entry, launch)
    if parts is None:
        return [], (why.replace("not coarsened", "not privatized") if why else
                    "not privatized: the kernel is not one item a thread (`i = blockIdx.x * blockDim.x + threadIdx.x` "
                    "and one guard)")
    if re.search(r"__shared__|__syncthreads", source):
        return [], "not privatized: the kernel already uses shared memory or barriers"
    fn, info = parts["fn"], parts["info"]
    pointers = {name: p for name, _, ptr, p in _params(fn.child_by_field_name("declarator")) if ptr is not None}
    scalars = {name for name, _, ptr, _ in _params(fn.child_by_field_name("declarator")) if ptr is None}
    bytes_ = {name for name, p in pointers.items() if p.child_by_field_name("type") is not None and
              re.fullmatch(rf"(?:const\s+)?{_BYTE}(?:\s+const)?", _t(p.child_by_field_name("type")).strip())}
    lo, hi = parts["rest_range"]
    data = source.encode("utf-8")
    rest_text = data[lo:hi].decode("utf-8")
    calls = [n for n in _walk(fn.child_by_field_name("body")) if n.type == "call_expression"
             and lo <= n.start_byte < hi and _t(n.child_by_field_name("function")) == "atomicAdd"]
    if not calls:
        return [], None
    edits, target, bins = [], None, None
    for c in calls:
        if c.parent is None or c.parent.type != "expression_statement":
            return [], "not privatized: an atomic's result is used"
        args = [a for a in c.child_by_field_name("arguments").named_children if a.type != "comment"]
        if len(args) != 2:
            return [], None
        addr = _strip(_t(args[0]))
        m = re.fullmatch(r"&\s*(\w+)\s*\[(.+)\]", addr, re.S) or re.fullmatch(r"(\w+)\s*\+\s*(.+)", addr, re.S)
        if m is None or m.group(1) not in pointers:
            return [], f"not privatized: the atomic adds at {addr}, not at an element of one of the kernel's arrays"
        if target not in (None, m.group(1)):
            return [], "not privatized: atomics into more than one array"
        target, index = m.group(1), m.group(2).strip()
        b = _bins(index, rest_text, bytes_)
        if b is None:
            return [], (f"not privatized: the bin {index} is not bounded by a `% bins`, a `& mask` or an unsigned "
                        "byte the rewrite can read")
        if bins not in (None, b):
            return [], "not privatized: the atomics' bins are bounded differently"
        bins = b
        value = _t(args[1])
        edits.append((c.start_byte - lo, c.end_byte - lo,
                      f"(optiml_fit ? atomicAdd(&optiml_priv[{index}], {value}) : atomicAdd(&{target}[{index}], {value}))"))
    if any(n not in scalars for n in re.findall(r"\b[A-Za-z_]\w*\b", bins) if n not in info.constants):
        return [], f"not privatized: the bins' count {bins} is not made of the kernel's scalars and constants"
    uses = len(re.findall(rf"\b{re.escape(target)}\b", _t(fn.child_by_field_name("body"))))
    if uses != len(calls):
        return [], f"not privatized: the kernel uses {target} otherwise than through its atomics"
    if re.search(r"\breturn\b", rest_text):
        return [], "not privatized: the item's code returns (every thread must reach the block's merge)"
    ptype = pointers[target].child_by_field_name("type")
    elem = re.sub(r"\b(const|volatile|__restrict__|restrict)\b", "", _t(ptype)).strip() if ptype is not None else ""
    if not elem:
        return [], None
    cap_name = _free_name(("OPTIML_PRIV_CAP",), info, source)
    blocks_name = _free_name(("OPTIML_PRIV_BLOCKS",), info, source)
    if cap_name is None or blocks_name is None:
        return [], "not privatized: no free names for the rewrite's constants"
    cap = int(bins) if re.fullmatch(r"\d+", bins) and int(bins) <= CAP else CAP
    var, idx, limit, type_text = parts["var"], parts["idx"], parts["limit"], parts["type_text"]
    item = _splice(rest_text, edits).strip()
    body = (
        "{\n"
        f"    __shared__ {elem} optiml_priv[{cap_name}];   // this block's copy of {target}'s bins\n"
        "    const int optiml_t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
        "    const int optiml_nt = blockDim.x * blockDim.y * blockDim.z;\n"
        f"    const bool optiml_fit = ({bins}) <= {cap_name};\n"
        f"    if (optiml_fit)\n"
        f"        for (int optiml_j = optiml_t; optiml_j < ({bins}); optiml_j += optiml_nt) optiml_priv[optiml_j] = 0;\n"
        "    __syncthreads();\n"
        f"    for ({type_text} {var} = {idx}; {var} < {limit}; {var} += blockDim.x * gridDim.x) {item}\n"
        "    __syncthreads();\n"
        "    if (optiml_fit)\n"
        f"        for (int optiml_j = optiml_t; optiml_j < ({bins}); optiml_j += optiml_nt)\n"
        f"            if (optiml_priv[optiml_j] != 0) atomicAdd(&{target}[optiml_j], optiml_priv[optiml_j]);\n"
        "}")
    b = parts["body"]
    text = _splice(source, [(b.start_byte, b.end_byte, body)])
    cd = parts["cd"]
    line = _launch_line((f"min(cdiv({cd[0]}, {cd[1]}), {blocks_name})",), parts["block"], parts["smem"])
    text = _with_launch(text, [f"#define {cap_name} {cap}", f"#define {blocks_name} {BLOCKS}"], line)
    return [Transform("privatize", text, f"privatized atomics into shared memory, {blocks_name} = {BLOCKS}",
                      f"every item adds into {target} with a global atomic; each block now adds into its own copy "
                      f"of the {bins} bins in shared memory (fast atomics, no contention across the GPU) over a "
                      f"grid-stride loop of at most {blocks_name} blocks, and merges the copy into {target} once, "
                      "one atomic a non-zero bin.", hint=1.2)], None
