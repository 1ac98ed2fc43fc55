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

Where the item reads an array of unsigned bytes (``unsigned char``, ``uint8_t``), such as a
histogram's keys, only as ``data[i]`` with ``i`` the one-item index (never written, its address
never taken, no other index), a second variant is offered beside the first: "16-byte loads". Its
grid-stride loop goes over 16-byte chunks, one ``int4`` load a chunk for each such array (``int4``,
not ``uint4``: CUDA and the CPU emulation both define it; its words are read as unsigned), and runs
the item 16 times with ``i`` the item's own index and ``data[i]`` the chunk's byte for it; a scalar
grid-stride loop does the tail (the last ``n % 16`` items), and all items where one of the arrays
is not 16-byte aligned at run time (``((unsigned long long)data & 15) != 0``: the verifier passes
pointers at an offset). Other arrays the item reads at ``i`` (a weight ``w[i]``) are read as before,
one element an item, with ``i`` set for each of the 16: they are not refused, and not vectorized.
The grid is at most ``cdiv(n, 16 * block)`` blocks (then ``OPTIML_PRIV_BLOCKS``).
It is a transform of its own rather than a tuned define (``OPTIML_PRIV_VEC 16/1``): the constant
tuner moves a define to neighbouring powers of two (8, 32), which a 16-byte load cannot use, and
as a named edit the search's record says which of the two won; each variant tunes its own
``OPTIML_PRIV_BLOCKS``.
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


def _byte_reads(fn, lo: int, hi: int, var: str, bytes_: set) -> list[str]:
    """The arrays of ``bytes_`` that the item (source bytes ``lo``..``hi`` of ``fn``) reads, and only
    reads, as ``A[var]``: never written, incremented, addressed or indexed otherwise."""
    seen, bad = set(), set()
    for n in _walk(fn):
        if n.type != "identifier" or not lo <= n.start_byte < hi or _t(n) not in bytes_:
            continue
        name, sub = _t(n), n.parent
        ix = sub.child_by_field_name("indices") if sub is not None and sub.type == "subscript_expression" else None
        arg = sub.child_by_field_name("argument") if ix is not None else None
        up = sub.parent if ix is not None else None
        read = (arg is not None and arg.id == n.id and _t(ix).strip()[1:-1].strip() == var and up is not None
                and up.type not in ("update_expression", "pointer_expression")
                and not (up.type == "assignment_expression" and up.child_by_field_name("left") is not None
                         and up.child_by_field_name("left").id == sub.id))
        (seen if read else bad).add(name)
    return sorted(seen - bad)


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
    if not (parts["rest"] == rest_text and item.startswith("{")):    # the statements after an early return: one block
        item = "{\n        " + item + "\n    }"
    head = (
        "{\n"
        f"    __shared__ {elem} optiml_priv[{cap_name}];   // this block's copy of {target}'s bins\n"
        "    const int optiml_t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
        "    const int optiml_nt = blockDim.x * blockDim.y * blockDim.z;\n"
        f"    const bool optiml_fit = ({bins}) <= {cap_name};\n"
        f"    if (optiml_fit)\n"
        f"        for (int optiml_j = optiml_t; optiml_j < ({bins}); optiml_j += optiml_nt) optiml_priv[optiml_j] = 0;\n"
        "    __syncthreads();\n")
    merge = (
        "    __syncthreads();\n"
        "    if (optiml_fit)\n"
        f"        for (int optiml_j = optiml_t; optiml_j < ({bins}); optiml_j += optiml_nt)\n"
        f"            if (optiml_priv[optiml_j] != 0) atomicAdd(&{target}[optiml_j], optiml_priv[optiml_j]);\n"
        "}")
    loop = f"    for ({type_text} {var} = {idx}; {var} < {limit}; {var} += blockDim.x * gridDim.x) {item}\n"
    b, cd, defines = parts["body"], parts["cd"], [f"#define {cap_name} {cap}", f"#define {blocks_name} {BLOCKS}"]
    text = _splice(source, [(b.start_byte, b.end_byte, head + loop + merge)])
    line = _launch_line((f"min(cdiv({cd[0]}, {cd[1]}), {blocks_name})",), parts["block"], parts["smem"])
    text = _with_launch(text, defines, line)
    why = (f"every item adds into {target} with a global atomic; each block now adds into its own copy of the {bins} "
           f"bins in shared memory (fast atomics, no contention across the GPU) over a grid-stride loop of at most "
           f"{blocks_name} blocks, and merges the copy into {target} once, one atomic a non-zero bin")
    out = [Transform("privatize", text, f"privatized atomics into shared memory, {blocks_name} = {BLOCKS}",
                     why + ".", hint=1.2)]
    arrays = _byte_reads(fn, lo, hi, var, bytes_)
    if arrays:
        vitem = item
        for a in arrays:
            vitem = re.sub(rf"\b{re.escape(a)}\s*\[\s*{re.escape(var)}\s*\]", f"optiml_b_{a}", vitem)
        loads = "".join(
            f"            const int4 optiml_q_{a} = reinterpret_cast<const int4 *>({a})[optiml_v];\n"
            f"            const unsigned int optiml_w_{a}[4] = {{(unsigned int)optiml_q_{a}.x, (unsigned int)optiml_q_{a}.y, "
            f"(unsigned int)optiml_q_{a}.z, (unsigned int)optiml_q_{a}.w}};\n" for a in arrays)
        # byte k of the chunk (little-endian, as the GPU and the host are); the item's index where it uses it
        bytes_of = "".join(f"                const unsigned char optiml_b_{a} = (unsigned char)(optiml_w_{a}[optiml_k >> 2] "
                           f">> (8 * (optiml_k & 3)));\n" for a in arrays)
        if re.search(rf"\b{re.escape(var)}\b", vitem):
            bytes_of += f"                {type_text} {var} = ({type_text})(optiml_v * 16 + optiml_k);\n"
        aligned = " | ".join(f"reinterpret_cast<unsigned long long>({a})" for a in arrays)
        vloop = (
            "    const size_t optiml_stride = (size_t)blockDim.x * gridDim.x;\n"
            "    const size_t optiml_first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    size_t optiml_scalar_from = 0;     // the items before it are read 16 bytes at a time\n"
            f"    if ((({aligned}) & 15) == 0) {{      // 16-byte aligned: 16 items a load\n"
            f"        const size_t optiml_vectors = ({limit}) > 0 ? (size_t)({limit}) / 16 : 0;\n"
            "        for (size_t optiml_v = optiml_first; optiml_v < optiml_vectors; optiml_v += optiml_stride) {\n"
            f"{loads}"
            "#pragma unroll\n"
            "            for (int optiml_k = 0; optiml_k < 16; optiml_k++) {\n"
            f"{bytes_of}"
            f"                {vitem}\n"
            "            }\n"
            "        }\n"
            "        optiml_scalar_from = optiml_vectors * 16;\n"
            "    }\n"
            f"    for ({type_text} {var} = ({type_text})(optiml_scalar_from + optiml_first); {var} < {limit}; "
            f"{var} += optiml_stride) {item}\n")
        text = _splice(source, [(b.start_byte, b.end_byte, head + vloop + merge)])
        line = _launch_line((f"min(cdiv({cd[0]}, ({cd[1]}) * 16), {blocks_name})",), parts["block"], parts["smem"])
        text = _with_launch(text, defines, line)
        names = ", ".join(arrays)
        out.append(Transform("privatize", text,
                             f"privatized atomics into shared memory, 16-byte loads of {names}, {blocks_name} = {BLOCKS}",
                             f"{why}; {names} {'is' if len(arrays) == 1 else 'are'} read 16 bytes a thread a step "
                             "(one int4 load for 16 items, a scalar loop for the tail and for unaligned pointers) "
                             "instead of one byte an item.", hint=1.3))
    return out, None
