"""Row-wise, reduction and elementwise operations read from the reference rather than from the kernel:
where a spec's reference is a PyTorch function (a KernelBench task's Model among them), the ops it
records at a verify size (:func:`.traced.trace_reference`) are read as one of optiml's non-GEMM
operations, whatever way the kernel was written (a shared-memory tree, a warp a row, vector loads, a
pointer walked along the row), and the operation's template is built behind the kernel's signature.

The reading: one of the kernel's arrays, X, is the *frame* (the largest input); every value of the
reference is either a value of each of X's elements (an elementwise chain on X, other arrays of its
shape, arrays broadcast over it, numbers), or a value of each *row*: the result of a reduction of an
element value over one run of X's dimensions (sum, mean, max, min, norms, variance, logsumexp), the
same run for every reduction. Softmax, log-softmax and LayerNorm are their reductions and a map. The
output is then

- an element value with no reduction: the ``elementwise`` template (:mod:`.flat`);
- an element value after reductions (a softmax, a norm): the row templates (:mod:`.rowwise`), a
  contiguous run (``row_reduce``) or one with a stride after it (``col_reduce``), each reduction a
  pass (a softmax's max and sum made one pass where the row streams);
- a row value (a sum over a dimension, a matrix-vector product): the same row templates writing one
  value a row.

Refused with its reason: reductions over different dimensions, a gather by index, a second product,
a tensor the reference made that is not one number, an array broadcast along rows in a row-wise
program. Like every template, the result is a hypothesis verified like any edit.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .traced import _BINARY, _RESHAPE, _SAME, _Refused, _kernel_size, _lit, _unary, trace_once

_ELEMENT = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
_COMPARE = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}
_MORE_UNARY = {
    "selu": "(({x}) > 0.0f ? 1.0507009873554805f * ({x}) : 1.0507009873554805f * 1.6732632423543772f * (expf({x}) - 1.0f))",
    "sign": "(float)((({x}) > 0.0f) - (({x}) < 0.0f))",
    "sgn": "(float)((({x}) > 0.0f) - (({x}) < 0.0f))",
    "sin": "sinf({x})", "cos": "cosf({x})", "expm1": "expm1f({x})", "exp2": "exp2f({x})", "log2": "log2f({x})",
    "log10": "log10f({x})", "floor": "floorf({x})", "ceil": "ceilf({x})", "trunc": "truncf({x})",
    "logical_not": "(!({x}))",
}
_SUM, _MAX, _MIN = "+", "fmaxf", "fminf"
_VIEWS = _RESHAPE | {"view", "expand", "squeeze", "unsqueeze", "reshape", "_unsafe_view", "unsafe_view", "alias"}


@dataclass
class _V:
    kind: str                # "elem" (a value of each of X's elements) | "row" (of each row) | "num"
    c: str                   # its C expression (a local's name for a row value)
    level: int = 0           # the passes over the row it needs first
    num: float | None = None
    boolean: bool = False


class _Rows:
    """The recorded ops read as reductions over one run of the frame's dimensions and maps."""

    def __init__(self, ops, arrays, spec):
        import torch
        self.torch = torch
        self.ops, self.arrays, self.spec = ops, arrays, spec
        self.storage = {t.untyped_storage().data_ptr(): name for name, t in arrays.items()}
        ins = [a for a in spec.args if a.role == "input" and a.name in arrays]
        if not ins:
            raise _Refused("the kernel takes no input array")
        big = max(arrays[a.name].numel() for a in ins)
        self.frame_arg = next(a for a in ins if arrays[a.name].numel() == big)
        self.frame = tuple(arrays[self.frame_arg.name].shape)
        self.red: tuple | None = None          # (d0, d1): the reduced run of the frame's dimensions
        self.vals, self.keep = {}, []
        self.accs = []                         # (level, name, op, init, body)
        self.rows = []                         # (level, name, C)
        self.elems, self.sides, self.gathers = {}, {}, {}

    # --- reading operands -------------------------------------------------------------------------
    def backing(self, t):
        name = self.storage.get(t.untyped_storage().data_ptr())
        return None if name is None else (name, t.storage_offset())

    def track_copies(self, name, args):
        torch = self.torch
        if name in ("copy_", "copy") and len(args) >= 2 and isinstance(args[1], torch.Tensor):
            b = self.backing(args[1])
            if b is not None and args[1].is_contiguous() and b[1] == 0 and args[1].numel() == self.arrays[b[0]].numel() \
                    and args[0].is_contiguous() and args[0].numel() == args[1].numel():
                self.storage[args[0].untyped_storage().data_ptr()] = b[0]

    def involved(self, x) -> bool:
        torch = self.torch
        return isinstance(x, torch.Tensor) and (id(x) in self.vals or self.backing(x) is not None)

    def value(self, x) -> _V:
        torch = self.torch
        if isinstance(x, bool):
            return _V("num", "1.0f" if x else "0.0f", num=float(x))
        if isinstance(x, (int, float)):
            return _V("num", _lit(x), num=float(x))
        if not isinstance(x, torch.Tensor):
            raise _Refused(f"an operand is a {type(x).__name__}")
        if id(x) in self.vals:
            return self.vals[id(x)]
        b = self.backing(x)
        if b is None:
            if x.numel() >= 1 and x.dtype.is_floating_point and bool((x == x.reshape(-1)[0]).all()):
                return _V("num", _lit(x.reshape(-1)[0].item()), num=float(x.reshape(-1)[0].item()))
            raise _Refused("an operand is a tensor the reference made (not one of the kernel's arrays, nor one number)")
        name, offset = b
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise _Refused(f"the array {name} is of {x.dtype}")
        if name == self.frame_arg.name and tuple(x.shape) != self.frame and not self.vals and x.is_contiguous() \
                and not offset and x.numel() == math.prod(self.frame):
            self.frame = tuple(x.shape)         # X viewed in another shape before anything reads it
        try:
            strides = torch.broadcast_to(x, self.frame).stride()
        except RuntimeError:
            raise _Refused(f"{name} ({' x '.join(map(str, x.shape))}) does not broadcast over "
                           f"{' x '.join(map(str, self.frame))}") from None
        live = [d for d, s in enumerate(strides) if s != 0 and self.frame[d] != 1]
        if offset or (live and (live != list(range(live[0], live[-1] + 1)) or any(
                strides[d] != math.prod(self.frame[d + 1:live[-1] + 1]) for d in live))):
            raise _Refused(f"{name} is read with strides {tuple(strides)} over the frame, not as it lies in memory")
        if live and live[0] == 0 and live[-1] == len(self.frame) - 1 and x.numel() == math.prod(self.frame):
            self.elems[name] = x.dtype
            return _V("elem", f"@E:{name}@")
        a, b_ = (live[0], live[-1] + 1) if live else (0, 0)
        self.gathers[name] = x.dtype
        return _V("elem", f"@G:{name}:{a}:{b_}@")

    # --- the ops ----------------------------------------------------------------------------------
    def read(self, result):
        torch = self.torch
        for name, args, kw, out in self.ops:
            flat_args = [a for a in args if not isinstance(a, (list, tuple))] + \
                [t for a in args if isinstance(a, (list, tuple)) for t in a] + list(kw.values())
            if not any(self.involved(a) for a in flat_args) or (
                    name in ("copy_", "copy") and len(args) >= 2 and id(args[1]) not in self.vals):
                self.track_copies(name, args)  # a parameter copied from a kernel array lives in its memory
                continue
            if (name in _SAME or name.rstrip("_") in _VIEWS) and id(args[0]) not in self.vals:
                continue                        # a view of a kernel array: read where it is used, by its strides
            base = name if name in _SAME else name.lstrip("_").removeprefix("native_")
            if base.endswith("_") and base[:-1] in _VIEWS:
                base = name = base[:-1]         # an in-place view (matmul's unsqueeze_ of a vector): its result
            self.step(base, name, args, kw, out)
        if isinstance(result, (tuple, list)):
            if len(result) != 1:
                raise _Refused("the reference returns more than one output")
            result = result[0]
        if not isinstance(result, torch.Tensor):
            raise _Refused("the reference returns no tensor")
        v = self.value(result)
        if v.kind == "num":
            raise _Refused("the reference's output does not depend on the kernel's arrays")
        return v, result

    def put(self, out, v: _V):
        self.keep.append(out)
        self.vals[id(out)] = v

    def row_local(self, c: str, level: int) -> _V:
        name = f"optiml_r{len(self.rows)}"
        self.rows.append((level, name, c))
        return _V("row", name, level)

    def acc(self, op: str, body_of, x: _V) -> _V:
        """A reduction pass of the element value ``x`` (``body_of(p, e)`` the update of partial ``p``)."""
        level = x.level + 1
        name = f"optiml_a{len(self.accs)}"
        init = {"+": "0.0f", _MAX: "-INFINITY", _MIN: "INFINITY"}[op]
        self.accs.append((level, name, op, init, body_of(f"optiml_p_{name}", x.c)))
        return _V("row", name, level)

    def reduce_dims(self, x_t, dims) -> None:
        nd = x_t.dim()
        if tuple(x_t.shape) != self.frame and [s for s in x_t.shape if s != 1] != [s for s in self.frame if s != 1]:
            raise _Refused("a reduction of a reshaped value")
        if tuple(x_t.shape) != self.frame:
            raise _Refused("a reduction of a value shaped otherwise than the frame")
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(nd))
        dims = sorted({int(d) % nd for d in (dims if isinstance(dims, (list, tuple)) else [dims])})
        if dims != list(range(dims[0], dims[-1] + 1)):
            raise _Refused("a reduction over dimensions that are not one run")
        red = (dims[0], dims[-1] + 1)
        if red == (0, nd):
            raise _Refused("a reduction of every element into one value (the full-reduction template reads that "
                           "from the kernel)")
        if self.red is not None and self.red != red:
            raise _Refused("reductions over different dimensions")
        self.red = red

    def elem_of(self, x) -> _V:
        v = self.value(x)
        if v.kind != "elem":
            raise _Refused("a reduction of a value that is not one of each element")
        if v.boolean:
            raise _Refused("a reduction of a comparison")
        return v

    def step(self, base, name, args, kw, out):
        torch = self.torch
        kw = {k: v for k, v in kw.items() if k != "out"}        # an op's out= tensor is its result, not an operand
        if base in ("copy_", "copy"):
            raise _Refused("the reference writes into a tensor in place")
        if base in _SAME or base in _VIEWS:
            v = self.value(args[0])
            if not isinstance(out, torch.Tensor) or (out.dtype.is_floating_point is False and not v.boolean):
                raise _Refused(f"the reference's {name} gives {getattr(out, 'dtype', type(out).__name__)}")
            if v.kind == "elem" and [s for s in out.shape if s != 1] != [s for s in self.frame if s != 1]:
                raise _Refused(f"the reference reshapes an element value ({name}, to "
                               f"{' x '.join(map(str, out.shape))})")
            if v.kind == "row" and base in ("permute", "transpose", "t"):
                raise _Refused(f"the reference reorders a row value ({name})")
            self.put(out, v)
            return
        if base in ("sum", "mean", "amax", "amin", "max", "min", "linalg_vector_norm", "norm", "var", "std",
                    "var_mean", "std_mean", "logsumexp", "softmax", "log_softmax", "layer_norm", "mv", "mm", "dot",
                    "matmul") and not (base in ("max", "min") and len(args) >= 2 and not isinstance(args[1], int)):
            return self.reduction(base, name, args, kw, out)
        if base in ("group_norm", "batch_norm", "instance_norm", "cumsum", "cumprod", "gather", "index_select",
                    "scatter", "nll_loss", "nll_loss_forward", "addmm", "bmm", "baddbmm", "prod", "sort", "topk",
                    "argmax", "argmin", "embedding", "convolution", "conv2d", "conv1d"):
            raise _Refused(f"the reference's {name} is not read as a row-wise or elementwise operation yet")
        if not isinstance(out, torch.Tensor):
            raise _Refused(f"the reference's {name} is not elementwise")
        tensors = [a for a in list(args) + list(kw.values()) if isinstance(a, torch.Tensor)]
        vs = [self.value(a) for a in tensors]
        if base.rstrip("_") != base and tensors and id(tensors[0]) in self.vals:
            base = base.rstrip("_")            # an in-place op on a value of the chain: its result
        kind = "elem" if any(v.kind == "elem" for v in vs) else ("row" if any(v.kind == "row" for v in vs) else "num")
        if kind == "elem" and [s for s in out.shape if s != 1] != [s for s in self.frame if s != 1]:
            raise _Refused(f"the reference's {name} is not elementwise over the frame (its output is "
                           f"{' x '.join(map(str, out.shape)) or 'one number'})")
        if kind == "elem":
            for t, v in zip(tensors, vs):
                if v.kind == "row":
                    self.check_row_broadcast(t, out)
        if kind == "num":
            if out.numel() != 1:
                raise _Refused(f"the reference's {name} makes a tensor of numbers")
            self.put(out, self.value(out.reshape(-1)[0].item()))
            return
        level = max([v.level for v in vs] or [0])
        c, boolean = self.elementwise(base, name, args, kw, out)
        v = _V(kind, c, level, boolean=boolean)
        if kind == "row":
            v = self.row_local(c, level)
        self.put(out, v)

    def check_row_broadcast(self, t, out):
        """A row value combined with element values: it must be broadcast exactly along the reduced run."""
        shape = [1] * (out.dim() - t.dim()) + list(t.shape)
        d0, d1 = self.red
        if out.dim() != len(self.frame) or any((shape[d] != 1) if d0 <= d < d1 else (shape[d] != self.frame[d])
                                               for d in range(len(self.frame))):
            raise _Refused(f"a row value ({' x '.join(map(str, t.shape))}) is broadcast over the frame otherwise "
                           "than along the reduced dimensions")

    def operand(self, a) -> str:
        v = self.value(a)
        return v.c

    def elementwise(self, base, name, args, kw, out) -> tuple[str, bool]:
        torch = self.torch
        if base in _BINARY or base in ("rsub", "minimum", "maximum", "fmin", "fmax", "max", "min", "pow", "atan2",
                                       "fmod") and len(args) >= 2 and not (base == "pow" and not isinstance(args[1], torch.Tensor)):
            a, b = self.operand(args[0]), self.operand(args[1])
            alpha = kw.get("alpha", args[2] if len(args) > 2 and base in ("add", "sub", "rsub") else 1)
            if alpha != 1:
                b = f"({_lit(alpha)} * {b})"
            if base == "div" and kw.get("rounding_mode"):
                raise _Refused("the reference divides with rounding")
            if base == "rsub":
                return f"({b} - {a})", False
            if base in _BINARY:
                return f"({a} {_BINARY[base]} {b})", False
            fn = {"minimum": "fminf", "fmin": "fminf", "min": "fminf", "maximum": "fmaxf", "fmax": "fmaxf",
                  "max": "fmaxf", "pow": "powf",
                  "atan2": "atan2f", "fmod": "fmodf"}.get(base)
            if fn is None:
                raise _Refused(f"the reference's {name} is not translated")
            return f"{fn}({a}, {b})", False
        if base in _COMPARE:
            return f"(({self.operand(args[0])}) {_COMPARE[base]} ({self.operand(args[1])}))", True
        if base == "where":
            return f"(({self.operand(args[0])}) ? ({self.operand(args[1])}) : ({self.operand(args[2])}))", False
        if base == "masked_fill":
            return f"(({self.operand(args[1])}) ? ({self.operand(args[2])}) : ({self.operand(args[0])}))", False
        if base in ("logical_and", "logical_or"):
            op = "&&" if base == "logical_and" else "||"
            return f"(({self.operand(args[0])}) {op} ({self.operand(args[1])}))", True
        if base in ("clamp", "clamp_min", "clamp_max") and any(isinstance(a, torch.Tensor) for a in args[1:]):
            x = self.operand(args[0])
            lo = args[1] if len(args) > 1 else kw.get("min")
            hi = args[2] if len(args) > 2 else kw.get("max")
            if base == "clamp_max":
                lo, hi = None, lo
            if lo is not None:
                x = f"fmaxf({x}, {self.operand(lo)})"
            if hi is not None:
                x = f"fminf({x}, {self.operand(hi)})"
            return x, False
        x = self.operand(args[0])
        if any(isinstance(a, torch.Tensor) for a in list(args[1:]) + list(kw.values())):
            raise _Refused(f"the reference's {name} takes a tensor")
        rest = [float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else a for a in args[1:]]
        if base in _MORE_UNARY:
            return _MORE_UNARY[base].format(x=x), base == "logical_not"
        c = _unary(base, x, rest, kw)
        if c is None:
            raise _Refused(f"the reference's {name} is not translated")
        return c, False

    def reduction(self, base, name, args, kw, out):
        torch = self.torch
        x_t = args[0]
        if isinstance(x_t, torch.Tensor) and id(x_t) in self.vals and self.vals[id(x_t)].kind == "row":
            raise _Refused(f"the reference's {name} reduces the rows' results again (a loss over rows), which no "
                           "template computes in one kernel")
        dim = kw.get("dim", args[1] if len(args) > 1 else None)
        if base in ("mv", "mm", "dot", "matmul"):
            return self.matvec(name, args, out)
        if base in ("softmax", "log_softmax"):
            self.reduce_dims(x_t, [dim])
            x = self.elem_of(x_t)
            m = self.acc(_MAX, lambda p, e: f"{p} = fmaxf({p}, {e});", x)
            s = self.acc(_SUM, lambda p, e, m=m.c: f"{p} += expf({e} - {m});", _V("elem", x.c, m.level))
            if base == "softmax":
                c = f"(expf({x.c} - {m.c}) / {s.c})"
            else:
                c = f"({x.c} - {m.c} - logf({s.c}))"
            self.put(out, _V("elem", c, s.level))
            return
        if base == "layer_norm":
            shape = args[1]
            weight = args[2] if len(args) > 2 else kw.get("weight")
            bias = args[3] if len(args) > 3 else kw.get("bias")
            eps = args[4] if len(args) > 4 else kw.get("eps", 1e-5)
            nd = x_t.dim()
            self.reduce_dims(x_t, list(range(nd - len(shape), nd)))
            x = self.elem_of(x_t)
            mean = self.row_local(f"{self.acc(_SUM, lambda p, e: f'{p} += {e};', x).c} / @J@", x.level + 1)
            d = f"({x.c} - {mean.c})"
            var = self.acc(_SUM, lambda p, e: f"{p} += {e} * {e};", _V("elem", d, mean.level))
            rstd = self.row_local(f"rsqrtf({var.c} / @J@ + {_lit(eps)})", var.level)
            c = f"({d} * {rstd.c})"
            if weight is not None:            # a number, or an array along the normalized dimensions
                c = f"({c} * {self.operand(weight)})"
            if bias is not None:
                c = f"({c} + {self.operand(bias)})"
            outs = out if isinstance(out, (tuple, list)) else (out,)
            self.put(outs[0], _V("elem", c, rstd.level))
            if len(outs) >= 3:
                self.put(outs[1], mean)
                self.put(outs[2], rstd)
            return
        if base in ("linalg_vector_norm", "norm"):
            p = kw.get("ord", kw.get("p", args[1] if len(args) > 1 else 2))
            dim = kw.get("dim", args[2] if len(args) > 2 else None)
            p = 2.0 if p is None else float(p)
        elif base in ("var", "std", "var_mean", "std_mean"):
            dim = kw.get("dim", args[1] if len(args) > 1 else None)
        self.reduce_dims(x_t, dim)
        x = self.elem_of(x_t)
        if base in ("sum", "mean"):
            a = self.acc(_SUM, lambda p, e: f"{p} += {e};", x)
            v = a if base == "sum" else self.row_local(f"{a.c} / @J@", a.level)
        elif base in ("amax", "max"):
            v = self.acc(_MAX, lambda p, e: f"{p} = fmaxf({p}, {e});", x)
        elif base in ("amin", "min"):
            v = self.acc(_MIN, lambda p, e: f"{p} = fminf({p}, {e});", x)
        elif base in ("linalg_vector_norm", "norm"):
            if p == 2.0:
                v = self.row_local(f"sqrtf({self.acc(_SUM, lambda q, e: f'{q} += {e} * {e};', x).c})", x.level + 1)
            elif p == 1.0:
                v = self.acc(_SUM, lambda q, e: f"{q} += fabsf({e});", x)
            elif math.isinf(p):
                v = self.acc(_MAX if p > 0 else _MIN, lambda q, e, f=("fmaxf" if p > 0 else "fminf"):
                             f"{q} = {f}({q}, fabsf({e}));", x)
            else:
                s = self.acc(_SUM, lambda q, e: f"{q} += powf(fabsf({e}), {_lit(p)});", x)
                v = self.row_local(f"powf({s.c}, {_lit(1.0 / p)})", s.level)
        elif base in ("var", "std", "var_mean", "std_mean"):
            corr = kw.get("correction", None)
            if corr is None:
                corr = 1 if kw.get("unbiased", args[2] if len(args) > 2 and isinstance(args[2], bool) else True) else 0
            mean = self.row_local(f"{self.acc(_SUM, lambda q, e: f'{q} += {e};', x).c} / @J@", x.level + 1)
            d = f"({x.c} - {mean.c})"
            s = self.acc(_SUM, lambda q, e: f"{q} += {e} * {e};", _V("elem", d, mean.level))
            var = f"{s.c} / (@J@ - {_lit(float(corr))})"
            v = self.row_local(f"sqrtf({var})" if base.startswith("std") else var, s.level)
            if base.endswith("_mean"):
                self.put(out[0], v)
                self.put(out[1], mean)
                return
        elif base == "logsumexp":
            m = self.acc(_MAX, lambda q, e: f"{q} = fmaxf({q}, {e});", x)
            s = self.acc(_SUM, lambda q, e, m=m.c: f"{q} += expf({e} - {m});", _V("elem", x.c, m.level))
            v = self.row_local(f"({m.c} + logf({s.c}))", s.level)
        else:
            raise _Refused(f"the reference's {name} is not translated")
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.put(outs[0], v)                    # max/min over a dim: (values, indices); the indices stay unread

    def matvec(self, name, args, out):
        """A matrix times a vector (``mv``, or ``mm`` with a 1-wide operand): a sum over the row of the
        matrix's element times the vector's."""
        torch = self.torch
        a, b = args[0], args[1]
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            raise _Refused(f"the reference's {name} multiplies a number")
        if a.dim() == 2 and (b.dim() == 1 or (b.dim() == 2 and b.shape[1] == 1)):
            mat, vec, dim = a, b, 1
        elif b.dim() == 2 and (a.dim() == 1 or (a.dim() == 2 and a.shape[0] == 1)):
            mat, vec, dim = b, a, 0
        else:
            raise _Refused(f"the reference's {name} multiplies two matrices (a GEMM's reading takes that)")
        self.reduce_dims(mat, [dim])
        x = self.elem_of(mat)
        bv = self.backing(vec)
        if bv is None or bv[1] or not vec.is_contiguous():
            raise _Refused(f"the vector of the reference's {name} is not one of the kernel's arrays as it lies in memory")
        self.gathers[bv[0]] = vec.dtype
        side = f"@G:{bv[0]}:{dim}:{dim + 1}@"
        self.put(out, self.acc(_SUM, lambda p, e: f"{p} += {e} * {side};", x))


def _kernel_expr(spec_expr: str, spec, sizes: dict) -> str | None:
    """The kernel's expression of a product of the spec's sizes (each factor by :func:`_kernel_size`
    where the whole is not one)."""
    if spec_expr == "1":
        return "1"
    whole = _kernel_size(spec_expr, spec, sizes)
    if whole is not None:
        return whole
    parts = [p.strip("() ") for p in spec_expr.split(" * ")]
    got = [p if re.fullmatch(r"\d+", p) else _kernel_size(p, spec, sizes) for p in parts]
    return None if None in got or len(parts) < 2 else " * ".join(f"({g})" for g in got)


def _dim_exprs(frame: tuple, arg, spec, sizes: dict, constants: dict) -> list[str]:
    """Each frame dimension as the spec's size expression: the frame array's own shape where it matches,
    else the size (or a product of two) whose value it is."""
    from ... import expr as _expr
    env = dict(sizes, **{k: v for k, v in constants.items() if k not in sizes})
    own = [str(s) for s in arg.shape]
    try:
        if len(own) == len(frame) and all(int(_expr.evaluate(s, env)) == n for s, n in zip(own, frame)):
            return own
    except Exception:                   # noqa: BLE001 - a shape it cannot evaluate: read by value
        pass
    out = []
    for n in frame:
        names = [k for k, v in sizes.items() if v == n]
        if len(names) == 1:
            out.append(names[0])
            continue
        pairs = [f"{p} * {q}" for i, p in enumerate(sizes) for q in list(sizes)[i:] if sizes[p] * sizes[q] == n]
        if not names and len(pairs) == 1:
            out.append(pairs[0])
            continue
        if n == 1:
            out.append("1")
            continue
        raise _Refused(f"a dimension of {n} is {'no size' if not names and not pairs else 'more than one size'} of the spec")
    return out


def _prod(exprs: list[str]) -> str:
    exprs = [e for e in exprs if e != "1"]
    return " * ".join(f"({e})" if not re.fullmatch(r"\w+", e) else e for e in exprs) if exprs else "1"


def read_reference(source: str, entry: str, spec, trace=None):
    """(the :class:`~.rowwise.RowOp` or :class:`~.flat.FlatOp` the spec's torch reference computes,
    None) or (None, why not); (None, None) where there is no torch reference to trace."""
    ref = getattr(spec, "reference", None)
    if ref is None or ref.kind != "torch" or ref.path is None:
        return None, None
    try:
        import torch  # noqa: F401
    except ImportError:
        return None, "the reference is not traced: PyTorch is not installed"
    outs = [a for a in spec.args if a.role in ("output", "inout")]
    if len(outs) != 1:
        return None, "not templated: the kernel has more than one output (read from the reference)"
    try:
        ops, arrays, sizes, result = (trace or trace_once(spec, source))()
        r = _Rows(ops, arrays, spec)
        v, res = r.read(result)
        if outs[0].role != "output":
            raise _Refused(f"the kernel's output {outs[0].name} is also read (an inout), which the row templates "
                           "do not write")
        return _build(r, v, res, source, entry, spec, sizes, outs[0]), None
    except _Refused as e:
        return None, f"not templated: {e} (read from the reference)"
    except Exception as e:                      # noqa: BLE001 - a reference that does not run on the CPU
        return None, (f"the reference is not traced: it does not run on the CPU at a verify size "
                      f"({type(e).__name__}: {str(e)[:160]})")


def _build(r: _Rows, v: _V, res, source, entry, spec, sizes, out):
    from ...expr import evaluate
    from ...source import parse_source
    from .flat import FlatOp
    from .rowwise import RowOp, Step, _online
    constants = parse_source(source).constants
    arg = {a.name: a for a in spec.args}
    if out.dtype not in _ELEMENT or r.frame_arg.dtype not in _ELEMENT:
        raise _Refused(f"{r.frame_arg.dtype} into {out.dtype}")
    frame = r.frame
    dims = _dim_exprs(frame, r.frame_arg, spec, sizes, constants)
    nd = len(frame)
    timing = dict(getattr(spec, "timing_sizes", {}) or {})

    def kernel(e: str) -> str:
        k = _kernel_expr(e, spec, sizes)
        if k is None:
            raise _Refused(f"the size {e} is no kernel argument, nor a quotient or product of two")
        return k

    def tval(e: str) -> int:
        try:
            return int(evaluate(e, timing))
        except Exception:                       # noqa: BLE001
            return 0
    out_n = math.prod(res.shape)
    if v.kind == "elem" and r.red is None:
        # an elementwise map: the flat template, every array at the element or gathered from its index
        if out_n != math.prod(frame) or math.prod(int(evaluate(str(d), dict(sizes, **constants))) for d in out.shape) != out_n:
            raise _Refused("the kernel's output does not hold one value of each element")
        body = v.c
        def ptail(k):
            return kernel(_prod(dims[k:]))
        for name in r.gathers:
            for m in re.finditer(rf"@G:{name}:(\d+):(\d+)@", body):
                a, b = int(m.group(1)), int(m.group(2))
                if a == b:
                    idx = "0"
                elif a == 0:
                    idx = f"optiml_i / ({ptail(b)})" if b < nd else "optiml_i"
                else:
                    idx = f"(optiml_i / ({ptail(b)})) % ({kernel(_prod(dims[a:b]))})" if b < nd else \
                        f"optiml_i % ({ptail(a)})"
                body = body.replace(m.group(0), f"(float){name}[{idx}]")
        elems = dict(r.elems)
        for name in elems:
            body = body.replace(f"@E:{name}@", f"(float)optiml_e_{name}")
        if "@" in body:
            raise _Refused("an operand is not placed")
        types = {n: _ELEMENT.get(arg[n].dtype) for n in list(elems) + [out.name]}
        if None in types.values():
            raise _Refused("an array is of a type the template does not take")
        n_size = _prod(dims)
        return FlatOp(entry=entry, kind="map", index="optiml_i", index_decl="(void)optiml_i;", n=kernel(n_size),
                      n_size=n_size, body=f"optiml_o_{out.name} = ({types[out.name]})({body});",
                      elems=tuple((n, types[n]) for n in sorted(elems)), outs=((out.name, types[out.name]),),
                      n_timing=tval(n_size))
    if r.red is None:
        raise _Refused("the reference's output is a row value with no reduction")
    d0, d1 = r.red
    o_size, j_size, i_size = _prod(dims[:d0]), _prod(dims[d0:d1]), _prod(dims[d1:])
    o, j, i = kernel(o_size), kernel(j_size), kernel(i_size)
    reduced = v.kind == "row"
    if reduced and out_n != math.prod(frame[:d0]) * math.prod(frame[d1:]):
        raise _Refused("the kernel's output does not hold one value a row")
    if not reduced and out_n != math.prod(frame):
        raise _Refused("the kernel's output does not hold one value of each element")
    extra = [n for n in r.elems if n != r.frame_arg.name]
    if extra:
        raise _Refused(f"a row-wise program reads a second array of the frame's shape ({extra[0]})")
    sides = {}

    def place(c: str) -> str:
        c = c.replace(f"@E:{r.frame_arg.name}@", "(float)optiml_v").replace("@J@", f"((float)({j}))")
        for m in re.finditer(r"@G:(\w+):(\d+):(\d+)@", c):
            name, a, b = m.group(1), int(m.group(2)), int(m.group(3))
            if a == b:
                c = c.replace(m.group(0), f"(float){name}[0]")
            elif (a, b) == (d0, d1):
                sides[name] = _ELEMENT[arg[name].dtype]
                c = c.replace(m.group(0), f"(float)optiml_s_{name}")
            else:
                raise _Refused(f"{name} is broadcast along rows, which the row templates do not read")
        return c
    levels = sorted({lv for lv, *_ in r.accs} | {lv for lv, *_ in r.rows})
    steps = []
    for lv, name, c in r.rows:
        if lv == 0:
            steps.append(Step("stmt", f"const float {name} = {place(c)};"))
    for lv in levels:
        accs = [a for a in r.accs if a[0] == lv]
        if accs:
            for _, name, op, init, _ in accs:
                steps.append(Step("stmt", f"float {name} = {init};"))
            sides.clear()
            body = " ".join(place(b) for *_, b in accs)
            ordered = tuple((name, op) for _, name, op, _, _ in accs)
            steps.append(Step("reduce", body, ordered, tuple(sorted(sides.items())),
                              tuple(f"optiml_r{len(steps)}_{name}" for name, _ in ordered)))
        for rl, name, c in r.rows:
            if rl == lv and lv > 0:
                steps.append(Step("stmt", f"const float {name} = {place(c)};"))
    sides.clear()
    final = place(v.c)
    if reduced:
        steps.append(Step("store", final))
    else:
        steps.append(Step("map", f"optiml_out = (OPTIML_TY)({final});", sides=tuple(sorted(sides.items()))))
    if i == "1":
        steps = _online(steps)
    return RowOp(entry=entry, x=r.frame_arg.name, y=out.name, x_type=_ELEMENT[r.frame_arg.dtype],
                 y_type=_ELEMENT[out.dtype], o=o, j=j, i=i, o_size=o_size, j_size=j_size, i_size=i_size,
                 steps=tuple(steps), j_timing=tval(j_size), i_timing=tval(i_size) if i_size != "1" else 1, dim=d0,
                 o_timing=tval(o_size) if o_size != "1" else 1,
                 reduced=reduced)
