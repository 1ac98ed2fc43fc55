"""A KernelBench-format task module at chosen sizes.

A task's sizes are its module-level integers (``batch_size = 128``), and other module-level values
may be derived from them when the module runs (``bias_shape = (out_features,)``, a list of channel
counts). Setting the integers on an imported module leaves those stale; so a task is executed anew
with the top-level assignments of its sizes replaced, and everything derived from them recomputed
as the module's own code says. Each execution is registered in ``sys.modules`` under its own name,
so code that imports the module by name (``torch.compile`` tracing ``Model.forward``) finds it.

Used by ``optiml init --kernelbench`` to run the task at reduced sizes, and by the references it
writes (which import :func:`load_task`).
"""
from __future__ import annotations

import ast
import hashlib
import sys
import types
from pathlib import Path


def _literal_int(node: ast.AST) -> int | None:
    """The value of an integer expression of literals alone (``4096``, ``2 ** 12``, ``16 * 1024``)."""
    if any(isinstance(n, ast.Name) for n in ast.walk(node)):
        return None
    try:
        value = eval(compile(ast.Expression(node), "<size>", "eval"), {"__builtins__": {}})   # noqa: S307 - literals only
    except Exception:                                   # noqa: BLE001 - not a size
        return None
    return value if type(value) is int else None


def _sized_assignments(tree: ast.Module):
    """(name, the assignment node) of every top-level ``NAME = <integer literal expression>``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        else:
            continue
        v = _literal_int(value)
        if v is not None and v > 0 and not target.startswith("_"):
            yield target, node, v


def task_sizes(path: Path) -> dict[str, int]:
    """The task's sizes: its module-level names assigned a positive integer made of literals alone
    (a name computed from other names is derived, not a size), in the module's order."""
    tree = ast.parse(Path(path).read_text(), str(path))
    return {name: v for name, _, v in _sized_assignments(tree)}


def load_task(path: Path | str, sizes: dict[str, int] | None = None) -> types.ModuleType:
    """The task module executed with the sizes in ``sizes`` (a subset of :func:`task_sizes`) as its
    top-level values; the others and everything derived keep the module's own code. The module's
    folder is on ``sys.path`` while it runs (a task may import a neighbour). Raises what the
    module's own code raises."""
    path = Path(path).resolve()
    tree = ast.parse(path.read_text(), str(path))
    sizes = dict(sizes or {})
    for name, node, _ in _sized_assignments(tree):
        if name in sizes:
            node.value = ast.copy_location(ast.Constant(int(sizes[name])), node.value)
    ast.fix_missing_locations(tree)
    key = hashlib.sha1(f"{path}|{sorted(sizes.items())}".encode()).hexdigest()[:12]
    name = f"optiml_kernelbench_{path.stem.replace('-', '_')}_{key}"
    if name in sys.modules:
        return sys.modules[name]
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    sys.path.insert(0, str(path.parent))
    try:
        exec(compile(tree, str(path), "exec"), mod.__dict__)      # noqa: S102 - the user's own task file
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path.remove(str(path.parent))
    return mod
