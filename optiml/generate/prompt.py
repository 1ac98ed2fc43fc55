"""The messages ``optiml generate`` sends: one request naming several implementation strategies,
one request per strategy for a complete kernel, and one repair request for a kernel that failed.

Every message carries the task as the spec states it (the entry's exact signature, each argument's
shape and role, the sizes, the tolerance, the reference's Python source) and the user's description."""
from __future__ import annotations

from ..spec import TaskSpec

REFERENCE_CHARS = 4000        # of the reference's Python file shown to the model
MESSAGE_CHARS = 1500          # of a failure's message (a compile log can be long)

_C_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "int64": "long long", "uint64": "unsigned long long"}

STRATEGY_SYSTEM = """\
You are an expert CUDA performance engineer. Before any code is written, you name several \
distinct ways to implement a GPU kernel for a task: different mappings of the work to threads, \
warps and blocks, different uses of shared memory, registers and vector loads, different \
reduction schemes. Each strategy will be written as its own complete kernel, verified against a \
reference on several sizes and timed; the fastest correct ones are then refined.

Answer format, and nothing else: one block per strategy,
STRATEGY 1: <a short name, under 60 characters>
<one or two sentences: how the work maps to threads and why it could be fast>
STRATEGY 2: ...
"""

KERNEL_SYSTEM = """\
You are an expert CUDA performance engineer. You write one complete CUDA source file that \
implements a task with a given strategy. It is compiled with nvcc, launched by a harness that \
calls the entry kernel by name with the arguments in the given order, verified against a \
reference on several input sizes (odd ones too: partial blocks and tiles must be handled, every \
output element must be written) and timed.

Rules:
- The entry kernel must have exactly the given name and parameter list (names, types, order); \
helper __device__ functions and constants may be added. No host code, no main(), no #include \
other than CUDA and C++ system headers in angle brackets.
- For float32 the tolerance allows a different summation order, not TF32 or half-precision arithmetic.
- State the launch in one comment line of the source, a TOML inline table with all three keys:
    // optiml:launch {grid = ["cdiv(N, BLOCK)"], block = ["BLOCK"], shared_mem = 0}
  grid and block hold 1 to 3 dimensions, each a number or a quoted expression over the task's \
sizes and the source's #define / constexpr integer constants (+ - * / // % min max cdiv \
round_up ...; / between integers truncates as in C); shared_mem is the dynamic shared memory per \
block in bytes (a number or a quoted expression). Put tunable numbers (a block size, elements per \
thread) in #define constants and use them in the launch line, so they can be tuned later.

Answer format, and nothing else:
KERNEL: <a short title, under 80 characters>
WHY: <one or two sentences>
```cuda
<the complete source>
```"""


def c_type(dtype: str) -> str:
    """The C type a kernel parameter of ``dtype`` is written with."""
    from .. import dtypes

    return _C_TYPES.get(dtype) or dtypes.get(dtype).c_names[0]


def signature(spec: TaskSpec) -> str:
    """The entry's exact declaration: ``__global__ void NAME(const float* __restrict__ x, ...)``
    (input arrays const, scalars by value)."""
    params = []
    for a in spec.args:
        t = c_type(a.dtype)
        if not a.is_array:
            params.append(f"{t} {a.name}")
        elif a.role == "input":
            params.append(f"const {t}* __restrict__ {a.name}")
        else:
            params.append(f"{t}* __restrict__ {a.name}")
    return f"__global__ void {spec.entry}({', '.join(params)})"


def _sizes(d) -> str:
    return ", ".join(f"{k} = {v}" for k, v in d.items())


def _reference(spec: TaskSpec) -> list[str]:
    ref = spec.reference
    if not ref.is_python or ref.path is None:
        return []
    try:
        text = ref.path.read_text()
    except (OSError, UnicodeDecodeError):
        return []
    if len(text) > REFERENCE_CHARS:
        return [f"Reference: the Python function `{ref.function}` in {ref.path.name} (too long to show)."]
    return [f"Reference: the Python function `{ref.function}` below computes the outputs from the inputs "
            "(arrays are flat, row-major; scalars by the argument names).", "```python", text.rstrip("\n"), "```"]


def task_text(spec: TaskSpec, description: str) -> str:
    """The task as every request states it."""
    lines = ["## Task", description.strip(), "", f"Entry kernel, exactly: `{signature(spec)}`", "Arguments, in order:"]
    for a in spec.args:
        if a.is_array:
            lines.append(f"- {a.name}: {a.dtype} {a.role} array of shape [{', '.join(map(str, a.shape))}] "
                         "(flat, row-major)")
        else:
            lines.append(f"- {a.name}: {a.dtype} scalar = {a.value}")
    inout = [a.name for a in spec.args if a.role == "inout"]
    if inout:
        lines.append(f"({', '.join(inout)}: read and written; reset from its init before every launch.)")
    lines.append(f"Timed at {_sizes(spec.timing_sizes)}; verified also at "
                 + "; ".join(_sizes(v) for v in spec.verify_sizes) + ".")
    tols = {a.dtype: spec.tolerance(a.dtype) for a in spec.args if a.role in ("output", "inout")}
    lines.append("Tolerance: " + ", ".join(f"{d} atol {t.atol:g} rtol {t.rtol:g}" for d, t in tols.items()) + ".")
    lines += _reference(spec)
    return "\n".join(lines)


def strategy_messages(spec: TaskSpec, description: str, n: int) -> list[dict]:
    """The one request that names ``n`` distinct strategies."""
    user = (task_text(spec, description) + f"\n\nName {n} distinct implementation strategies for this kernel, "
            "from simple to aggressive, in the answer format (STRATEGY 1: ..., STRATEGY 2: ...).")
    return [{"role": "system", "content": STRATEGY_SYSTEM}, {"role": "user", "content": user}]


def _strategy(name: str, detail: str) -> str:
    return f"## Strategy\n{name}" + (f": {detail}" if detail else "")


def kernel_messages(spec: TaskSpec, description: str, name: str, detail: str, others: list[str] = ()) -> list[dict]:
    """The request for one complete kernel implementing strategy ``name``."""
    parts = [task_text(spec, description), "", _strategy(name, detail)]
    others = [o for o in others if o != name]
    if others:
        parts.append("(The other strategies, written separately: " + "; ".join(others) + ".)")
    parts += ["", "Write the complete kernel for this strategy, with its // optiml:launch line, in the answer "
              "format (KERNEL:, WHY:, then one ```cuda block)."]
    return [{"role": "system", "content": KERNEL_SYSTEM}, {"role": "user", "content": "\n".join(parts)}]


def _short(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


def repair_messages(spec: TaskSpec, description: str, name: str, detail: str, source: str, status: str,
                    message: str) -> list[dict]:
    """The one repair request for strategy ``name``'s kernel ``source``, which ended ``status``."""
    parts = [task_text(spec, description), "", _strategy(name, detail), "",
             "## Your kernel for this strategy", "```cuda", source.rstrip("\n"), "```", "",
             f"## What happened: {status}", _short(message) or "(no message)", "",
             "Fix it: answer with the complete corrected kernel for the same strategy, with its // optiml:launch "
             "line, in the answer format (KERNEL:, WHY:, then one ```cuda block)."]
    return [{"role": "system", "content": KERNEL_SYSTEM}, {"role": "user", "content": "\n".join(parts)}]
