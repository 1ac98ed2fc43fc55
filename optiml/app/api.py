"""The Python API: ``optiml.compile``, ``optiml.evaluate`` and ``optiml.optimize`` (docs/api.md).

Each takes either a kernel file and its spec (``optiml.evaluate("k.cu")``, the spec beside it or
``spec=``), or Kernel Tuner-style arguments: the CUDA source, the arrays and scalars in the
kernel's argument order (``args=``), which of them the kernel writes (``outputs=``), the launch
(``grid=``, ``block=``: numbers or expressions over the sizes, as in a spec) and optionally the
sizes' names, verification sizes, tolerances and a reference. From those a spec is built
(``optiml.spec.arrays``: a TOML-shaped dict through the same ``parse_spec`` as a file), written
with the kernel as ``ENTRY.cu`` and ``ENTRY.toml`` into ``workdir``, and the same functions the
CLI calls (``app.evaluate.evaluate_kernel``, ``app.optimize.run_optimize``) run on those files.

What the arrays cannot say, said plainly:

* Their values are not the inputs. Every verification draws fresh inputs within the range of the
  given values (integers from their minimum to their maximum, floats uniformly between them; the
  dtype's default draws where an array holds one value, as np.zeros does), as a spec's ``init``.
* Without ``verify_sizes=`` the kernel is verified at the given shapes only: the file format's
  two verification size sets are that shape twice, each with fresh inputs. A kernel that is
  wrong only at other sizes (a last partial block) passes; give ``verify_sizes=[{...}, {...}]``,
  in the sizes' names, to check them.
* The dimensions are named by ``sizes=`` (``{"N": 4096}`` names every dimension of 4096 ``N``),
  the others ``N0``, ``N1``, ... in order of appearance; an integer scalar equal to a size is
  that size (it follows it to the verification sizes); give a string (``"7"``) for a literal.

A mistake a user can fix is a ``UserError`` (``SpecError``) of one sentence; a kernel that does
not build, verify or run is a status on the result, never an exception.
"""
from __future__ import annotations

import hashlib
import inspect
import pickle
import shutil
import sys
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import UserError

__all__ = ["Built", "Evaluated", "Optimized", "compile", "evaluate", "optimize", "task_files"]

# the keywords that describe a task built from arguments (the spec's fields), with their defaults
TASK_KEYWORDS = {"entry": None, "outputs": (), "inouts": (), "grid": None, "block": None, "shared_mem": 0,
                 "sizes": None, "verify_sizes": None, "atol": None, "rtol": None, "reference": "seed",
                 "nvcc_flags": ("-O3",), "flops": None, "bytes": None, "trials": None}


# --------------------------------------------------------------------------------- the task's files

@dataclass(frozen=True)
class TaskFiles:
    kernel: Path            # the kernel file the CLI would be given
    spec: Path | None       # its spec (None: kernel.toml beside it)
    temporary: Path | None = None    # a folder to remove when done


def task_files(kernel, spec=None, *, args: Sequence | None = None, workdir: Path | str | None = None,
               keep_in: Path | None = None, **task) -> TaskFiles:
    """The kernel and spec files of a task: the given ones, or (with ``args``) ``ENTRY.cu`` and
    ``ENTRY.toml`` written into ``workdir``; without one, a temporary folder (removed after the
    call), or with ``keep_in``, ``keep_in/optiml_tasks/ENTRY-HASH`` (kept, for the CLI to resume)."""
    unknown = sorted(set(task) - set(TASK_KEYWORDS))
    if unknown:
        raise UserError(f"unknown keyword {unknown[0]}= (a task takes {', '.join(TASK_KEYWORDS)}).")
    if args is None:
        given = sorted(k for k, v in task.items() if v is not TASK_KEYWORDS[k] and v != TASK_KEYWORDS[k])
        if isinstance(kernel, str) and "__global__" in kernel:
            raise UserError("the kernel is CUDA source: give its arguments with args=[...] (arrays and scalars in "
                            "the kernel's order) and outputs=, or pass a kernel file and its spec.")
        if given:
            raise UserError(f"{given[0]}= goes with args=; a kernel file takes its task from its spec "
                            f"(give args=[...] to build the spec from arrays).")
        return TaskFiles(Path(kernel), Path(spec) if spec is not None else None)
    if spec is not None:
        raise UserError("give either spec= (a spec file) or args= (the arrays to build one from), not both.")
    from ..spec import read_kernel, spec_data_from_arrays, spec_from_data, to_toml

    source = kernel if isinstance(kernel, str) and "__global__" in kernel else read_kernel(Path(kernel))
    reference = task.pop("reference", "seed")
    data = spec_data_from_arrays(source, args, **task)          # TASK_KEYWORDS' defaults are the builder's
    entry = data["kernel"]["entry"]
    spec_from_data(data, source)                   # the arguments' mistakes, before any file is written
    temporary = None
    if workdir is not None:
        folder = Path(workdir)
    elif keep_in is None:
        folder = temporary = Path(tempfile.mkdtemp(prefix=f"optiml-{entry}-"))
    else:
        named = getattr(reference, "__qualname__", None) or str(reference)
        digest = hashlib.sha256((source + to_toml(data) + named).encode()).hexdigest()[:10]
        folder = Path(keep_in) / "optiml_tasks" / f"{entry}-{digest}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        target = _reference_file(reference, folder, entry)
        if target is not None:
            data["reference"] = {"python": target}
            spec_from_data(data, source)
        kernel_path, spec_path = folder / f"{entry}.cu", folder / f"{entry}.toml"
        kernel_path.write_text(source)
        spec_path.write_text(to_toml(data))
    except BaseException as e:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        if isinstance(e, OSError):
            raise UserError(f"{folder}: cannot write the task's files ({e.strerror or e}); give another "
                            f"workdir=.") from None
        raise
    return TaskFiles(kernel_path, spec_path, temporary)


def _reference_file(reference, folder: Path, entry: str) -> str | None:
    """The spec's ``reference.python`` for ``reference``: None for the seed; ``"file.py:fn"`` made
    absolute; a callable pickled (cloudpickle when installed) beside a small module that loads it
    in the GPU child."""
    if reference is None or (isinstance(reference, str) and reference == "seed"):
        return None
    if isinstance(reference, (str, Path)):
        text = str(reference)
        if ":" not in text:
            raise UserError(f"reference= must be 'seed', a Python function, or 'file.py:function', not {text!r}.")
        file, fn = text.rsplit(":", 1)
        path = Path(file).resolve()
        if not path.is_file():
            raise UserError(f"reference= names {file}, which does not exist.")
        return f"{path}:{fn}"
    if not callable(reference):
        raise UserError(f"reference= must be 'seed', a Python function, or 'file.py:function', not a "
                        f"{type(reference).__name__}.")
    try:
        import cloudpickle

        blob = cloudpickle.dumps(reference)
    except ImportError:
        try:
            blob = pickle.dumps(reference)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise UserError(f"the reference {getattr(reference, '__name__', reference)!r} cannot be sent to the GPU "
                            f"child ({e}); install cloudpickle, or give reference='file.py:function'.") from None
    except Exception as e:        # what cloudpickle cannot pickle (a lock, an open file in its closure)
        raise UserError(f"the reference {getattr(reference, '__name__', reference)!r} cannot be sent to the GPU "
                        f"child ({type(e).__name__}: {e}); give reference='file.py:function'.") from None
    roots = _module_roots(reference)
    (folder / f"{entry}_reference.pkl").write_bytes(blob)
    (folder / f"{entry}_reference.py").write_text(
        '"""The Python reference given to optiml.evaluate/optimize, pickled beside this file."""\n'
        "import pickle\nimport sys\nfrom pathlib import Path\n\n"
        f"sys.path[:0] = [p for p in {roots!r} if p not in sys.path]\n"
        f"reference = pickle.loads(Path(__file__).with_name({entry + '_reference.pkl'!r}).read_bytes())\n")
    return f"{(folder / f'{entry}_reference.py').resolve()}:reference"


def _module_roots(fn) -> list[str]:
    """The folder the reference's module is imported from (its package's parent), so that the
    GPU child can import what a by-reference pickle names."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    try:
        file = inspect.getsourcefile(module) if module is not None and module.__name__ != "__main__" else None
    except TypeError:
        file = None
    if not file:
        return []
    root = Path(file).resolve().parent
    for _ in range(module.__name__.count(".") + (1 if Path(file).name == "__init__.py" else 0)):
        root = root.parent
    return [str(root)]


# --------------------------------------------------------------------------------- results

@dataclass(frozen=True)
class Built:
    """``optiml.compile``'s result: nvcc's outcome (``build``: status, log, cubin) and ptxas's
    figures for the entry (``resources``: registers, shared memory, spills)."""
    build: Any
    resources: Any
    spec: Any
    kernel: Path

    @property
    def ok(self) -> bool:
        return self.build.ok

    @property
    def status(self) -> str:
        return str(self.build.status)


@dataclass(frozen=True)
class Evaluated:
    """``optiml.evaluate``'s result: ``evaluation`` is what ``optiml eval --json`` prints
    (``to_dict()``); ``ok``, ``status``, ``message`` and ``median_ms`` are its verdict."""
    evaluation: Any
    spec: Any
    kernel: Path

    @property
    def ok(self) -> bool:
        return self.evaluation.ok

    @property
    def status(self) -> str:
        return str(self.evaluation.status)

    @property
    def message(self) -> str:
        return self.evaluation.message

    @property
    def median_ms(self) -> float | None:
        return self.evaluation.median_ms

    def to_dict(self) -> dict:
        return self.evaluation.to_dict()


@dataclass(frozen=True)
class Optimized:
    """``optiml.optimize``'s result: the run ``run_id`` in the trace database ``db`` (``optiml show
    RUN --db DB`` shows it), the best kernel's source and the nvcc ``flags`` it was verified and
    timed with, ``speedup`` over the seed (the final interleaved timing), ``final`` (that timing's
    figures), ``best_path`` (its edits) and ``output`` (the file written)."""
    run_id: int
    db: Path
    best_source: str
    speedup: float
    flags: tuple[str, ...]
    final: dict
    best_path: tuple[str, ...]
    evaluations: int
    output: Path
    kernel: Path

    @property
    def trajectory(self):
        """The run's candidates as a pandas DataFrame, one row per node in the order they were made
        (the columns of ``optiml export``: node_id, parent_id, depth, edit, eval_status, median_ms,
        speedup, is_best, registers, ... and one per profiler metric)."""
        from ..traces.export import to_dataframe
        from ..traces.store import TraceStore

        with TraceStore(self.db, read_only=True) as store:
            return to_dataframe(store, self.run_id, best_id=self.final.get("best_node"))


# --------------------------------------------------------------------------------- the calls

def compile(kernel, spec=None, *, args: Sequence | None = None, arch: str | None = None, timeout_s: float = 120.0,
            workdir: Path | str | None = None, **task) -> Built:
    """Compile a kernel with its spec's flags (no GPU needed with ``arch``, e.g. ``"sm_90"``).
    ``kernel``: a .cu file (its spec beside it or ``spec=``), or CUDA source with ``args=`` and the
    task's keywords (see the module's docstring and docs/api.md)."""
    from .evaluate import build_kernel

    files = task_files(kernel, spec, args=args, workdir=workdir, **task)
    try:
        result, spec_ = build_kernel(files.kernel, files.spec, arch=arch, timeout_s=timeout_s)
        return Built(result, result.entry_resources(spec_.entry), spec_, files.kernel)
    finally:
        _clean(files)


def evaluate(kernel, spec=None, *, args: Sequence | None = None, arch: str | None = None, device: int = 0,
             seed: int | None = None, timeout_s: float = 120.0, time_it: bool = True, sanitize: bool = False,
             reference_kernel: Path | str | None = None, workdir: Path | str | None = None, **task) -> Evaluated:
    """Build a kernel, verify it against the reference and time it on the GPU, as ``optiml eval``
    does. ``kernel``: a .cu file (its spec beside it or ``spec=``), or CUDA source with ``args=``,
    ``outputs=``, ``grid=``, ``block=`` and the task's other keywords: ``entry``, ``inouts``,
    ``shared_mem``, ``sizes``, ``verify_sizes``, ``atol``/``rtol``, ``reference`` ("seed", a
    Python function called with the inputs and scalars by parameter name, returning the outputs,
    or "file.py:function"), ``nvcc_flags``, ``flops``/``bytes``, ``trials``. Verification without
    ``verify_sizes`` is at the arrays' shapes only (see the module's docstring)."""
    from .evaluate import evaluate_kernel

    files = task_files(kernel, spec, args=args, workdir=workdir, **task)
    try:
        ev, spec_ = evaluate_kernel(files.kernel, files.spec, arch=arch, device=device, seed=seed,
                                    timeout_s=timeout_s, time_it=time_it, sanitize=sanitize,
                                    reference_kernel=Path(reference_kernel) if reference_kernel else None)
        return Evaluated(ev, spec_, files.kernel)
    finally:
        _clean(files)


def optimize(kernel, spec=None, *, args: Sequence | None = None, budget: int | None = None,
             time_limit_s: float | None = None, proposer: str = "rules", profile: bool = True,
             db: Path | str = "optiml.db", arch: str | None = None, gpus: str = "all", output: Path | str | None = None,
             workdir: Path | str | None = None, on_progress: Callable | None = None, options: Mapping | None = None,
             **task) -> Optimized:
    """Search for a faster kernel, as ``optiml optimize`` does (the same ``run_optimize``), and
    return the best with the run's ``trajectory``. ``kernel``: a .cu file (its spec beside it or
    ``spec=``), or CUDA source with ``args=`` and the task's keywords (as :func:`evaluate`); its
    files are kept in ``workdir`` (default ``optiml_tasks/ENTRY-HASH`` beside ``db``) so that the run can be
    resumed and shown from the CLI. ``options``: further fields of ``OptimizeOptions`` (seed,
    parallel, sanitize, llm_model, timeout_s, ...). ``on_progress(done, total, best_speedup)``
    follows the search."""
    from ..traces.kernel_file import node_flags
    from ..traces.store import TraceStore
    from .optimize import OptimizeOptions, run_optimize

    known = {f.name for f in fields(OptimizeOptions)} - {"kernel", "spec"}
    extra = dict(options or {})
    unknown = sorted(set(extra) - known)
    if unknown:
        raise UserError(f"options: unknown option {unknown[0]!r} (known: {', '.join(sorted(known))}).")
    files = task_files(kernel, spec, args=args, workdir=workdir, keep_in=Path(db).resolve().parent, **task)
    opts = OptimizeOptions(kernel=files.kernel, spec=files.spec, budget=budget, time_limit_s=time_limit_s,
                           proposer=proposer, profile=profile, db=Path(db), arch=arch, gpus=gpus,
                           output=Path(output) if output is not None else None, **extra)
    result = run_optimize(opts, on_progress=on_progress)
    best = result.final.get("best_node")
    with TraceStore(opts.db, read_only=True) as store:
        flags = tuple(node_flags(store, store.run(result.run_id), best)) if isinstance(best, int) else ()
    return Optimized(run_id=result.run_id, db=opts.db, best_source=result.best_source, speedup=result.speedup,
                     flags=flags, final=result.final, best_path=result.best_path, evaluations=result.evaluations,
                     output=result.output, kernel=files.kernel)


def _clean(files: TaskFiles) -> None:
    if files.temporary is not None:
        shutil.rmtree(files.temporary, ignore_errors=True)
