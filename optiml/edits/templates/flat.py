"""Flat operations: elementwise and broadcast maps, and full reductions into one value,
recognised from a kernel that handles one element ``i`` of ``[0, n)`` at a time and run by a tuned
template behind the user's own entry signature.

The kernel's shape is one of the forms a first kernel has:

- ``int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { BODY }`` (or ``if (i >= n) return;``
  then BODY, or ``if (i < n) STATEMENT;``);
- ``for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { BODY }``;

with, before it, statements over the kernel's scalars (kept) and the kernel's own indexing (dropped).
BODY is the *per-element program*: any code over scalars, the element ``i`` and arrays, where

- an array BODY reads at ``[i]`` on every path is an element (the template loads VEC of them as one
  vector), and one it stores at ``[i]`` on every path (``y[i] = E`` at its top level, or in both
  branches of an if/else; ``y[i] += E``) an output (stored as vectors, loaded first where BODY reads
  its old value or writes it only on some paths);
- an array accessed at ``[i]`` only on some paths, or otherwise than as a plain value (a member,
  its address, an argument by reference), keeps its accesses as written: the template touches no
  element the kernel would not;
- any other read (``b[i % C]``, ``w[0]``, ``x[i + 1]``) is a gather, kept as it is;
- ``atomicAdd(out, E)`` (or atomicMax/atomicMin, on ``out`` or ``&out[0]``) makes it a full
  reduction: the template accumulates E in a register over a grid-stride loop, combines a block's
  values by shuffles and shared memory, and adds once a block.

Refused with the reason: threads that cooperate (shared memory, barriers, shuffles, ``threadIdx`` in
BODY), writes or output reads at another index, ``return``/``break``/``continue`` that leave BODY,
the index (or an array) declared again inside BODY, a scalar declared before BODY and changed in it
(its value would carry over between a thread's elements), macros that hide control flow or stores,
pointers, an atomic whose result is used, a map and an atomic together. Like every template, the
recognition is a hypothesis: each candidate is verified against the user's reference.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...source import _walk
from ..cutree import _assigned_names, _entry_def, _params, _shared_arrays, _splice, _t, _tree, _unparen
from .common import Spaced, place_rendered, render
from .flat_body import _Body
from .flat_shape import (_ATOMICS, _SIZE, _Refuse, _Shape, _aliases, _by_reference, _cooperating_helpers, _defined,
                         _macros, _same, _strip)


@dataclass(frozen=True)
class FlatOp:
    """A flat kernel: its per-element program (``body``, over the kernel's own index ``index``), the
    arrays it reads (``elems``) and writes (``outs``) at the index, with their element types, the
    outputs loaded before BODY (``loaded``), the kernel's statements kept before the loop
    (``prelude``), the element count as the kernel writes it (``n``) and as the spec's sizes do
    (``n_size``, for the launch); a reduction's atomic, its target and value type."""
    entry: str
    kind: str                       # "map" | "reduce"
    index: str                      # the kernel's names of the element ("i", or "r and c" of a matrix)
    index_decl: str                 # the template's declaration of them from its flat index optiml_i
    n: str
    n_size: str
    body: str
    elems: tuple = ()               # ((array, element type), ...)
    outs: tuple = ()
    loaded: tuple = ()              # names of outs read (or written on some paths only)
    prelude: tuple = ()
    atomic: str = ""                # reduce: atomicAdd | atomicMax | atomicMin
    target: str = ""                # reduce: the pointer the atomic adds to
    acc_type: str = ""              # reduce: the target's element type
    n_timing: int = 0
    index_setup: str = ""           # what index_decl needs, once a vector (from optiml_i0)

    @property
    def op(self) -> str:
        return _ATOMICS.get(self.atomic, "")

    def describe(self) -> str:
        ins = ", ".join(a for a, _ in self.elems) or "no arrays"
        if self.kind == "reduce":
            what = {"+": "sum", "max": "max", "min": "min"}[self.op]
            return f"full reduction ({what}) over {self.n} elements of {ins} into {self.target}"
        return f"elementwise map over {self.n} elements: {ins} -> {', '.join(a for a, _ in self.outs)}"

    @property
    def widest(self) -> int:
        return max([_SIZE.get(t, 4) for _, t in self.elems + self.outs] or [4])


@dataclass(frozen=True)
class FlatTemplate(Spaced):
    name: str
    kind: str
    space: dict
    restrictions: tuple
    what: str
    hint: float
    grid: str                       # over {n} (the spec's element count)
    threads: str = "OPTIML_THREADS"
    flags: tuple = ()

    def start_for(self, op: FlatOp) -> dict:
        """16-byte loads where the types allow; a map's block does 2 vectors a thread where the
        timing size leaves at least 4 blocks an SM of a large GPU, a reduction's 4 in flight."""
        vec = max(1, min(8, 16 // max(1, op.widest)))
        per_block = 256 * vec
        if self.kind == "map":
            items = 2 if op.n_timing >= 132 * 4 * 2 * per_block else 1
            return {"OPTIML_THREADS": 256, "OPTIML_VEC": vec, "OPTIML_ITEMS": items}
        return {"OPTIML_THREADS": 256, "OPTIML_VEC": vec, "OPTIML_ITEMS": 4, "OPTIML_BLOCKS": 1024}


FLAT_TEMPLATES = (
    FlatTemplate("elementwise", "map",
                 {"OPTIML_THREADS": [64, 128, 256, 512, 1024], "OPTIML_VEC": [1, 2, 4, 8], "OPTIML_ITEMS": [1, 2, 4, 8]},
                 ("OPTIML_VEC * OPTIML_ITEMS <= 32",),
                 "each thread ITEMS vectors of VEC elements (all loads issued before any is used), every array "
                 "read or written at the element moved as one vector when aligned, the rest element by element", 1.1,
                 grid="cdiv({n}, OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS)"),
    FlatTemplate("reduce_all", "reduce",
                 {"OPTIML_THREADS": [128, 256, 512, 1024], "OPTIML_VEC": [1, 2, 4, 8], "OPTIML_ITEMS": [1, 2, 4, 8],
                  "OPTIML_BLOCKS": [256, 512, 1024, 2048]},
                 ("OPTIML_VEC * OPTIML_ITEMS <= 32",),
                 "a grid-stride loop accumulating in a register (ITEMS vectors of VEC elements loaded before any "
                 "is used), the block's values combined by warp shuffles and shared memory, one atomic a block "
                 "(at most BLOCKS blocks)", 1.3,
                 grid="min(cdiv({n}, OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS), OPTIML_BLOCKS)"),
)


def recognize_flat(source: str, entry: str, spec) -> tuple[FlatOp | None, str | None]:
    """The flat operation behind ``entry`` (see the module), or (None, why not); ``why`` is None
    where nothing looked like one element a thread."""
    root = _tree(source)
    fn, fdecl = _entry_def(root, entry)
    if fn is None or spec is None:
        return None, None
    as_thread = _block_sum_as_thread_sum(source, fn)
    if as_thread is not None:                    # read it as each thread adding its own sum
        return recognize_flat(as_thread, entry, spec)
    as_atomics = _thread_sum_as_atomics(source, fn, fdecl)
    if as_atomics is not None:                   # read it as the same sum with an atomic an element
        return recognize_flat(as_atomics, entry, spec)
    if fn.parent is not None and fn.parent.type == "template_declaration":
        return None, "not templated: the entry is a C++ template"
    params = {}                                  # name -> (element type, a pointer, pointer depth)
    for name, _, ptr, p in _params(fdecl):
        ty = p.child_by_field_name("type")
        depth = sum(1 for n in _walk(p) if n.type == "pointer_declarator")
        params[name] = (_t(ty) if ty is not None else "", ptr is not None, depth, "volatile" in _t(p))
    pointers = {n for n, (_, is_ptr, *_) in params.items() if is_ptr}
    launch = getattr(spec, "launch", None)
    block = tuple(getattr(launch, "block", ()) or ()) if launch is not None else ()
    try:
        shape = _Shape(fn, block[0] if block else None, pointers, block[1] if len(block) > 1 else None).read()
    except _Refuse as e:
        return None, str(e)
    if shape is None:
        return None, None
    index, bound, prelude, stmts, dropped, prelude_names = shape
    try:
        from ...source import _constants
        n_size = _spec_count(_through(bound, prelude), params, spec, set(_constants(root)))
        index = _aliases(index, stmts)
        prog = _Body(stmts, index, pointers, params, dropped, _cooperating_helpers(root, fn), prelude_names,
                     _macros(root), _by_reference(root, fn), _defined(root)).read()
    except _Refuse as e:
        return None, str(e)
    kind = "reduce" if prog["atomic"] else "map"
    if kind == "map" and not prog["written"]:
        return None, None
    from ...expr import evaluate
    try:
        n_timing = int(evaluate(n_size, dict(getattr(spec, "timing_sizes", {}) or {})))
    except Exception:
        n_timing = 0
    typed = lambda names: tuple((a, params[a][0]) for a in sorted(names))      # noqa: E731
    return FlatOp(entry=entry, kind=kind, index=index.label, index_decl=index.decl, index_setup=index.setup, n=bound, n_size=n_size,
                  body=prog["body"], elems=typed(prog["elems"]), outs=typed(prog["outs"]),
                  loaded=tuple(sorted(prog["loaded"])), prelude=tuple(prelude), atomic=prog["atomic"],
                  target=prog["target"], acc_type=params[prog["target"]][0] if prog["target"] else "",
                  n_timing=n_timing), None


_ZERO = re.compile(r"\(?\s*(0|0\.0*|0?\.0+)[fF]?\s*\)?|\(\s*\w+\s*\)\s*0|\w+\s*\(\s*0\s*\)")


def _thread_sum_as_atomics(source: str, fn, fdecl) -> str | None:
    """A thread's grid-stride sum added once at its end (``float s = 0; for (...) s += E; atomicAdd(out,
    s);``) written as an atomic an element (``for (...) atomicAdd(out, E);``): the same total, which
    the reading of one element at a time takes; None for any other kernel."""
    stmts = [c for c in fn.child_by_field_name("body").named_children if c.type != "comment"]
    if len(stmts) < 3 or stmts[-2].type != "for_statement" or stmts[-1].type != "expression_statement":
        return None
    call = stmts[-1].named_children[0] if stmts[-1].named_children else None
    if call is None or call.type != "call_expression" or _t(call.child_by_field_name("function")) != "atomicAdd":
        return None
    args = [c for c in call.child_by_field_name("arguments").named_children if c.type != "comment"]
    if len(args) != 2:
        return None
    s, scale = _scaled_sum(args[1], fn, fdecl)
    if s is None:
        return None
    decl = next((d for d in stmts[:-2] if d.type == "declaration" and
                 [c for c in d.named_children if c.type in ("init_declarator", "identifier")] and
                 all(c.type == "init_declarator" for c in d.named_children if c.type in ("init_declarator", "identifier"))
                 and [_t(c.child_by_field_name("declarator")) for c in d.named_children if c.type == "init_declarator"] == [s]),
                None)
    if decl is None:
        return None
    if scale != "{}" and _t(decl.child_by_field_name("type")).split()[-1:] not in (["float"], ["double"]):
        return None                               # an integer sum scaled at its end: not term by term
    init = next(c for c in decl.named_children if c.type == "init_declarator").child_by_field_name("value")
    if init is None or not _ZERO.fullmatch(_t(init).strip()):
        return None
    if any(n.type == "identifier" and _t(n) == s for st in stmts[:-2] if not _same(st, decl) for n in _walk(st)):
        return None                               # s used before the loop
    edits = [(decl.start_byte, decl.end_byte, ""), (stmts[-1].start_byte, stmts[-1].end_byte, "")]
    for n in _walk(stmts[-2]):
        if n.type == "identifier" and _t(n) == s:
            a = n.parent
            if a is None or a.type != "assignment_expression" or _t(a.child_by_field_name("operator")) != "+=" or \
                    not _same(a.child_by_field_name("left"), n) or a.parent is None or a.parent.type != "expression_statement":
                return None                       # s is read, or changed otherwise than by s += E
            term = _t(a.child_by_field_name("right"))
            edits.append((a.start_byte, a.end_byte, f"atomicAdd({_t(args[0])}, {scale.format(term if scale == '{}' else f'({term})')})"))
    if len(edits) < 3:
        return None
    return _splice(source, edits)


_TID = re.compile(r"threadIdx\.x")


def _block_sum_as_thread_sum(source: str, fn) -> str | None:
    """A thread's grid-stride sum ``s`` combined across the block before one atomic (``sh[tid] = s;
    __syncthreads();`` a tree ``if (tid < k) sh[tid] += sh[tid + k];`` then ``if (tid == 0)
    atomicAdd(out, sh[0] / n);``, or warp shuffles ``s += __shfl_down_sync(m, s, o);`` then ``if
    (lane == 0) atomicAdd(out, s);``) written as each thread adding its own ``s`` (the same total,
    which :func:`_thread_sum_as_atomics` then reads); None for any other kernel. Only that combining
    may follow the loop: a shared array written with ``s`` at the thread's index and combined by
    ``+=`` of its own elements, barriers, shuffles of ``s`` into ``s``, and one atomic under a
    condition on the thread's index adding ``sh[0]`` or ``s`` (scaled or not)."""
    body = fn.child_by_field_name("body")
    stmts = [c for c in body.named_children if c.type != "comment"]
    loop = next((k for k, st in enumerate(stmts) if st.type == "for_statement"), None)
    if loop is None or loop + 1 >= len(stmts):
        return None
    tids = {"threadIdx.x"}                        # names of the thread's index (tid, lane)
    shared = set(_shared_arrays(fn))
    for st in stmts[:loop]:
        t = _t(st)
        if st.type == "declaration" and "__shared__" not in t and _TID.search(t) and "=" in t and "blockIdx" not in t:
            tids |= {_t(n.child_by_field_name("declarator")) for n in _walk(st) if n.type == "init_declarator"}
    sums = {_t(n.child_by_field_name("left")) for n in _walk(stmts[loop]) if n.type == "assignment_expression"
            and _t(n.child_by_field_name("operator")) == "+=" and n.child_by_field_name("left").type == "identifier"}
    tid_re = "|".join(re.escape(t) for t in sorted(tids, key=len, reverse=True))
    tail = stmts[loop + 1:]
    holds: dict[str, str] = {}                   # shared array -> the sum whose values it holds
    atomic = None
    edits = []
    for st in tail:
        t = re.sub(r"\s+", " ", _t(st)).strip()
        if st.type == "declaration" and "__shared__" in t:
            pass
        elif re.fullmatch(r"__syncthreads\(\);|__syncwarp\(\w*\);", t):
            pass
        elif (m := re.fullmatch(rf"(\w+)\[({tid_re})\] = (\w+);", t)) and m.group(1) in shared and m.group(3) in sums:
            holds[m.group(1)] = m.group(3)
        elif st.type == "for_statement" and _tree_loop(st, holds, tid_re):
            pass
        elif st.type == "for_statement" and (m := re.search(r"(\w+) \+= __shfl_(?:down|xor)_sync\(\s*\w+, (\w+), \w+\s*(?:, \w+\s*)?\);", t)) \
                and m.group(1) == m.group(2) and m.group(1) in sums and \
                re.fullmatch(rf"for \([^;]*;[^;]*;[^)]*\) \{{? ?{re.escape(m.group(0))} ?\}}?", t):
            pass
        elif st.type == "if_statement" and atomic is None and st.child_by_field_name("alternative") is None and \
                (m := re.fullmatch(rf"if \(\(?\s*\(?({tid_re})\s*(?:&\s*(?:31|0x1[fF])|%\s*(?:32|warpSize))?\)?\s*==\s*0\s*\)? ?\{{? ?"
                                   r"atomicAdd\(\s*(&?\s*\w+(?:\[0\])?)\s*,\s*(.+?)\);\s*\}?", t)):
            value = m.group(3).strip()
            read = re.match(r"\(?\s*(\w+)(\[0\])?", value)
            src = holds.get(read.group(1)) if read and read.group(2) else (read.group(1) if read and read.group(1) in sums else None)
            if src is None:
                return None
            rest = value[read.end():]
            atomic = f"atomicAdd({m.group(2)}, {'(' if value.startswith('(') else ''}{src}{rest});"
        else:
            return None
        edits.append((st.start_byte, st.end_byte, ""))
    if atomic is None:
        return None
    for st in stmts[:loop]:                      # the shared arrays' declarations go too
        if st.type == "declaration" and "__shared__" in _t(st):
            edits.append((st.start_byte, st.end_byte, ""))
    last = tail[-1]
    edits = [e for e in edits if e[0] != last.start_byte] + [(last.start_byte, last.end_byte, atomic)]
    return _splice(source, edits)


def _tree_loop(st, holds: dict, tid_re: str) -> bool:
    """``for (...) { if (tid < k) sh[tid] += sh[tid + k]; __syncthreads(); }``: a shared array holding
    a sum's values combined among themselves (the loop's own variable for the offset)."""
    t = re.sub(r"\s+", " ", _t(st)).strip()
    body = re.sub(r"^for \([^)]*\) ", "", t)
    body = re.sub(r"__syncthreads\(\);", "", body).replace("{", " ").replace("}", " ")
    m = re.fullmatch(rf"\s*if \(({tid_re}) < (\w+)\)\s*(\w+)\[\1\] (?:\+= \3\[\1 \+ \2\]|= \3\[\1\] \+ \3\[\1 \+ \2\]);\s*", body)
    return bool(m) and m.group(3) in holds


def _scaled_sum(e, fn, fdecl) -> tuple[str | None, str]:
    """What ``atomicAdd(out, e)`` adds at a thread's end, as the sum's name and the scaling applied to it
    (a format string around ``{}``): ``s`` as itself, ``s / X``, ``s * X`` or ``X * s`` (parenthesised
    or not) where X names only the kernel's parameters, which it never changes, and literals, so each
    term may be scaled on its own (``atomicAdd(out, (E) / n)``: the same value to rounding, which
    verification judges); (None, "") for anything else."""
    e = _unparen(e)
    if e.type == "identifier":
        return _t(e), "{}"
    if e.type != "binary_expression" or _t(e.child_by_field_name("operator")) not in ("/", "*"):
        return None, ""
    op = _t(e.child_by_field_name("operator"))
    left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
    if _unparen(left).type == "identifier" and _invariant(right, fn, fdecl):
        return _t(_unparen(left)), "{} " + op + " (" + _t(right) + ")"
    if op == "*" and _unparen(right).type == "identifier" and _invariant(left, fn, fdecl):
        return _t(_unparen(right)), "(" + _t(left) + ") * {}"
    return None, ""


def _invariant(x, fn, fdecl) -> bool:
    """``x`` is literals and parameters of ``fn`` that no statement assigns, arithmetic between them."""
    params = {name for name, *_ in _params(fdecl)}
    for n in _walk(x):
        if n.type == "identifier" and _t(n) not in params:
            return False
        if n.type in ("call_expression", "assignment_expression", "update_expression", "subscript_expression",
                      "field_expression", "pointer_expression", "comma_expression"):
            return False
    names = {_t(n) for n in _walk(x) if n.type == "identifier"}
    return not names & _assigned_names(fn.child_by_field_name("body"))


def _through(bound: str, prelude) -> str:
    """``bound`` with the names the prelude declares from the kernel's sizes (``int total = rows *
    cols;``) replaced by their values (once each, in order), for the spec's count."""
    for st in reversed(prelude):
        m = re.fullmatch(r"(?:const\s+)?(?:int|long long|long|size_t|unsigned(?: int)?|int64_t)\s+(\w+)\s*=\s*([^;,]+);", st.strip())
        if m and re.search(rf"\b{m.group(1)}\b", bound):
            bound = re.sub(rf"\b{m.group(1)}\b", f"({m.group(2).strip()})", bound)
    return bound


def _spec_count(bound: str, params: dict, spec, constants: set = frozenset()) -> str:
    """The spec's expression of the kernel's element count ``bound`` (its scalar arguments replaced
    by the spec's values; the source's integer constants, which launch expressions read, kept)."""
    values = {a.name: str(a.value) for a in spec.args if a.role == "scalar"}
    out = _strip(bound)
    if not re.fullmatch(r"[\w()*+\- ]+", out):
        raise _Refuse(f"not templated: the element count {bound} is not a product of the kernel's sizes")
    def sub(m):
        name = m.group(0)
        if re.fullmatch(r"\d+", name) or (name in constants and name not in params):
            return name
        if name not in values:
            raise _Refuse(f"not templated: the element count uses {name}, which is not a scalar of the spec")
        return f"({values[name]})"
    return re.sub(r"\b\w+\b", sub, out)


def instantiate_flat(source: str, op: FlatOp, values: dict | None = None, template: str | None = None) -> str:
    """``source`` with its entry replaced by the flat template (``template``, else the one for the op's
    kind) behind the same signature, its constants ``values`` (else the start) and its launch line."""
    t = next(x for x in FLAT_TEMPLATES if (x.name == template if template else x.kind == op.kind))
    root = _tree(source)
    fn, fdecl = _entry_def(root, op.entry)
    vals = dict(t.start_for(op), **(values or {}))
    types = {ty for _, ty in op.elems + op.outs} | ({op.acc_type} if op.acc_type else set())
    text = render(f"{t.name}.cu.j2", op=op, values=vals, signature=f"{op.entry}{_t(fdecl.child_by_field_name('parameters'))}",
                  half=bool(types & {"__half", "half", "__half2", "half2"}),
                  bf16=bool(types & {"__nv_bfloat16", "nv_bfloat16", "__nv_bfloat162"}),
                  identity={"+": "(OPTIML_ACC)0", "max": "::cuda::std::numeric_limits<OPTIML_ACC>::lowest()",
                            "min": "::cuda::std::numeric_limits<OPTIML_ACC>::max()"}.get(op.op, ""),
                  combine={"+": "optiml_a + optiml_b", "max": "max(optiml_a, optiml_b)",
                           "min": "min(optiml_a, optiml_b)"}.get(op.op, ""))
    launch = f'// optiml:launch {{grid = ["{t.grid.format(n=op.n_size)}"], block = ["{t.threads}"], shared_mem = "0"}}'
    head = f"// the entry {op.entry} as optiml's {t.name} template: {op.describe()}\n{launch}\n"
    return place_rendered(source, fn, head, text)
