"""Row-wise operations: softmax, log-softmax, RMSNorm, LayerNorm and whatever else reduces
one dimension of an array and maps its elements with the results, recognised from the kernel as a
*program* over one row and run by a tuned template behind the user's own entry signature.

A row is the reduced dimension of an input X of shape [..., J, ...]; the output Y has X's shape.
The program is the kernel's own code, in its order:

- ``stmt``: a statement over scalars (``float m = -INFINITY;``, ``float r = rsqrtf(ss / n + eps);``);
- ``reduce``: a loop over the row that accumulates into scalars (``s += E``, ``m = fmaxf(m, E)``,
  ``fminf``, ``max``, ``min``), ``E`` any expression of the element, its index and earlier scalars;
- ``map``: a loop over the row that stores ``Y[...] = E`` (the last step).

What the kernel does to spread a row over threads and combine partial results (its indices, shared
arrays, barriers, tree loops and shuffles) is dropped: the template does that part, its own way
(:data:`ROW_TEMPLATES`), and reads a reduction's result where the kernel read its shared array's
first element. Like every template it is a hypothesis, verified against the user's reference.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ...source import _walk
from ..cutree import _ancestors, _entry_def, _params, _shared_arrays, _short, _splice, _t, _tree, _unparen
from .common import Spaced, place_rendered, render

_ELEMENT = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "float64": "double"}
_SIZE = {"float": 4, "__half": 2, "__nv_bfloat16": 2, "double": 8}
_INDEX = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim|warpSize)\b")
_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|atomic\w+|__threadfence\w*|__reduce_\w+_sync)\b|"
                   r"\bcg::|\bcooperative_groups::")
_OPS = {"fmaxf": "fmaxf", "fminf": "fminf", "max": "max", "min": "min", "fmax": "fmax", "fmin": "fmin",
        "__hmax": "__hmax", "__hmin": "__hmin"}
_COMBINE = re.compile(r"S|S\s*\+\s*S|(fmaxf|fminf|fmax|fmin|max|min|__hmax|__hmin)\s*\(\s*S\s*,\s*S\s*\)")


@dataclass(frozen=True)
class Step:
    kind: str                      # stmt | reduce | map | store (a reduced row's one value, Y[row])
    body: str                      # C++ text: the statement, or the loop body over optiml_v / optiml_j
    accs: tuple = ()               # reduce: ((name, op), ...); op "+" or a function name
    sides: tuple = ()              # ((array, element type), ...): 1-D arrays along the row read as A[j]
    results: tuple = ()            # reduce: the template's name for each reduced value (after the pass)
    parts: tuple = ()              # online: (the max step, the sum step, statements before, statements after)
    x: str = ""                    # online: the element's expression both reduce (E in max(m, E), exp(E - m))
    exp: str = ""                  # online: the exponential the kernel calls (expf, __expf, exp)


@dataclass(frozen=True)
class RowOp:
    """A row-wise kernel: X and Y, the kernel's expressions of the sizes (O rows before the reduced
    dimension, J along it, I after it) and the spec's (for the launch), and the program."""
    entry: str
    x: str
    y: str
    x_type: str
    y_type: str
    o: str
    j: str
    i: str
    o_size: str
    j_size: str
    i_size: str
    steps: tuple
    j_timing: int = 0
    i_timing: int = 1
    o_timing: int = 0              # the rows (O) at the timing size, 0 where unknown
    dim: int = 0
    reduced: bool = False          # Y holds one value a row (the program ends in a "store" step), else one an element

    @property
    def strided(self) -> bool:
        return self.i != "1"

    def describe(self) -> str:
        # an "online" step is two reductions read in one pass (a softmax's max and sum of exponentials)
        n_red = sum(len(s.accs) for s in self.steps if s.kind in ("reduce", "online"))
        ops = sorted({("sum" if op == "+" else op) for s in self.steps if s.kind in ("reduce", "online")
                      for _, op in s.accs})
        where = f"dimension {self.dim} (size {self.j}, stride {self.i})" if self.strided else f"each row of {self.j}"
        return (f"row-wise {self.x} -> {self.y} over {where}: {n_red} reduction{'s' * (n_red != 1)} "
                f"({', '.join(ops)}) then {'one value a row' if self.reduced else 'an elementwise map'}")


@dataclass(frozen=True)
class RowTemplate(Spaced):
    name: str
    strided: bool                  # for a reduced dimension with a stride (else a contiguous row)
    space: dict
    restrictions: tuple
    what: str
    hint: float
    threads: str
    grid: str                      # over {o}, {i} (spec size expressions)
    flags: tuple = ()
    file: str = ""                 # its Jinja2 file's stem where not its name
    cluster: bool = False          # a row over a thread-block cluster (sm_90): row_reduce.cu.j2's cluster form
    grouped: bool = False          # a row over a group of blocks meeting in global memory: its grid form
    shared_mem: str = "0"          # dynamic shared memory a block ({size}: the bytes of an input element)

    @property
    def split(self) -> bool:
        """A row over several blocks (the cluster or the grid form)."""
        return self.cluster or self.grouped

    def start_for(self, op: RowOp) -> dict:
        """A starting point for the timing size: the row cached in registers when it fits in 64
        values a thread, wide loads where the size allows."""
        j = max(op.j_timing, 1)
        size = _SIZE.get(op.x_type, 4)
        vec = next(v for v in (8, 4, 2, 1) if v * size <= 16 and j % v == 0)   # a row's widest 16-byte vector
        if self.split:             # the fewest blocks that hold the row, two blocks an SM where they can
            key = "OPTIML_CLUSTER" if self.cluster else "OPTIML_GROUP"

            def two_an_sm(p):      # two blocks' parts in 48 K registers and in the shared memory
                t, items, sitems = p["OPTIML_THREADS"], p["OPTIML_ITEMS"], p["OPTIML_SITEMS"]
                return (2 * t * vec * items * size // 4 <= 49152
                        and 2 * (t * vec * sitems * size + 2048) <= 227 * 1024)
            def filled(p):         # the grid form: enough blocks for every SM of a large GPU
                return not self.grouped or max(op.o_timing, 1) * p[key] >= 128
            fits = [p for p in self.points() if p["OPTIML_VEC"] == vec and -(-j // p[key])
                    <= p["OPTIML_THREADS"] * vec * (p["OPTIML_ITEMS"] + p["OPTIML_SITEMS"])]
            if fits:
                # (the grid form: the GPU filled), two blocks an SM (one loads while the other reduces and
                # stores), the smallest cluster or group, the tightest fit, registers before shared memory,
                # and at a tie the fewer threads (no spills) (MINB: the blocks an SM ptxas must fit, 2
                # exactly where two can); the row read once, so with the streaming hint (CS)
                return min(fits, key=lambda p: (not filled(p), not two_an_sm(p), p[key],
                                                p["OPTIML_THREADS"] * (p["OPTIML_ITEMS"] + p["OPTIML_SITEMS"]),
                                                p["OPTIML_SITEMS"], p["OPTIML_THREADS"], p["OPTIML_MINB"] != 1 + two_an_sm(p),
                                                p["OPTIML_CS"] != 1))
            # streamed: the row read twice, the second time from L2, so without the hint
            return {"OPTIML_THREADS": 1024, "OPTIML_ROWS": 1, "OPTIML_VEC": vec, "OPTIML_ITEMS": 4, "OPTIML_SITEMS": 0,
                    key: max(self.space[key]), "OPTIML_MINB": 1, "OPTIML_CS": 0}
        if not self.strided:
            threads = min(1024, max(32, 1 << math.ceil(math.log2(max(1, -(-j // (vec * 8)))))))
            items = min(64 // vec, 1 << math.ceil(math.log2(max(1, -(-j // (threads * vec))))))
            rows = max(1, min(8, 256 // threads))
            return {"OPTIML_THREADS": threads, "OPTIML_ROWS": rows, "OPTIML_VEC": vec, "OPTIML_ITEMS": items}
        i, j = max(op.i_timing, 1), max(op.j_timing, 1)
        vec = 4 if i % 4 == 0 else (2 if i % 2 == 0 else 1)
        fs = 1
        while -(-j // fs) * vec > 64 and fs < 16:
            fs *= 2
        items = min(64 // vec, 1 << math.ceil(math.log2(max(1, -(-j // fs)))))
        items = max(items, 4)
        threads = 256 if 256 // fs >= 32 else 512            # at least a warp of columns
        return {"OPTIML_THREADS": threads, "OPTIML_FS": fs, "OPTIML_VEC": vec, "OPTIML_ITEMS": items}


# The forms that spread a row over blocks (a cluster, a group): each block's part of the row in at most
# 48 K of the SM's 64 K registers (no spills at 1024 threads x 48 floats or 512 x 96), the rest for the
# indices and the reductions; the part past the registers in at most 48 K values of shared memory (192 KB
# of floats); with the cluster or group size, MINB (the blocks an SM ptxas must fit) and CS (the row read
# into the cache and the output written with the streaming hint, so that they leave L2 first)
_SPLIT_SPACE = {"OPTIML_THREADS": [256, 512, 1024], "OPTIML_ROWS": [1], "OPTIML_VEC": [1, 2, 4, 8],
                "OPTIML_ITEMS": [4, 8, 12, 16, 24, 32], "OPTIML_SITEMS": [0, 12, 24, 48], "OPTIML_CS": [0, 1]}
_SPLIT_RESTRICTIONS = ("OPTIML_VEC * OPTIML_ITEMS <= 96", "OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS <= 49152",
                       "OPTIML_THREADS * OPTIML_VEC * OPTIML_SITEMS <= 49152")

ROW_TEMPLATES = (
    RowTemplate("row_reduce", False,
                {"OPTIML_THREADS": [32, 64, 128, 256, 512, 1024], "OPTIML_ROWS": [1, 2, 4, 8],
                 "OPTIML_VEC": [1, 2, 4, 8], "OPTIML_ITEMS": [1, 2, 4, 8, 16, 32]},
                ("OPTIML_THREADS * OPTIML_ROWS >= 64 and OPTIML_THREADS * OPTIML_ROWS <= 1024",
                 "OPTIML_VEC * OPTIML_ITEMS <= 64"),
                "THREADS threads a row (a warp or a block; ROWS rows a block), the row read once into registers "
                "(ITEMS vectors of VEC elements a thread) when it fits, each reduction by warp shuffles and "
                "one shared-memory step, the output written with the same vectors", 1.2,
                threads="OPTIML_THREADS * OPTIML_ROWS", grid="cdiv({o}, OPTIML_ROWS)"),
    RowTemplate("col_reduce", True,
                {"OPTIML_THREADS": [128, 256, 512], "OPTIML_FS": [1, 2, 4, 8, 16], "OPTIML_VEC": [1, 2, 4],
                 "OPTIML_ITEMS": [4, 8, 16, 32, 64]},
                ("OPTIML_THREADS / OPTIML_FS >= 32", "OPTIML_VEC * OPTIML_ITEMS <= 64"),
                "each thread VEC neighbouring columns read as one vector, the reduced dimension split over FS "
                "threads, its values kept in registers (ITEMS a thread) when they fit, partial results "
                "combined through shared memory", 1.2,
                threads="OPTIML_THREADS", grid="cdiv({i}, (OPTIML_THREADS / OPTIML_FS) * OPTIML_VEC) * ({o})"),
    RowTemplate("row_cluster", False, dict(_SPLIT_SPACE, OPTIML_CLUSTER=[2, 4, 8], OPTIML_MINB=[1, 2]), _SPLIT_RESTRICTIONS,
                "a row over a cluster of CLUSTER blocks (Hopper), each block its part of the row in registers "
                "(ITEMS vectors of VEC elements a thread) and shared memory (SITEMS more), each reduction over the block and then over the "
                "cluster's blocks through distributed shared memory: a row read once however long, and few "
                "rows still fill the GPU", 1.2,
                threads="OPTIML_THREADS", grid="({o}) * OPTIML_CLUSTER", file="row_reduce", cluster=True,
                shared_mem="OPTIML_SITEMS * OPTIML_THREADS * OPTIML_VEC * {size}"),
    RowTemplate("row_grid", False, dict(_SPLIT_SPACE, OPTIML_GROUP=[8, 16, 32, 64, 128], OPTIML_MINB=[1, 2]), _SPLIT_RESTRICTIONS,
                "a row over a group of GROUP blocks (at most the GPU's SMs; blocks numbered by tickets in the "
                "order they run, so a group's blocks all run), each block its part of the row in registers and "
                "shared memory as in row_cluster, each reduction over the block and then over the group's "
                "blocks through global memory: a few long rows fill the GPU, and the groups at work at once "
                "hold a few rows, whose second read comes from L2 where a part does not fit", 1.2,
                threads="OPTIML_THREADS", grid="({o}) * OPTIML_GROUP", file="row_reduce", grouped=True,
                shared_mem="OPTIML_SITEMS * OPTIML_THREADS * OPTIML_VEC * {size}"),
)


class _Refuse(Exception):
    pass


def _product(sizes: list[str]) -> str:
    return " * ".join(f"({s})" for s in sizes) if sizes else "1"


def recognize_rowwise(source: str, entry: str, spec) -> tuple[RowOp | None, str | None]:
    """The row-wise program behind ``entry`` (see the module), or (None, why not); ``why`` is None
    where nothing looked row-wise at all."""
    root = _tree(source)
    fn, fdecl = _entry_def(root, entry)
    if fn is None or spec is None:
        return None, None
    if fn.parent is not None and fn.parent.type == "template_declaration":
        return None, "not templated: the entry is a C++ template"
    as_calls = _max_ifs(source, fn)
    if as_calls != source:                      # `if (v > m) m = v;` read as `m = max(m, v);`
        return recognize_rowwise(as_calls, entry, spec)
    unseeded = _seeded_extrema(source, fn)
    if unseeded != source:                      # `m = x[o]; for (j = 1; ...)` read as `m = -INFINITY; for (j = 0; ...)`
        return recognize_rowwise(unseeded, entry, spec)
    params = {name for name, *_ in _params(fdecl)}
    pointers = {name for name, _, ptr, _ in _params(fdecl) if ptr is not None}
    outs = [a for a in spec.args if a.role == "output" and len(a.shape) >= 2]
    if len(outs) != 1:
        return None, None
    y = outs[0]
    xs = [a for a in spec.args if a.role == "input" and [str(s) for s in a.shape] == [str(s) for s in y.shape]]
    if len(xs) != 1 or y.name not in pointers or xs[0].name not in pointers:
        return None, None
    x = xs[0]
    scalar_of = {str(a.value): a.name for a in spec.args if a.role == "scalar"}
    shape = [str(s) for s in x.shape]
    body = fn.child_by_field_name("body")
    # a row of several trailing dimensions (a LayerNorm over (features, dim1, dim2)): a loop to the
    # kernel argument whose value is their product reads X as [leading..., that product]
    flat = lambda e: re.sub(r"[\s()]", "", str(e))            # noqa: E731
    for n in _walk(body):
        b = _bound(n) if n.type == "for_statement" else None
        value = next((a.value for a in spec.args if a.role == "scalar" and b is not None and a.name == b[1]), None)
        if b is None or b[1] not in params or value is None or str(value) in shape:
            continue
        for d in range(len(shape) - 2, -1, -1):
            if flat(value) == flat("*".join(shape[d:])):
                shape = shape[:d] + [str(value)]
                break
    # the loops over the reduced dimension: `v < BOUND` with BOUND the kernel's argument for one of X's sizes
    dims = {}
    for n in _walk(body):
        if n.type == "for_statement":
            b = _bound(n)
            if b is not None and b[1] in params:
                for d, s in enumerate(shape):
                    if scalar_of.get(s) == b[1]:
                        dims.setdefault(d, []).append(n)
    if not dims:
        return None, None
    inner = {d: [n for n in ls if not any(m != n and m in ls2 for ls2 in dims.values() for m in _walk(n))]
             for d, ls in dims.items()}
    dims = {d: ls for d, ls in dims.items() if ls and inner[d] == ls}   # loops over rows around the row's loops: containers
    if not dims:
        return None, None
    if len(dims) > 1:
        return None, "not row-wise: loops run over more than one of X's dimensions"
    dim, loops = next(iter(dims.items()))
    def kernel_size(s):
        if re.fullmatch(r"\d+", s):
            return s
        if s in scalar_of:
            return scalar_of[s]
        raise _Refuse(f"not templated: the size {s} is not a kernel argument")
    try:
        o = _product([kernel_size(s) for s in shape[:dim]])
        i = _product([kernel_size(s) for s in shape[dim + 1:]])
        # 1-D arrays along the row (a norm's weight and bias): read as A[j], loaded as vectors like the row
        sides = {a.name: _ELEMENT[a.dtype] for a in spec.args if a.role == "input" and a.name in pointers and
                 ([str(s) for s in a.shape] == [shape[dim]] or flat("*".join(str(s) for s in a.shape)) == flat(shape[dim]))
                 and a.name != x.name and a.dtype in _ELEMENT}
        # device functions that reduce across threads (a warpReduceSum): calling one combines partials
        helpers = {_t(d.child_by_field_name("declarator")) for d in _walk(root) if d.type == "function_declarator"
                   and d.parent is not None and d.parent.type == "function_definition" and d.parent is not fn
                   and _SYNC.search(_t(d.parent))}
        strides = {kernel_size(s) for s in shape[dim + 1:]} - {"1"}
        steps = _Program(fn, set(loops), x.name, y.name, pointers, params, _shared_arrays(fn), sides,
                         helpers, strides).run(body)
    except _Refuse as e:
        return None, str(e)
    if x.dtype not in _ELEMENT or y.dtype not in _ELEMENT:
        return None, f"not templated: {x.dtype} into {y.dtype}"
    timing = getattr(spec, "timing_sizes", {}) or {}
    from ...expr import evaluate
    def tval(sizes):
        try:
            return int(evaluate(_product(sizes), dict(timing)))
        except Exception:
            return 0
    if not shape[dim + 1:] or all(kernel_size(s) == "1" for s in shape[dim + 1:]):
        steps = _online(steps)          # contiguous rows: a softmax's max and sum in one pass when streamed
    return RowOp(entry=entry, x=x.name, y=y.name, x_type=_ELEMENT[x.dtype], y_type=_ELEMENT[y.dtype],
                 o=o, j=kernel_size(shape[dim]), i=i, o_size=_product(shape[:dim]),
                 j_size=shape[dim], i_size=_product(shape[dim + 1:]), steps=tuple(steps), j_timing=tval([shape[dim]]),
                 i_timing=tval(shape[dim + 1:]) if dim + 1 < len(shape) else 1, o_timing=tval(shape[:dim]) if dim else 1,
                 dim=dim), None


_MAX = re.compile(r"optiml_p_(\w+) = (?:fmaxf|fmax|max)\(optiml_p_\1, (.+)\);")
_SUM_EXP = re.compile(r"optiml_p_(\w+) (?:\+= |= optiml_p_\1 \+ )(expf|__expf|exp)\((.+) - (\w+)\);")


def _online(steps: list) -> list:
    """The program with a max reduction followed by a sum of exponentials relative to it (a softmax's
    ``m = max(m, E)``, then ``s += expf(E - m)``) made one ``online`` step: the template keeps both
    passes where the row is in registers, and makes them one pass (the running sum rescaled when the
    running max grows, the pairs combined across threads) where it streams the row from memory."""
    out, k = [], 0
    while k < len(steps):
        s = steps[k]
        m = _MAX.fullmatch(s.body) if s.kind == "reduce" and len(s.accs) == 1 and not s.sides else None
        if m is None:
            out.append(s)
            k += 1
            continue
        j, before, after = k + 1, [], []
        name, expr, result = m.group(1), m.group(2).strip(), s.results[0]
        while j < len(steps) and steps[j].kind == "stmt":
            t = steps[j].body.strip()
            if re.fullmatch(rf"{re.escape(name)} = {re.escape(result)};", t):
                after.append(steps[j])
            elif not re.search(rf"\b({re.escape(name)}|{re.escape(result)})\b", t):
                before.append(steps[j])
            else:
                break
            j += 1
        r = steps[j] if j < len(steps) else None
        e = _SUM_EXP.fullmatch(r.body) if r is not None and r.kind == "reduce" and len(r.accs) == 1 and \
            r.accs[0][1] == "+" and not r.sides else None
        if e is None or e.group(3).strip() != expr or e.group(4) not in (name, result) or \
                any(re.search(rf"\b{re.escape(e.group(1))}\b", b.body) and not b.body.strip().startswith(
                    ("float", "double", "auto")) for b in before):
            out.append(s)
            k += 1
            continue
        out.append(Step("online", "", s.accs + r.accs, (), s.results + r.results,
                        parts=(s, r, tuple(before), tuple(after)), x=expr, exp=e.group(2)))
        k = j + 1
    return out


def _max_ifs(source: str, fn) -> str:
    """``source`` with each ``if (E > m) m = E;`` in the entry written ``m = max(m, E);`` (``<`` for
    ``min``; either side of the comparison): the same value, NaNs included (a comparison with NaN is
    false, and CUDA's max keeps the number), in the form the program's reductions take."""
    edits = []
    for n in _walk(fn):
        if n.type != "if_statement" or n.child_by_field_name("alternative") is not None:
            continue
        cond = n.child_by_field_name("condition")
        while cond is not None and cond.type in ("parenthesized_expression", "condition_clause") and cond.named_children:
            cond = cond.named_children[0]
        body = n.child_by_field_name("consequence")
        if body is not None and body.type == "compound_statement":
            inner = [c for c in body.named_children if c.type != "comment"]
            body = inner[0] if len(inner) == 1 else None
        if cond is None or cond.type != "binary_expression" or body is None or body.type != "expression_statement":
            continue
        a = body.named_children[0] if body.named_children else None
        if a is None or a.type != "assignment_expression" or _t(a.child_by_field_name("operator")) != "=" or \
                a.child_by_field_name("left").type != "identifier":
            continue
        m, e = _t(a.child_by_field_name("left")), _t(a.child_by_field_name("right")).strip()
        op = _t(cond.child_by_field_name("operator"))
        left, right = _t(cond.child_by_field_name("left")).strip(), _t(cond.child_by_field_name("right")).strip()
        fn_name = {(e, ">", m): "max", (m, "<", e): "max", (e, "<", m): "min", (m, ">", e): "min"}.get((left, op, right))
        if fn_name is not None and m != e:
            edits.append((n.start_byte, n.end_byte, f"{m} = {fn_name}({m}, {e});"))
    return _splice(source, edits) if edits else source


# which extremum each max or min call takes, and the identity a float one starts from
_FAMILY = {"fmaxf": "max", "fmax": "max", "max": "max", "__hmax": "max",
           "fminf": "min", "fmin": "min", "min": "min", "__hmin": "min"}
_EXTREMA = {f: {"max": "-INFINITY", "min": "INFINITY"}[k] for f, k in _FAMILY.items() if not f.startswith("__h")}


def _seeded_extrema(source: str, fn) -> str:
    """``source`` with a float max (or min) seeded from the row's first element (``float m =
    x[o];`` then ``for (int j = 1; j < n; j++) m = fmaxf(m, x[o + j]);``) written from the identity
    (``m = -INFINITY;`` and the loop from 0): the same value over a row of at least one element, in
    the form the program's reductions take. Only where the declaration comes right before the loop,
    the seed is the loop's own read with the index at 0, and nothing else is in the loop."""
    edits = []
    for blk in _walk(fn):
        if blk.type != "compound_statement":
            continue
        kids = [c for c in blk.named_children if c.type != "comment"]
        for decl, loop in zip(kids, kids[1:]):
            if decl.type != "declaration" or loop.type != "for_statement":
                continue
            ty = decl.child_by_field_name("type")
            inits = [c for c in decl.named_children if c.type == "init_declarator"]
            if ty is None or _t(ty) not in ("float", "double") or len(inits) != 1:
                continue
            name, seed = _t(inits[0].child_by_field_name("declarator")), inits[0].child_by_field_name("value")
            init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
            m = re.fullmatch(r"\s*(?:int|long|size_t|unsigned)?\s*(\w+)\s*=\s*1\s*;?\s*", _t(init) if init is not None else "")
            if seed is None or seed.type != "subscript_expression" or m is None or cond is None or upd is None:
                continue
            j = m.group(1)
            if not re.fullmatch(rf"\s*(?:{j}\s*\+\+|\+\+\s*{j}|{j}\s*\+=\s*1)\s*", _t(upd)):
                continue
            body = loop.child_by_field_name("body")
            stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
            if len(stmts) != 1 or stmts[0].type != "expression_statement":
                continue
            call = re.fullmatch(rf"\s*{re.escape(name)}\s*=\s*(\w+)\s*\(\s*{re.escape(name)}\s*,\s*(.+)\)\s*;\s*",
                                _t(stmts[0]))
            if call is None or call.group(1) not in _EXTREMA:
                continue
            read = call.group(2).strip()
            arr, idx = _t(seed.child_by_field_name("argument")), _t(seed.child_by_field_name("indices")).strip()[1:-1]
            at0 = re.sub(rf"\b{re.escape(j)}\b", "0", read)
            if not read.startswith(arr + "[") or re.sub(r"\s+", "", at0) not in {
                    re.sub(r"\s+", "", f"{arr}[{idx}+0]"), re.sub(r"\s+", "", f"{arr}[0+{idx}]"),
                    re.sub(r"\s+", "", f"{arr}[{idx}]")}:
                continue
            edits.append((seed.start_byte, seed.end_byte, _EXTREMA[call.group(1)]))
            one = next(c for c in _walk(init) if c.type == "number_literal" and _t(c) == "1")
            edits.append((one.start_byte, one.end_byte, "0"))
    return _splice(source, edits) if edits else source


def _bound(loop):
    """(variable, bound) of a ``for (...; v < BOUND; ...)`` loop, else None."""
    cond = loop.child_by_field_name("condition")
    if cond is None:
        return None
    m = re.fullmatch(r"\s*(\w+)\s*<\s*\(?\s*(\w+)\s*\)?\s*", _t(cond))
    return (m.group(1), m.group(2)) if m else None


class _Program:
    """Walks the kernel body in order and collects the steps (see the module)."""

    def __init__(self, fn, loops, x, y, pointers, params, shared, sides=None, helpers=(), strides=()):
        self.x, self.y = x, y
        self.strides = set(strides)            # the kernel's names of the sizes after the reduced dimension
        self.sides = dict(sides or {})
        self.helper_call = re.compile(r"\b(" + "|".join(map(re.escape, sorted(helpers))) + r")\s*\(") if helpers else None
        self.declared_kept: set[str] = set()
        self.loops, self.x, self.y, self.pointers, self.params = loops, x, y, pointers, params
        self.shared = set(shared) | {d for n in _walk(fn) if n.type == "declaration" and "__shared__" in _t(n)
                                     for d in _declared(n)}
        self.xs, self.ys = {x}, {y}           # X and Y, and local pointers into them
        self.dropped: set[str] = set()         # names of the kernel's own indexing, gone in the template
        self.accs: dict[str, str] = {}         # reduced scalar -> its op
        self.result_of: dict[str, str] = {}    # reduced scalar -> the template's name for its last reduced value
        self.last: list[str] = []              # the last reduction's scalars
        self.shared_of: dict[str, str] = {}    # shared array -> the scalar stored into it
        self.shared_expr: dict[str, str] = {}  # shared scalar -> the value thread 0 gave it from reductions
        self.steps: list[Step] = []
        self.scalars: set[str] = set()

    def run(self, body) -> list[Step]:
        self.block(body)
        kinds = [s.kind for s in self.steps]
        if "map" not in kinds:
            raise _Refuse("not row-wise: no loop over the row stores the output")
        if kinds.count("map") > 1 or "reduce" in kinds[kinds.index("map"):]:
            raise _Refuse("not templated: the output is written by more than one loop, or a reduction follows it")
        while self.steps and self.steps[-1].kind == "stmt":
            self.steps.pop()
        return self.steps

    # -- statements
    def block(self, node):
        for c in node.named_children:
            self.statement(c)

    def statement(self, s):
        t = _t(s)
        if s.type == "comment":
            return
        if s.type == "compound_statement":
            return self.block(s)
        if s.type.startswith("preproc"):
            if t.lstrip().startswith("#pragma"):
                return
            raise _Refuse(f"not templated: a preprocessor line inside the kernel: {_short(t)}")
        if s.type == "for_statement" and s in self.loops:
            return self.row_loop(s)
        self._no_global_writes(s)
        if self._machinery(s):
            return self._combined(s)
        if s.type == "for_statement" or s.type == "while_statement":
            if any(n in self.loops for n in _walk(s)):       # a loop over rows around the row's code
                init = s.child_by_field_name("initializer")
                if init is not None:
                    self.dropped |= _declared(init)
                return self.statement(s.child_by_field_name("body"))
            raise _Refuse(f"not templated: a loop optiml's row templates do not model: {_short(t)}")
        if s.type == "if_statement":
            cons = s.child_by_field_name("consequence")
            if re.fullmatch(r"\{?\s*return\s*;\s*\}?", _t(cons).strip()) and s.child_by_field_name("alternative") is None:
                cond = set(_identifiers(s.child_by_field_name("condition")))
                if cond & (self.scalars | set(self.accs)):
                    raise _Refuse(f"not templated: a return that depends on the row's values: {_short(t)}")
                return                                        # a guard of the kernel's own indexing
            if any(n in self.loops for n in _walk(cons)) and s.child_by_field_name("alternative") is None:
                return self.statement(cons)                  # `if (row < rows) { ... }`
            raise _Refuse(f"not templated: a branch optiml's row templates do not model: {_short(t)}")
        if s.type == "return_statement":
            return
        if s.type in ("declaration", "expression_statement"):
            return self.scalar(s)
        raise _Refuse(f"not templated: a statement optiml's row templates do not model: {_short(t)}")

    def _machinery(self, s) -> bool:
        """Barriers, shuffles, shared-memory stores and loops made only of those: how the kernel
        combines partial results, which the template does its own way."""
        t = _t(s)
        if self._fold_block(s) is not None:
            return True
        if s.type == "declaration" and "__shared__" in t:
            return True
        if (_SYNC.search(t) or (self.helper_call and self.helper_call.search(t))) and \
                not any(n in self.loops for n in _walk(s)):
            if s.type in ("for_statement", "if_statement", "expression_statement", "compound_statement", "declaration"):
                return True
        if s.type == "expression_statement":
            e = s.named_children[0] if s.named_children else None
            if e is not None and e.type == "assignment_expression":
                left = e.child_by_field_name("left")
                base = left
                while base.type == "subscript_expression":
                    base = base.child_by_field_name("argument")
                if _t(base) in self.shared:
                    return True
                if _reads_shared_varying(e.child_by_field_name("right"), self.shared):
                    return True
        if s.type in ("for_statement", "if_statement", "compound_statement", "while_statement"):
            inner = [c for c in s.named_children if c.type in ("compound_statement", "expression_statement", "if_statement", "for_statement")]
            if s.type == "compound_statement":
                inner = [c for c in s.named_children if c.type != "comment"]
            if s.type == "if_statement":
                if s.child_by_field_name("alternative") is not None:
                    return False
                inner = [s.child_by_field_name("consequence")]
            if s.type in ("for_statement", "while_statement"):
                inner = [s.child_by_field_name("body")]
            if inner and all(c is not None and self._machinery(c) for c in inner) and \
                    not any(n in self.loops for n in _walk(s)):
                return True
        return False

    def _no_global_writes(self, s):
        """A store or atomic into an argument outside the row's map (a second output, a statistic
        per row): the templates write Y only, so such a kernel is refused."""
        inside = [(lp.start_byte, lp.end_byte) for lp in self.loops]
        for n in _walk(s):
            if any(a <= n.start_byte < b for a, b in inside):
                continue
            target = None
            if n.type in ("assignment_expression", "update_expression"):
                target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            elif n.type == "call_expression" and re.match(r"atomic\w+$", _t(n.child_by_field_name("function"))):
                a = n.child_by_field_name("arguments")
                target = a.named_children[0] if a is not None and a.named_children else None
            if target is None:
                continue
            names = {_t(x) for x in _walk(target) if x.type == "identifier"}
            hit = names & ((self.pointers | self.xs | self.ys) - self.shared)
            if hit and target.type != "identifier":
                raise _Refuse(f"not templated: {_short(_t(n))} writes {sorted(hit)[0]} outside the row's map")

    def _combined(self, s):
        """Machinery: remember which scalar each shared array holds partial results of (``sh[t] =
        acc``; a combine such as ``sh[t] += sh[t + s]`` keeps it; anything else makes it unknown),
        and where the kernel copies a combined result into a scalar (``tot += sh[w]`` in a last loop,
        ``float t = __shfl_sync(m, s, 0)``), the template's reduced value is that scalar's."""
        fold = self._fold_block(s)
        if fold is not None:
            for name, (acc, expr) in fold.items():
                self.shared_of[name] = acc
                if expr is not None:
                    self.shared_expr[name] = expr
            return
        for n in _walk(s):
            if n.type != "assignment_expression":
                continue
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            base = _base(left)
            if base in self.shared:
                r = _t(right).strip()
                carried = self._carried(right)
                if r in self.accs:
                    self.shared_of[base] = r
                elif carried is not None and self.shared_of.get(base, carried) == carried:
                    self.shared_of[base] = carried                       # sh[t] = c ? s : 0, a shuffle of s
                elif not _is_combine(right, self.shared):
                    self.shared_of[base] = None                          # stat[0] = rsqrtf(ss / n): not ss
                    expr = self._statistic(left, right)
                    if expr is not None:                                 # s_mean = sh[0] / cols: that value
                        self.shared_expr[base] = expr
        # a scalar given the combined value: `tot += sh[w]`, `s = warpReduceSum(s)`, `m = __shfl_sync(.., m, 0)`
        for n in _walk(s):
            if n.type == "call_expression" and re.match(r"atomic(Add|Max|Min)$", _t(n.child_by_field_name("function"))):
                a = [x for x in n.child_by_field_name("arguments").named_children if x.type != "comment"]
                target = _t(a[0]).lstrip("&").strip() if a else ""
                if target in self.shared and len(a) == 2 and _t(a[1]).strip() in self.accs:
                    self.shared_of[target] = _t(a[1]).strip()     # atomicAdd(&total, s): total holds s's sum
            if n.type == "assignment_expression" and n.child_by_field_name("left").type == "identifier" and \
                    _t(n.child_by_field_name("left")) not in self.shared:
                name = _t(n.child_by_field_name("left"))
                right = n.child_by_field_name("right")
                if name in self.accs and name in _identifiers(right):   # a step of the kernel's own
                    if _SYNC.search(_t(right)) or (self.helper_call and self.helper_call.search(_t(right))) or \
                            set(_identifiers(right)) & self.shared:                       # shuffle or tree combine
                        continue
                acc = self._source_of(right)
                if acc is not None and name in self.scalars | set(self.accs):
                    self.steps.append(Step("stmt", f"{name} = {self.result_of[acc]};"))
        if s.type == "declaration" and "__shared__" not in _t(s):
            declared = _declared(s)
            acc = self._source_of(s)
            t = s.child_by_field_name("type")
            if acc is not None and len(declared) == 1 and t is not None:
                self._declare(declared)
                self.scalars |= declared
                self.steps.append(Step("stmt", f"{_t(t)} {next(iter(declared))} = {self.result_of[acc]};"))
            else:
                self.dropped |= declared - self.shared

    def _fold_block(self, s) -> dict | None:
        """One thread folding the warps' partials into shared scalars: ``if (threadIdx.x == 0) {
        float t = part[0]; for (int w = 1; w < 8; w++) t = fmaxf(t, part[w]); row_max = t; }`` (or
        ``t = 0; ... t += part[w]``, then ``s_mean = t / cols``). Each local starts from a shared
        array's first partial or a constant and is folded with the op of the reduction whose partials
        the array holds (``shared_of``); each shared scalar is given a local (then it holds that
        reduction's result) or an expression of locals and the kernel's arguments (then its value,
        written over the template's reduced values). {shared scalar: (reduction or None, value or
        None)}; None for any other statement."""
        if s.type != "if_statement" or s.child_by_field_name("alternative") is not None:
            return None
        cond = s.child_by_field_name("condition")
        if not _INDEX.search(_t(cond)) and not set(_identifiers(cond)) & self.dropped:
            return None
        if set(_identifiers(cond)) & (self.scalars | set(self.accs) | self.shared):
            return None
        first = re.compile(r"\(?\s*\(?\s*(?:threadIdx\.x|\w+)\s*(?:%\s*(?:32|warpSize)|&\s*(?:31|0x1[fF]))?\s*\)?\s*==\s*0\s*\)?")
        lane0: set = set()                           # statements only the first thread (of its warp) runs

        def inside(node, only_first=False) -> list:  # the statements, those of an inner `if (threadIdx.x == 0)` too
            kids = [c for c in node.named_children if c.type != "comment"] if node.type == "compound_statement" else [node]
            out = []
            for c in kids:
                cc = c.child_by_field_name("condition") if c.type == "if_statement" else None
                if cc is not None and c.child_by_field_name("alternative") is None and _INDEX.search(_t(cc)) and \
                        not set(_identifiers(cc)) & (self.scalars | set(self.accs) | self.shared):
                    out += inside(c.child_by_field_name("consequence"), only_first or bool(first.fullmatch(_t(cc).strip())))
                else:
                    out.append(c)
                    if only_first:
                        lane0.add(c.start_byte)
            return out
        stmts = inside(s.child_by_field_name("consequence"), bool(first.fullmatch(_t(cond).strip())))
        shuffled: set = set()                        # locals folded by shuffles: lane 0 alone holds the whole
        local: dict[str, str | None] = {}            # folded local -> the reduction it carries
        out: dict[str, tuple] = {}
        const = re.compile(r"-?\(?\s*(\d+\.?\d*([eE][+-]?\d+)?[fF]?|INFINITY|FLT_MAX|-FLT_MAX|-INFINITY)\s*\)?")

        def partial(node) -> str | None:             # part[0] / part[w]: the reduction its partials are
            if node.type != "subscript_expression" or _base(node) not in self.shared or _base(node) in out:
                return None
            return self.shared_of.get(_base(node))

        shfl = r"__shfl_(?:down|xor)_sync\s*\(\s*\w+\s*,\s*{n}\s*,\s*\w+\s*(?:,\s*\w+\s*)?\)"

        def fold_step(e, name) -> str | None:        # t += part[w], t = t + part[w], t = fmaxf(t, part[w])
            if e is None or e.type != "assignment_expression" or _t(e.child_by_field_name("left")) != name:
                return None
            op, right = _t(e.child_by_field_name("operator")), e.child_by_field_name("right")
            acc = local.get(name)                    # the warps' values folded by shuffles: t += __shfl_down_sync(m, t, o)
            sh = shfl.format(n=re.escape(name))
            if acc is not None and op == "+=" and re.fullmatch(rf"\s*{sh}\s*", _t(right)) and self.accs.get(acc) == "+":
                shuffled.add(name)
                return acc
            m = re.fullmatch(rf"\s*(\w+)\s*\(\s*(?:{re.escape(name)}\s*,\s*{sh}|{sh}\s*,\s*{re.escape(name)})\s*\)\s*", _t(right))
            if acc is not None and op == "=" and m and _FAMILY.get(m.group(1)) is not None and \
                    _FAMILY.get(m.group(1)) == _FAMILY.get(self.accs.get(acc, "")):
                shuffled.add(name)
                return acc
            if op == "+=":
                acc = partial(right)
                return acc if acc is not None and self.accs.get(acc) == "+" else None
            if op != "=":
                return None
            text = _splice(_t(right), [(n.start_byte - right.start_byte, n.end_byte - right.start_byte, "S")
                                       for n in _walk(right) if partial(n) is not None])
            parts = {partial(n) for n in _walk(right) if partial(n) is not None}
            if len(parts) != 1:
                return None
            acc = parts.pop()
            m = re.fullmatch(rf"\s*{re.escape(name)}\s*\+\s*S\s*|\s*S\s*\+\s*{re.escape(name)}\s*", text)
            if m and self.accs.get(acc) == "+":
                return acc
            m = re.fullmatch(rf"\s*(\w+)\s*\(\s*(?:{re.escape(name)}\s*,\s*S|S\s*,\s*{re.escape(name)})\s*\)\s*", text)
            if m and _FAMILY.get(m.group(1)) is not None and _FAMILY.get(self.accs.get(acc, "")) == _FAMILY.get(m.group(1)):
                return acc
            return None

        for st in stmts:
            if st.type == "declaration" and "__shared__" not in _t(st) and _is_value(st):
                inits = [n for n in st.named_children if n.type == "init_declarator"]
                if len(inits) != 1 or len(st.named_children) != 2:
                    return None
                name, value = _t(inits[0].child_by_field_name("declarator")), inits[0].child_by_field_name("value")
                if name in self.scalars | set(self.accs) | self.shared or value is None:
                    return None
                inner = _unparen(value)
                if inner.type == "conditional_expression" and \
                        const.fullmatch(_t(inner.child_by_field_name("alternative")).strip()) and \
                        not set(_identifiers(inner.child_by_field_name("condition"))) & (self.scalars | set(self.accs) | self.shared) and \
                        _INDEX.search(_t(inner.child_by_field_name("condition"))):
                    inner = inner.child_by_field_name("consequence")   # (lane < warps) ? part[lane] : 0
                acc = partial(inner)
                if acc is None and not const.fullmatch(_t(value).strip()):
                    return None
                local[name] = acc
            elif st.type == "for_statement":
                inner = st.child_by_field_name("body")
                if inner is not None and inner.type == "compound_statement":
                    kids = [c for c in inner.named_children if c.type != "comment"]
                    inner = kids[0] if len(kids) == 1 else None
                if inner is None or inner.type != "expression_statement" or not inner.named_children:
                    return None
                e = inner.named_children[0]
                name = _t(e.child_by_field_name("left")) if e.type == "assignment_expression" else None
                if name not in local:
                    return None
                acc = fold_step(e, name)
                if acc is None or local[name] not in (None, acc):
                    return None
                if set(_identifiers(st.child_by_field_name("condition") or st)) & (self.scalars | set(self.accs)):
                    return None
                local[name] = acc
            elif st.type == "expression_statement" and st.named_children and \
                    st.named_children[0].type == "assignment_expression" and \
                    _t(st.named_children[0].child_by_field_name("operator")) == "=":
                e = st.named_children[0]
                left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
                target = _base(left)
                if target not in self.shared or (left.type == "subscript_expression" and
                                                 _t(left.child_by_field_name("indices") or left).strip("[] ") != "0"):
                    return None
                names = {_t(n) for n in _walk(right) if n.type == "identifier" and not
                         (n.parent is not None and n.parent.type == "call_expression" and
                          n.parent.child_by_field_name("function") == n)}
                used = names & set(local)
                if used & shuffled and st.start_byte not in lane0:
                    return None                      # after shfl_down only the first lane holds the whole
                if not used or any(local[n] is None for n in used) or \
                        names - set(local) - self.params or _SYNC.search(_t(right)) or _INDEX.search(_t(right)):
                    return None
                if right.type == "identifier":
                    out[target] = (local[_t(right)], None)
                else:
                    value = _splice(_t(right), [(n.start_byte - right.start_byte, n.end_byte - right.start_byte,
                                                 self.result_of[local[_t(n)]]) for n in _walk(right)
                                                if n.type == "identifier" and _t(n) in local])
                    out[target] = (None, value)
            else:
                return None
        return out or None

    def _statistic(self, left, right) -> str | None:
        """The value a shared scalar (or a shared array's first element) is given from the combined
        reductions alone (``s_mean = sh[0] / cols``, read by every thread after a barrier), written
        over the template's reduced values; None where it reads anything else (an accumulator's own
        partial, the row, the kernel's indexing)."""
        if left.type == "subscript_expression" and _t(left.child_by_field_name("indices") or left).strip("[] ") != "0":
            return None
        names = set(_identifiers(right))
        if names & (set(self.accs) | self.dropped | self.xs | self.ys) or _SYNC.search(_t(right)) or \
                not any(n.type == "subscript_expression" and _base(n) in self.shared for n in _walk(right)):
            return None
        try:
            return self._reduced_reads(right)
        except _Refuse:
            return None

    def _carried(self, node) -> str | None:
        """The accumulator ``node`` carries exactly (:meth:`_exact`), if one, without refusing."""
        try:
            found = self._exact(node)
        except _Refuse:
            return None
        return found if found in self.accs else None

    def _source_of(self, node) -> str | None:
        """The reduced scalar an expression of the kernel's combining carries: the scalar itself, a
        shuffle or a reducing helper of it alone (``__shfl_sync(m, s, 0)``, ``warpSum(s)``), a shared
        array holding its partials (``sh[w]`` in a loop, ``sh[0]``), or ``c ? that : 0``; None where
        the expression carries none. Arithmetic around such a value is refused (the template keeps
        the value, not the arithmetic)."""
        if node.type == "init_declarator" or node.type == "declaration":
            vals = [n.child_by_field_name("value") for n in _walk(node) if n.type == "init_declarator"]
            if len(vals) != 1 or vals[0] is None:
                return None
            node = vals[0]
        names = set(_identifiers(node))
        if not names & (set(self.accs) | self.shared):
            return None
        found = self._exact(node)
        if found is None:
            raise _Refuse(f"not templated: arithmetic around the kernel's own combining ({_short(_t(node))})")
        return found

    def _exact(self, node) -> str | None:
        node = _unparen(node)
        t = _t(node).strip()
        if node.type == "identifier":
            if t in self.accs:
                return t
            return self.shared_of.get(t) if t in self.shared else None
        if node.type == "subscript_expression" and _base(node) in self.shared:
            idx = []
            chain = node
            while chain.type == "subscript_expression":
                idx.append(_t(chain.child_by_field_name("indices") or chain).strip("[] "))
                chain = chain.child_by_field_name("argument")
            if any(re.fullmatch(r"\d+[uU]?", i) and i != "0" for i in idx):
                return None                                       # one warp's partial, not the whole
            return self.shared_of.get(_base(node))
        if node.type == "conditional_expression":
            alt = node.child_by_field_name("alternative")
            if alt is not None and re.fullmatch(r"-?\d+\.?\d*([eE][+-]?\d+)?[fF]?|-?INFINITY|-?FLT_MAX", _t(alt).strip()):
                return self._exact(node.child_by_field_name("consequence"))
            return None
        if node.type == "call_expression":
            fn = _t(node.child_by_field_name("function"))
            args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "comment"]
            carried = [a for a in args if set(_identifiers(a)) & (set(self.accs) | self.shared)]
            if len(carried) != 1:
                return None
            if re.fullmatch(r"__shfl\w*_sync|__reduce_\w+_sync|cg::\w+|cooperative_groups::\w+", fn) or \
                    (self.helper_call is not None and self.helper_call.match(fn + "(") and len(args) == 1):
                return self._exact(carried[0])
        return None

    def _declare(self, declared: set[str]):
        twice = declared & self.declared_kept
        if twice:
            raise _Refuse(f"not templated: {sorted(twice)[0]} is declared twice (in separate scopes of the kernel)")
        self.declared_kept |= declared

    def scalar(self, s):
        t = _t(s)
        names = set(_identifiers(s))
        declared = _declared(s) if s.type == "declaration" else set()
        is_ptr = s.type == "declaration" and any(n.type == "pointer_declarator" for n in _walk(s))
        if is_ptr and names & (self.xs | self.ys):
            (self.xs if names & self.xs else self.ys).update(declared)
            return
        if names & (self.xs | self.ys) and not is_ptr:
            raise _Refuse(f"not templated: {_short(t)} reads the row outside a loop over it")
        if _INDEX.search(t) or is_ptr or names & self.dropped or (declared and not _is_value(s)):
            changed = {_t(n.child_by_field_name("left") if n.type == "assignment_expression" else n.child_by_field_name("argument"))
                       for n in _walk(s) if n.type in ("assignment_expression", "update_expression")}
            kept = changed & (self.scalars | set(self.accs))
            if kept:
                raise _Refuse(f"not templated: {_short(t)} changes {sorted(kept)[0]} with the kernel's own indexing "
                              "(a per-row value the template does not read)")
            self.dropped |= declared
            return
        text = self._reduced_reads(s)
        self._declare(declared)
        self.scalars |= declared
        self.steps.append(Step("stmt", text))

    def _reduced_reads(self, node) -> str:
        """``node``'s text with each read of a shared array's first element (the combined result of
        the kernel's own reduction) replaced by the reduced scalar."""
        edits = []
        for n in _walk(node):
            if n.type == "subscript_expression" and (n.parent is None or n.parent.type != "subscript_expression"):
                base = _base(n)
                if base in self.shared:
                    chain, idx = n, []
                    while chain.type == "subscript_expression":
                        idx.append(_t(chain.child_by_field_name("indices") or chain).strip("[] "))
                        chain = chain.child_by_field_name("argument")
                    if any(i != "0" for i in idx):
                        raise _Refuse(f"not templated: {_short(_t(node))} reads {base} at {', '.join(idx)}")
                    if base in self.shared_expr:
                        edits.append((n.start_byte - node.start_byte, n.end_byte - node.start_byte, f"({self.shared_expr[base]})"))
                        continue
                    if base in self.shared_of and self.shared_of[base] is None:
                        raise _Refuse(f"not templated: {base} holds something other than a reduction's partial results")
                    acc = self.shared_of.get(base) or (self.last[0] if len(self.last) == 1 else None)
                    if acc is None:
                        raise _Refuse(f"not templated: which reduction {base}[0] holds is not clear")
                    edits.append((n.start_byte - node.start_byte, n.end_byte - node.start_byte, self.result_of[acc]))
            elif n.type == "identifier" and _t(n) in self.shared_expr and (n.parent is None or n.parent.type != "subscript_expression"):
                edits.append((n.start_byte - node.start_byte, n.end_byte - node.start_byte, f"({self.shared_expr[_t(n)]})"))
            elif n.type == "identifier" and _t(n) in self.shared and (n.parent is None or n.parent.type != "subscript_expression"):
                acc = self.shared_of.get(_t(n))
                if acc is None:
                    raise _Refuse(f"not templated: {_short(_t(node))} reads {_t(n)}, shared, not a reduction's result")
                edits.append((n.start_byte - node.start_byte, n.end_byte - node.start_byte, self.result_of[acc]))
        return _splice(_t(node), edits)

    # -- loops over the row
    def _row_loop_shape(self, loop, var, body, stores, accs):
        """What makes a loop one pass over the row, element by element: it starts at 0 (one thread
        walks the row, one step at a time) or at the kernel's own thread index (striding); each X it
        reads is at one index that holds the variable once, as a term; a store of Y is not under a
        condition; an accumulator is read only by its own update; no scalar is counted with ++."""
        init = loop.child_by_field_name("initializer")
        update = loop.child_by_field_name("update")
        start = _t(init).split("=", 1)[1].strip().rstrip(";").strip() if init is not None and "=" in _t(init) else None
        if start is None:
            raise _Refuse("not templated: a loop over the row without a start")
        step = re.sub(r"\s+", "", _t(update)) if update is not None else ""
        if re.fullmatch(r"0[uUlL]*", start):
            if step not in (f"{var}++", f"++{var}", f"{var}+=1", f"{var}={var}+1"):
                raise _Refuse(f"not templated: a loop over the row by steps of {step}")
        elif not (set(_identifiers(init)) & self.dropped or _INDEX.search(start)) or not step.startswith(f"{var}+="):
            raise _Refuse(f"not templated: a loop over the row from {start} by {step}")
        indices = set()
        for n in _walk(body):
            is_store = n.type == "subscript_expression" and _base(n) in self.ys and any(n.parent == s for s in stores)
            if n.type == "subscript_expression" and (_base(n) in self.xs or is_store):
                idx = re.sub(r"\s+", "", _t(n.child_by_field_name("indices") or n)[1:-1])
                idx = re.sub(r"\((size_t|int|long long|long|unsigned|int64_t)\)", "", idx)
                if not is_store:
                    indices.add(idx)
                terms = re.split(r"(?<![\[(*/%])[+]", idx)
                own = [t for t in terms if re.search(rf"(?<![\w.]){re.escape(var)}(?!\w)", t)]
                factors = re.split(r"\*", own[0].replace("(", "").replace(")", "")) if len(own) == 1 else []
                others = [f for f in factors if f != var]
                rest = set(re.findall(r"[A-Za-z_]\w*", "+".join(t for t in terms if t not in own)))
                whole = _base(n) in (self.x, self.y)               # the argument itself: the row's offset in the index
                if len(own) != 1 or factors.count(var) != 1 or not set(others) <= self.strides \
                        or any(re.fullmatch(r"\(?-?\d+[uUlL]*\)?", t) for t in terms) or "-" in idx \
                        or rest & (self.scalars | set(self.accs)) or \
                        (whole and not rest & (self.dropped | {"blockIdx", "threadIdx", "blockDim", "gridDim"})):
                    raise _Refuse(f"not templated: {_short(_t(n))} is not the row's element {var}")
            if n.type == "update_expression" and _t(n.child_by_field_name("argument")) != var:
                raise _Refuse(f"not templated: {_short(_t(n))} counts in a loop over the row")
        if len(indices) > 1:
            raise _Refuse(f"not templated: the loop over the row reads X at {len(indices)} different places")
        for s in stores:
            up = s.parent
            while up is not None and up != loop:
                if up.type in ("if_statement", "conditional_expression", "switch_statement"):
                    raise _Refuse("not templated: the output is stored under a condition")
                up = up.parent
        for name, op in accs.items():
            uses = sum(1 for n in _walk(body) if n.type == "identifier" and _t(n) == name)
            own = 1 if op == "+" and not re.search(rf"{re.escape(name)}\s*=\s*{re.escape(name)}\s*\+", _t(body)) else 2
            if uses != own:
                raise _Refuse(f"not templated: {name} is read in its own loop, not only accumulated")

    def row_loop(self, loop):
        var = _bound(loop)[0]
        body = loop.child_by_field_name("body")
        stores, accs = [], {}
        for n in _walk(body):
            if n.type == "assignment_expression":
                left = n.child_by_field_name("left")
                op = _t(n.child_by_field_name("operator"))
                if left.type == "subscript_expression" and _base(left) in self.ys:
                    if op != "=":
                        raise _Refuse("not templated: the output is read back (" + _short(_t(n)) + ")")
                    stores.append(n)
                elif left.type == "identifier" and _t(left) in self.scalars | set(self.accs) and _t(left) != var:
                    name = _t(left)
                    r = _t(n.child_by_field_name("right"))
                    if op == "+=":
                        accs[name] = "+"
                    elif op == "=":
                        rn = n.child_by_field_name("right")
                        m = re.fullmatch(r"\s*(\w+)\s*\((.*)\)\s*", r, re.S) if rn.type == "call_expression" else None
                        if m and m.group(1) in _OPS and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", m.group(2)):
                            accs[name] = m.group(1)
                        elif re.match(rf"\s*{re.escape(name)}\s*\+", r):
                            accs[name] = "+"
                        else:
                            raise _Refuse(f"not templated: {_short(_t(n))} is not an accumulation")
                    else:
                        raise _Refuse(f"not templated: {_short(_t(n))} is not an accumulation")
        self._row_loop_shape(loop, var, body, stores, accs)
        element = [n for n in _walk(body) if n.type == "subscript_expression" and _base(n) in self.xs | self.ys]
        for n in _walk(body):
            if n.type == "subscript_expression" and _base(n) in self.ys and not any(n.parent == s for s in stores):
                raise _Refuse("not templated: the output is read back in a loop over the row")
            if n.type == "identifier" and _t(n) in self.dropped and _t(n) != var and \
                    not any(e.start_byte <= n.start_byte and n.end_byte <= e.end_byte for e in element):
                raise _Refuse(f"not templated: the loop over the row uses {_t(n)}, the kernel's own index")
            if n.type in ("for_statement", "while_statement", "return_statement", "break_statement", "continue_statement",
                          "goto_statement", "do_statement", "switch_statement"):
                raise _Refuse("not templated: a loop over the row with its own control flow")
        if not any(n.type == "subscript_expression" and _base(n) in self.xs for n in _walk(body)):
            raise _Refuse("not templated: a loop over the row that does not read X")
        if _SYNC.search(_t(body)):
            raise _Refuse("not templated: a loop over the row with barriers or shuffles")
        read_shared = sorted(set(_identifiers(body)) & self.shared - set(self.shared_expr))
        if read_shared:
            raise _Refuse(f"not templated: a loop over the row reads {read_shared[0]}, shared (copy it into a scalar first)")
        if stores and accs:
            raise _Refuse("not templated: one loop both reduces and writes the output")
        edits, sides = [], {}
        for n in _walk(body):
            if n.type == "subscript_expression" and _base(n) in self.xs:
                up = n.parent
                if up is not None and up.type == "pointer_expression":       # &X[i]: only as __ldg(&X[i])
                    call = up.parent.parent if up.parent is not None else None
                    if call is not None and call.type == "call_expression" and \
                            _t(call.child_by_field_name("function")) in ("__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu"):
                        edits.append((call.start_byte, call.end_byte, "optiml_v"))
                        continue
                    raise _Refuse(f"not templated: the row's address is taken ({_short(_t(up))})")
                edits.append((n.start_byte, n.end_byte, "optiml_v"))
            elif n.type == "subscript_expression" and _t(n.child_by_field_name("argument")) in self.sides and \
                    _t(n.child_by_field_name("indices") or n).strip("[] ") == var:
                name = _t(n.child_by_field_name("argument"))
                sides[name] = self.sides[name]
                up = n.parent
                if up is not None and up.type == "pointer_expression":       # &W[j]: only as __ldg(&W[j])
                    call = up.parent.parent if up.parent is not None else None
                    if call is not None and call.type == "call_expression" and \
                            _t(call.child_by_field_name("function")) in ("__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu"):
                        edits.append((call.start_byte, call.end_byte, f"optiml_s_{name}"))
                        continue
                    raise _Refuse(f"not templated: the address of {name}'s element is taken ({_short(_t(up))})")
                edits.append((n.start_byte, n.end_byte, f"optiml_s_{name}"))
            elif n.type == "identifier" and _t(n) == var:
                edits.append((n.start_byte, n.end_byte, "optiml_j"))
            elif n.type == "identifier" and _t(n) in accs:
                edits.append((n.start_byte, n.end_byte, f"optiml_p_{_t(n)}"))
            elif n.type == "identifier" and _t(n) in self.shared_expr and \
                    (n.parent is None or n.parent.type != "subscript_expression"):
                edits.append((n.start_byte, n.end_byte, f"({self.shared_expr[_t(n)]})"))     # s_rstd: its value
        for s in stores:
            left = s.child_by_field_name("left")
            edits = [e for e in edits if not (left.start_byte <= e[0] < left.end_byte)]
            edits.append((left.start_byte, left.end_byte, "optiml_out"))
        # an edit inside another (the index of a replaced X[j], a name in a replaced call) goes with it
        edits = [e for e in edits if not any(o is not e and o[0] <= e[0] and e[1] <= o[1] and o != e for o in edits)]
        text = _splice(_t(body), [(a - body.start_byte, b - body.start_byte, r) for a, b, r in edits])
        text = text.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1].strip()
        if not text.endswith(";") and not text.endswith("}"):
            text += ";"
        if stores:
            self.steps.append(Step("map", text, sides=tuple(sorted(sides.items()))))
        else:
            if not accs:
                raise _Refuse("not templated: a loop over the row that neither reduces nor writes")
            self.accs.update(accs)
            self.last = list(accs)
            k = len(self.steps)
            ordered = tuple(sorted(accs.items()))
            results = tuple(f"optiml_r{k}_{name}" for name, _ in ordered)
            self.result_of.update({name: r for (name, _), r in zip(ordered, results)})
            self.steps.append(Step("reduce", text, ordered, tuple(sorted(sides.items())), results))


def _is_combine(right, shared) -> bool:
    """``right`` combines shared partial results (``sh[a] + sh[b]``, ``fmaxf(sh[a], sh[b])``, one
    ``sh[a]``) or fills with a constant (the identity before the partials go in)."""
    edits = [(n.start_byte - right.start_byte, n.end_byte - right.start_byte, "S") for n in _walk(right)
             if n.type == "subscript_expression" and _base(n) in shared and
             (n.parent is None or n.parent.type != "subscript_expression")]
    text = _splice(_t(right), edits).strip()
    return bool(_COMBINE.fullmatch(text) or re.fullmatch(r"-?\(?\s*(\d+\.?\d*([eE][+-]?\d+)?[fF]?|INFINITY|FLT_MAX|"
                                                         r"-FLT_MAX|-INFINITY)\s*\)?", text))


def _base(sub) -> str:
    while sub.type == "subscript_expression":
        sub = sub.child_by_field_name("argument")
    return _t(sub)


def _identifiers(node) -> list[str]:
    return [_t(n) for n in _walk(node) if n.type == "identifier"]


def _declared(node) -> set[str]:
    out = set()
    for n in _walk(node):
        if n.type == "init_declarator":
            d = n.child_by_field_name("declarator")
            while d is not None and d.type != "identifier":
                d = d.child_by_field_name("declarator")
            if d is not None:
                out.add(_t(d))
        elif n.type == "identifier" and n.parent is not None and n.parent.type == "declaration" and \
                any(d == n for d in n.parent.children_by_field_name("declarator")):    # float a, b; each of them
            out.add(_t(n))
    return out


def _is_value(decl) -> bool:
    """A declaration of floating-point or integer scalars (not arrays, pointers or references)."""
    t = decl.child_by_field_name("type")
    return t is not None and not any(n.type in ("array_declarator", "pointer_declarator", "reference_declarator")
                                     for n in _walk(decl))


def _reads_shared_varying(node, shared) -> bool:
    if node is None:
        return False
    for n in _walk(node):
        if n.type == "subscript_expression" and _base(n) in shared:
            idx = _t(n.child_by_field_name("indices") or n).strip("[] ")
            if idx != "0":
                return True
    return False


def instantiate_rowwise(source: str, op: RowOp, values: dict | None = None, template: str | None = None) -> str:
    """``source`` with its entry replaced by the row template (``template``, else the one for the
    op's layout) behind the same signature, its constants ``values`` (else the start for the timing
    size) and its launch line."""
    t = next(x for x in ROW_TEMPLATES if (x.name == template if template else x.strided == op.strided and not x.split))
    root = _tree(source)
    fn, fdecl = _entry_def(root, op.entry)
    vals = dict(t.start_for(op), **(values or {}))
    text = render(f"{t.file or t.name}.cu.j2", op=op, steps=op.steps, values=vals, cluster=t.cluster, grid=t.grouped,
                  group_max=max(t.space.get("OPTIML_GROUP", [0])),
                  signature=f"{op.entry}{_t(fdecl.child_by_field_name('parameters'))}", combine=_combine,
                  same_type=op.x_type == op.y_type)
    launch = (f'// optiml:launch {{grid = ["{t.grid.format(o=op.o_size, i=op.i_size)}"], '
              f'block = ["{t.threads}"], shared_mem = "{t.shared_mem.format(size=_SIZE.get(op.x_type, 4))}"}}')
    head = f"// the entry {op.entry} as optiml's {t.name} template: {op.describe()}\n{launch}\n"
    return place_rendered(source, fn, head, text)


def _combine(op: str, a: str, b: str) -> str:
    return f"({a}) + ({b})" if op == "+" else f"{op}({a}, {b})"
