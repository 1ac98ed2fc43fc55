"""Reading the model's answers: the strategy list, a kernel (title, why, source), and the checks a
kernel must pass before it is ever built (the entry with the spec's exact signature, a complete
launch line, no include the harness would not allow). A refusal is one sentence, which is stored
and shown to the model for its one repair."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .. import dtypes as _dt
from ..errors import OptimlError
from ..source import dtype_of_c_type, parse_source
from ..spec import TaskSpec
from .prompt import signature

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_STRATEGY = re.compile(r"^[ \t>*#_-]*STRATEGY[ \t]*(\d+)[ \t]*[*_]*[ \t]*[:.)\-][ \t]*[*_]*[ \t]*(.+?)[ \t*_]*$",
                       re.IGNORECASE | re.MULTILINE)
_FIELD = re.compile(r"^[ \t*_]*(KERNEL|WHY)[ \t*_]*:[ \t]*(.*?)[ \t*_]*$", re.IGNORECASE | re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#-]*)[ \t]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_CODE_LANGS = ("cuda", "cu", "cpp", "c++", "c", "cxx", "")
MAX_NAME = 80


@dataclass(frozen=True)
class Strategy:
    name: str
    detail: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "detail": self.detail}


@dataclass(frozen=True)
class Kernel:
    """A kernel as the model wrote it, or ``error`` (one sentence) when the answer holds none."""
    source: str = ""
    title: str = ""
    why: str = ""
    error: str | None = None


def parse_strategies(answer: str, n: int) -> list[Strategy]:
    """The first ``n`` (at least 1) strategies the answer names (``STRATEGY k: name`` and the lines after it),
    without repeats; an empty list when it names none."""
    text = _THINK.sub("", answer or "")
    marks = list(_STRATEGY.finditer(text))
    out: list[Strategy] = []
    seen: set[str] = set()
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        name = " ".join(m.group(2).split())[:MAX_NAME]
        detail = " ".join(text[m.end():end].split())
        if name and name.lower() not in seen:
            seen.add(name.lower())
            out.append(Strategy(name, detail))
    return out[:n]


def parse_kernel(answer: str) -> Kernel:
    """The answer's kernel: the first fenced code block (one marked cuda/c++ or unmarked), with the
    ``KERNEL:`` title and ``WHY:`` lines."""
    text = _THINK.sub("", answer or "")
    if not text.strip():
        return Kernel(error="the model returned an empty answer.")
    fields: dict[str, str] = {}
    for m in _FIELD.finditer(text.split("```", 1)[0]):
        fields.setdefault(m.group(1).upper(), " ".join(m.group(2).strip("*_ ").split()))
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    code = next((body for lang, body in blocks if lang in _CODE_LANGS and "__global__" in body), None)
    if code is None:
        return Kernel(title=fields.get("KERNEL", ""), why=fields.get("WHY", ""),
                      error="the answer has no ```cuda block holding a __global__ kernel.")
    return Kernel(source=code.rstrip() + "\n", title=fields.get("KERNEL", "")[:MAX_NAME], why=fields.get("WHY", ""))


def check_kernel(spec: TaskSpec, source: str) -> str | None:
    """Why ``source`` is refused before it is built (one sentence), or None: it must parse, define
    the entry with the spec's exact parameter list, carry a ``// optiml:launch`` line giving grid,
    block and shared_mem, and include nothing but system headers."""
    from ..edits.hygiene import include_violation

    try:
        info = spec.source_info(source)
    except OptimlError as e:
        return f"the kernel cannot be read: {' '.join(str(e).split())}"
    want = f"it must be `{signature(spec)}`."
    kern = info.kernel(spec.entry)
    if kern is None:
        found = ", ".join(k.name for k in info.kernels) or "none"
        return f"the source has no __global__ function named {spec.entry} (found: {found}); {want}"
    if kern.templated:
        return f"the entry {spec.entry} is a template; {want}"
    names = ", ".join(a.name for a in spec.args)
    if len(kern.params) != len(spec.args):
        return (f"the entry {spec.entry} takes {len(kern.params)} parameters "
                f"({', '.join(p.name for p in kern.params) or 'none'}) but the spec gives {len(spec.args)} "
                f"({names}); {want}")
    for arg, p in zip(spec.args, kern.params):
        if arg.is_array != p.is_pointer:
            return (f"parameter {p.name!r} of {spec.entry} is {'a pointer' if p.is_pointer else 'a scalar'} "
                    f"where the spec's {arg.name} is {'an array' if arg.is_array else 'a scalar'}; {want}")
        c_dtype = dtype_of_c_type(p.base_type)
        if c_dtype is None or (c_dtype != arg.dtype and (_dt.get(c_dtype).itemsize != _dt.get(arg.dtype).itemsize
                                                        or _dt.get(c_dtype).kind != _dt.get(arg.dtype).kind)):
            return (f"parameter {p.name!r} of {spec.entry} is {p.type_text} where the spec's {arg.name} is "
                    f"{arg.dtype}; {want}")
        if p.is_pointer and p.is_const and arg.role in ("output", "inout"):
            return f"parameter {p.name!r} of {spec.entry} is const, but the kernel writes {arg.name}; {want}"
    launch = info.launch
    missing = [k for k in ("grid", "block", "shared_mem") if launch is None or getattr(launch, k) is None]
    if missing:
        return ("the kernel has no // optiml:launch line" if launch is None else
                f"the // optiml:launch line does not give {' or '.join(missing)}") + \
            ("; state the launch as // optiml:launch {grid = [...], block = [...], shared_mem = ...}.")
    why = include_violation("", source)
    if why:
        return why.replace("the edit adds", "the kernel has").replace("which the seed kernel does not have; ", "")
    return None
