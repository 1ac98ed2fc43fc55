"""The operation read from the reference rather than from the kernel: where a spec's reference is a
PyTorch function (a KernelBench task's Model among them), it is run once on the CPU at a verify size
under a dispatch-level recorder, and the recorded ops say what the kernel must compute, whatever
way the kernel was written.

Today this finds a GEMM followed by an elementwise chain: one ``mm`` / ``addmm`` of two of the
kernel's arrays (as they lie in memory: row-major, or transposed as ``nn.Linear``'s weight is), then
any mix of elementwise ops on its result (bias, scale, residual add of the product itself, ReLU,
LeakyReLU, GELU, SiLU, Mish, sigmoid, tanh, clamps, min and max with a Parameter, ...), their other
operands Python numbers, one-element tensors or kernel arrays broadcast over the output. The chain
becomes the GEMM template's epilogue (a lambda over locals, so a value used twice is computed once),
the operands the kernel's own arguments, and the sizes the kernel's own integer arguments (a size
that is no argument is a quotient or product of two: ``numel / cols``). Anything else after the
product (a reduction over the row, a norm, softmax) is refused with its name.

Like the CUDA readers, this is a hypothesis: the template is verified like any edit.
"""
from __future__ import annotations

import importlib.util
import itertools
import math
import random
import re

from ... import expr as _expr

_GELU_C = 0.7071067811865476           # 1/sqrt(2)
_GELU_T = 0.7978845608028654           # sqrt(2/pi)


class _Refused(Exception):
    """Why the reference is not a GEMM with an elementwise chain; ``beyond`` where it computes more than
    one (a reduction or norm after the product, a second product), so no GEMM template can be right."""

    def __init__(self, why: str, beyond: bool = False):
        super().__init__(why)
        self.beyond = beyond


def _lit(v) -> str:
    """A float32 literal of the Python number ``v``."""
    v = float(v)
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    if math.isnan(v):
        return "NAN"
    return f"{v:.9g}".replace("inf", "INFINITY") + ("f" if re.search(r"[.eE]", f"{v:.9g}") else ".0f")


def _softplus(x: str, beta: float = 1.0, threshold: float = 20.0) -> str:
    if beta == 1.0:
        return f"(({x}) > {_lit(threshold)} ? ({x}) : log1pf(expf({x})))"
    return f"(({x}) * {_lit(beta)} > {_lit(threshold)} ? ({x}) : log1pf(expf(({x}) * {_lit(beta)})) / {_lit(beta)})"


def _unary(name: str, x: str, rest: list, kw: dict) -> str | None:
    """The C expression of the elementwise op ``name`` of one tensor ``x`` (its other arguments
    ``rest`` and ``kw`` numbers), or None where it is not one of these."""
    if name in ("relu",):
        return f"fmaxf({x}, 0.0f)"
    if name == "sigmoid":
        return f"(1.0f / (1.0f + expf(-({x}))))"
    if name == "tanh":
        return f"tanhf({x})"
    if name == "exp":
        return f"expf({x})"
    if name == "log":
        return f"logf({x})"
    if name == "log1p":
        return f"log1pf({x})"
    if name == "abs":
        return f"fabsf({x})"
    if name == "neg":
        return f"(-({x}))"
    if name == "sqrt":
        return f"sqrtf({x})"
    if name == "rsqrt":
        return f"rsqrtf({x})"
    if name == "erf":
        return f"erff({x})"
    if name == "square":
        return f"(({x}) * ({x}))"
    if name == "reciprocal":
        return f"(1.0f / ({x}))"
    if name == "silu":
        return f"(({x}) / (1.0f + expf(-({x}))))"
    if name == "mish":
        return f"(({x}) * tanhf({_softplus(x)}))"
    if name == "softplus":
        beta = rest[0] if rest else kw.get("beta", 1.0)
        threshold = rest[1] if len(rest) > 1 else kw.get("threshold", 20.0)
        return _softplus(x, float(beta), float(threshold))
    if name == "gelu":
        if kw.get("approximate", rest[0] if rest else "none") == "tanh":
            return f"(0.5f * ({x}) * (1.0f + tanhf({_lit(_GELU_T)} * (({x}) + 0.044715f * ({x}) * ({x}) * ({x})))))"
        return f"(0.5f * ({x}) * (1.0f + erff(({x}) * {_lit(_GELU_C)})))"
    if name == "leaky_relu":
        slope = rest[0] if rest else kw.get("negative_slope", 0.01)
        return f"(({x}) > 0.0f ? ({x}) : ({x}) * {_lit(slope)})"
    if name == "elu":
        alpha = rest[0] if rest else kw.get("alpha", 1.0)
        scale = rest[1] if len(rest) > 1 else kw.get("scale", 1.0)
        inscale = rest[2] if len(rest) > 2 else kw.get("input_scale", 1.0)
        return (f"(({x}) > 0.0f ? ({x}) * {_lit(scale)} : {_lit(float(alpha) * float(scale))} * "
                f"(expf(({x}) * {_lit(inscale)}) - 1.0f))")
    if name in ("hardtanh", "clamp", "clamp_min", "clamp_max"):
        if name == "hardtanh":
            lo, hi = (list(rest) + [-1.0, 1.0][len(rest):])[:2] if rest else (kw.get("min_val", -1.0), kw.get("max_val", 1.0))
        elif name == "clamp_min":
            lo, hi = (rest[0] if rest else kw.get("min")), None
        elif name == "clamp_max":
            lo, hi = None, (rest[0] if rest else kw.get("max"))
        else:
            lo = rest[0] if rest else kw.get("min")
            hi = rest[1] if len(rest) > 1 else kw.get("max")
        out = x
        if lo is not None:
            out = f"fmaxf({out}, {_lit(lo)})"
        if hi is not None:
            out = f"fminf({out}, {_lit(hi)})"
        return out
    if name == "hardsigmoid":
        return f"fminf(fmaxf(({x}) / 6.0f + 0.5f, 0.0f), 1.0f)"
    if name == "hardswish":
        return f"(({x}) * fminf(fmaxf(({x}) + 3.0f, 0.0f), 6.0f) / 6.0f)"
    if name == "pow" and rest and isinstance(rest[0], (int, float)):
        e = float(rest[0])
        return f"(({x}) * ({x}))" if e == 2.0 else (f"({x})" if e == 1.0 else f"powf({x}, {_lit(e)})")
    return None


_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_RESHAPE = {"unsqueeze", "squeeze", "permute", "transpose", "t", "flatten", "unflatten", "select", "slice", "narrow"}
_ROW_OPS = {"softmax", "log_softmax", "layer_norm", "group_norm", "batch_norm", "batch_norm_legit", "sum", "mean",
            "amax", "amin", "logsumexp", "cumsum", "var", "std", "var_mean", "norm", "linalg_vector_norm", "prod",
            "instance_norm", "max_pool1d", "avg_pool1d", "max_pool2d_with_indices", "avg_pool2d"}


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0
_SAME = {"clone", "detach", "alias", "contiguous", "lift_fresh", "_to_copy", "to", "dropout", "view", "_unsafe_view",
         "reshape", "expand"}


def trace_reference(spec, source: str, sizes: dict | None = None):
    """Run the spec's torch reference once on the CPU at ``sizes`` (default: its first verify size
    whose sizes differ from each other) with random arrays, recording each ATen op. Returns
    (ops, arrays, sizes, what it returned): ops a list of (name, args, kwargs, out); arrays {argument
    name: its tensor}."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from ...source import parse_source
    constants = parse_source(source).constants
    if sizes is None:
        distinct = [s for s in spec.verify_sizes if len(set(s.values())) == len(s)]
        if not distinct:
            raise _Refused("no verify size has sizes that all differ, so the trace cannot tell them apart")
        sizes = distinct[0]
    gen = torch.Generator().manual_seed(0)
    kwargs, arrays = {}, {}
    for a in spec.args:
        if a.role == "scalar":
            kwargs[a.name] = spec.scalar_value(a, sizes, constants)
            continue
        dtype = getattr(torch, a.dtype, None)
        if dtype is None:
            raise _Refused(f"the array {a.name} is of {a.dtype}")
        shape = spec.shape(a, sizes, constants)
        t = (torch.rand(shape, generator=gen) * 2 - 1).to(dtype) if dtype.is_floating_point else \
            torch.randint(0, 7, shape, generator=gen).to(dtype)
        kwargs[a.name] = arrays[a.name] = t
    path, function = spec.reference.path, spec.reference.function
    mod_spec = importlib.util.spec_from_file_location(f"optiml_traced_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    fn = getattr(mod, function)
    ops = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kw=None):
            out = func(*args, **(kw or {}))
            ops.append((func.overloadpacket.__name__, args, kw or {}, out))
            return out

    with torch.no_grad(), Recorder():
        result = fn(**kwargs)
    return ops, arrays, sizes, result


def trace_once(spec, source: str):
    """A function that gives :func:`trace_reference` ``(spec, source)``, run at most once however often
    it is called (its exception kept and raised again): the readings of one kernel's reference (the
    GEMM one and the row-wise one) share the run."""
    done: list = []

    def get():
        if not done:
            try:
                done.append((True, trace_reference(spec, source)))
            except Exception as e:          # noqa: BLE001 - each reader words it as before
                done.append((False, e))
        ok, value = done[0]
        if not ok:
            raise value
        return value
    return get


def _kernel_size(target: str, spec, sizes_of: dict) -> str | None:
    """An expression of the kernel's integer arguments equal to the size expression ``target`` at
    every size (checked at random sizes): one argument, else a quotient or product of two."""
    ints = [a for a in spec.args if a.role == "scalar" and isinstance(a.value, (str, int)) and
            not str(a.dtype).startswith("float")]
    rng = random.Random(1)
    envs = [{n: rng.choice((3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)) * rng.choice((1, 2, 4)) for n in sizes_of}
            for _ in range(4)]

    def val(e, env):
        try:
            return _expr.evaluate(str(e), env)
        except Exception:           # noqa: BLE001 - a name it does not know: not this one
            return None
    want = [val(target, env) for env in envs]
    if None in want:
        return None
    got = {a.name: [val(a.value, env) for env in envs] for a in ints}
    got = {k: v for k, v in got.items() if None not in v and all(x != 0 for x in v)}
    for name, v in got.items():
        if v == want:
            return name
    for (p, vp), (q, vq) in itertools.permutations(got.items(), 2):
        if all(a == w * b for a, b, w in zip(vp, vq, want)):
            return f"({p} / {q})"
        if all(a * b == w for a, b, w in zip(vp, vq, want)):
            return f"({p} * {q})"
    return None


class _Graph:
    """The recorded ops read as a GEMM and the elementwise chain on its result."""

    def __init__(self, ops, arrays, sizes, result):
        import torch
        self.torch = torch
        self.ops, self.arrays, self.sizes, self.result = ops, arrays, sizes, result
        # the storage each argument lives in (a Model's parameter copied from one lives in its own)
        self.storage = {t.untyped_storage().data_ptr(): name for name, t in arrays.items()}
        self.keep = []              # every tensor seen stays alive, so no id is reused
        self.node = {}              # id(tensor) -> the C local holding its element (m, n)
        self.lines = []
        self.text = {}              # local -> a readable formula, for the description

    def size_name(self, value: int) -> str:
        names = [n for n, v in self.sizes.items() if v == value]
        if len(names) != 1:
            raise _Refused(f"a dimension of {value} is {'no size' if not names else 'more than one size'} of the spec")
        return names[0]

    def backing(self, t):
        """(argument name, storage offset, strides) of a tensor that is a kernel array's memory, else None."""
        name = self.storage.get(t.untyped_storage().data_ptr())
        return None if name is None else (name, t.storage_offset(), t.stride())

    def track_copies(self, name, args, out):
        torch = self.torch
        if name in ("copy_", "copy") and len(args) >= 2 and isinstance(args[1], torch.Tensor):
            src = self.backing(args[1])
            dst = args[0]
            full = src is not None and args[1].is_contiguous() and src[1] == 0 and \
                args[1].numel() == self.arrays[src[0]].numel()
            if full and dst.is_contiguous() and dst.numel() == args[1].numel():
                self.storage[dst.untyped_storage().data_ptr()] = src[0]

    def read(self):
        """(A, B, C, a_layout, b_layout, M, N, K sizes, the epilogue's statements, its formula)."""
        torch = self.torch
        gemm_at = None
        for i, (name, args, kw, out) in enumerate(self.ops):
            if name in ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear"):
                if gemm_at is not None:
                    raise _Refused("the reference multiplies matrices more than once", beyond=True)
                gemm_at = i
            elif gemm_at is None:
                self.track_copies(name, args, out)
        if gemm_at is None:
            return None
        name, args, kw, out = self.ops[gemm_at]
        if name not in ("mm", "addmm"):
            raise _Refused(f"the reference's matrix product is aten.{name}, which the GEMM templates do not take yet")
        bias = args[0] if name == "addmm" else None
        x, w = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
        if kw.get("beta", 1) != 1 or kw.get("alpha", 1) != 1:
            raise _Refused("the reference's addmm scales its terms")
        m, k = x.shape
        n = w.shape[1]
        bx, bw = self.backing(x), self.backing(w)
        if bx is None or bw is None or bx[0] == bw[0]:
            raise _Refused("the matrix product's operands are not two of the kernel's arrays")
        if bx[1] or bw[1]:
            raise _Refused("the matrix product reads an array from an offset")
        a_layout = "mk" if bx[2] == (k, 1) else ("km" if bx[2] == (1, m) else None)
        b_layout = "kn" if bw[2] == (n, 1) else ("nk" if bw[2] == (1, k) else None)
        if a_layout is None or b_layout is None:
            raise _Refused("the matrix product's operands are not laid out row by row or column by column")
        self.dims, self.mnk = (m, n), (m, n, k)
        acc = "acc"
        self.text[acc] = "acc"
        if bias is not None:
            acc = self.local(f"acc + {self.operand(bias)}", f"(acc + {self.formula(bias)})")
        self.node[id(out)] = acc
        self.keep.append(out)
        for name, args, kw, out in self.ops[gemm_at + 1:]:
            self.step(name, args, kw, out)
        res = self.result
        if isinstance(res, (tuple, list)):
            if len(res) != 1:
                raise _Refused("the reference returns more than one output", beyond=True)
            res = res[0]
        if not isinstance(res, torch.Tensor) or id(res) not in self.node or tuple(res.shape) != (m, n):
            raise _Refused("the reference's output is not the product's elementwise chain")
        return (bx[0], bw[0], a_layout, b_layout, (m, n, k), self.node[id(res)])

    def local(self, c: str, formula: str) -> str:
        v = f"optiml_v{len(self.lines)}"
        self.lines.append(f"const float {v} = {c};")
        self.text[v] = formula
        return v

    def formula(self, x) -> str:
        torch = self.torch
        if isinstance(x, torch.Tensor):
            if id(x) in self.node:
                return self.text[self.node[id(x)]]
            b = self.backing(x)
            if b is not None:
                return b[0]
            return f"{x.item():g}" if x.numel() == 1 else "a tensor"
        return f"{x:g}" if isinstance(x, (int, float)) else str(x)

    def operand(self, x) -> str:
        """The C value at output element (m, n) of an operand of an op on the chain."""
        torch = self.torch
        if isinstance(x, bool):
            return "1.0f" if x else "0.0f"
        if isinstance(x, (int, float)):
            return _lit(x)
        if not isinstance(x, torch.Tensor):
            raise _Refused(f"an operand of the chain is a {type(x).__name__}")
        if id(x) in self.node:
            return self.node[id(x)]
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            raise _Refused(f"an operand of the chain is of {x.dtype}")
        b = self.backing(x)
        if b is None:
            if x.numel() == 1:                      # a number the Model made (torch.tensor(2.0))
                return _lit(x.item())
            raise _Refused("an operand of the chain is a tensor the reference made, not a kernel array")
        name, offset, _ = b
        try:
            strides = torch.broadcast_to(x, self.dims).stride() if x.dim() else (0, 0)
        except RuntimeError:
            raise _Refused(f"{name} does not broadcast over the product's output") from None
        terms = []
        for var, s in zip(("m", "n"), strides):
            if s == 0:
                continue
            if s == 1:
                terms.append(f"(size_t)({var})")
                continue
            macro = {self.mnk[1]: "OPTIML_N", self.mnk[0]: "OPTIML_M", self.mnk[2]: "OPTIML_K"}.get(s)
            if macro is None:
                raise _Refused(f"{name} is read with a stride of {s}, which is none of the product's sizes")
            terms.append(f"(size_t)({var}) * {macro}")
        if offset:
            terms.append(str(offset))
        return f"(float){name}[{' + '.join(terms) or '0'}]"

    def step(self, name, args, kw, out):
        torch = self.torch
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        on_chain = [a for a in tensors if id(a) in self.node]
        if not on_chain:
            self.track_copies(name, args, out)
            return                                  # not on the chain (a parameter's copy, a constant)
        row_op = name.lstrip("_").removeprefix("native_").lstrip("_")
        if row_op in _ROW_OPS:
            raise _Refused(f"after the matrix product the reference's {row_op} reduces along rows or columns, "
                           "which no template fuses with a GEMM yet", beyond=True)
        if not isinstance(out, torch.Tensor):
            raise _Refused(f"after the matrix product the reference's {name} is not elementwise", beyond=True)
        self.keep.append(out)
        if name in _SAME or name in _RESHAPE:
            if tuple(out.shape) != self.dims:
                raise _Refused(f"after the matrix product the reference reshapes it ({name}, to "
                               f"{' x '.join(map(str, out.shape))}) for what follows, which no template fuses "
                               "with a GEMM yet", beyond=True)
            if out.dtype != args[0].dtype:
                raise _Refused(f"after the matrix product the reference converts it ({name}, to {out.dtype}), "
                               "which no template fuses with a GEMM yet", beyond=True)
            self.node[id(out)] = self.node[id(args[0])]
            return
        if tuple(out.shape) != self.dims:
            raise _Refused(f"after the matrix product the reference's {name} is not elementwise (its output is "
                           f"{' x '.join(map(str, out.shape)) or 'one number'}, the product's {self.dims[0]} x "
                           f"{self.dims[1]}), which no template fuses with a GEMM yet", beyond=True)
        if out.dtype not in (torch.float32,):
            raise _Refused(f"after the matrix product the reference's {name} gives {out.dtype}")
        base = name.rstrip("_")
        if base in _BINARY or base in ("rsub", "minimum", "maximum", "min", "max", "fmin", "fmax", "where"):
            if base == "where":
                raise _Refused("after the matrix product the reference has a where, which is not translated yet")
            if len(args) < 2:
                raise _Refused(f"after the matrix product the reference's {name} reduces")
            a, b = (self.operand(v) for v in args[:2])
            fa, fb = (self.formula(v) for v in args[:2])
            alpha = kw.get("alpha", args[2] if len(args) > 2 and base in ("add", "sub", "rsub") else 1)
            if alpha != 1:
                b, fb = f"({_lit(alpha)} * {b})", f"{alpha:g} * {fb}"
            if base == "div" and kw.get("rounding_mode"):
                raise _Refused("after the matrix product the reference divides with rounding")
            if base == "rsub":
                c, f = f"({b} - {a})", f"({fb} - {fa})"
            elif base in _BINARY:
                c, f = f"({a} {_BINARY[base]} {b})", f"({fa} {_BINARY[base]} {fb})"
            elif base in ("minimum", "min", "fmin"):
                c, f = f"fminf({a}, {b})", f"min({fa}, {fb})"
            else:
                c, f = f"fmaxf({a}, {b})", f"max({fa}, {fb})"
            self.node[id(out)] = self.local(c, f)
            return
        x = args[0]
        if id(x) not in self.node or any(id(a) in self.node for a in args[1:] if isinstance(a, torch.Tensor)):
            raise _Refused(f"after the matrix product the reference's {name} is not translated")
        rest = [float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else a for a in args[1:]]
        if any(isinstance(a, torch.Tensor) for a in rest):
            raise _Refused(f"after the matrix product the reference's {name} takes a tensor")
        c = _unary(base, self.node[id(x)], rest, kw)
        if c is None:
            raise _Refused(f"after the matrix product the reference's {name} is not translated into an epilogue")
        inner = self.text[self.node[id(x)]]
        if inner.startswith("(") and inner.endswith(")") and _balanced(inner[1:-1]):
            inner = inner[1:-1]
        self.node[id(out)] = self.local(c, f"{base}({inner})")


_TEMPLATED = ("float32", "float16", "bfloat16")       # the element types the GEMM templates take


def gemm_from_reference(source: str, entry: str, spec, trace=None):
    """(the fields of the :class:`~optiml.edits.templates.Gemm` that the spec's torch reference
    computes (see the module; the caller makes it) or None, why not, whether the reference computes more than a GEMM with an elementwise
    chain (then no reading of the kernel as one can be right)); (None, None, False) where there is
    no torch reference to trace or it multiplies no matrices."""
    ref = getattr(spec, "reference", None)
    if ref is None or ref.kind != "torch" or ref.path is None:
        return None, None, False
    try:
        import torch  # noqa: F401
    except ImportError:
        return None, "the reference is not traced: PyTorch is not installed", False
    outs = [a for a in spec.args if a.role in ("output", "inout")]
    if len(outs) != 1:
        return None, "the reference is not traced: the kernel has more than one output", False
    try:
        ops, arrays, sizes, result = (trace or trace_once(spec, source))()
        g = _Graph(ops, arrays, sizes, result)
        kernel_sizes = {}
        for s in sizes:
            e = _kernel_size(s, spec, sizes)
            if e is not None:
                kernel_sizes[s] = e
        read = g.read()
        if read is None:
            return None, None, False
        a, b, a_layout, b_layout, (m, n, k), value = read
        if 1 in (m, n):
            raise _Refused("the product is a matrix-vector product (one of its output's sizes is 1), which the "
                           "GEMM templates do not take")
        names = [g.size_name(v) for v in (m, n, k)]
        missing = [s for s in names if s not in kernel_sizes]
        if missing:
            raise _Refused(f"the size {missing[0]} is no kernel argument, nor a quotient or product of two")
        arg = {x.name: x for x in spec.args}
        if arg[a].dtype != arg[b].dtype or arg[a].dtype not in _TEMPLATED or outs[0].dtype not in _TEMPLATED:
            raise _Refused(f"inputs of {arg[a].dtype} and {arg[b].dtype} into {outs[0].dtype}")
        if math.prod(spec.shape(outs[0], sizes)) != m * n:
            raise _Refused(f"the kernel's {outs[0].name} does not hold the product's {m} x {n} elements")
        epilogue = value if not g.lines else "[&]() -> float { " + " ".join(g.lines) + f" return {value}; }}()"
        formula = g.text[value]
        return dict(entry=entry, a=a, b=b, c=outs[0].name, m=kernel_sizes[names[0]], n=kernel_sizes[names[1]],
                    k=kernel_sizes[names[2]], m_size=names[0], n_size=names[1], a_layout=a_layout,
                    b_layout=b_layout, epilogue=epilogue, dtype=arg[a].dtype,
                    formula=None if formula == "acc" else formula), None, False
    except _Refused as e:
        return None, f"not templated: {e} (read from the reference)", e.beyond
    except Exception as e:                      # noqa: BLE001 - a reference that does not run on the CPU
        return None, f"the reference is not traced: it does not run on the CPU at a verify size ({type(e).__name__}: {str(e)[:160]})", False
