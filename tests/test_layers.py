"""The package's layer rules (docs/architecture.md), checked on every import statement in
optiml/, lazy ones inside functions included: a module imports only what its layer may, and no
two modules import each other, directly or around a circle."""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "optiml"

SHARED = {"optiml", "optiml.errors", "optiml.status", "optiml.best", "optiml.dtypes", "optiml.expr", "optiml.procs",
          "optiml.source", "optiml.spec", "optiml.gpus", "optiml.cubin"}
# what each unit (a subpackage, or a top-level module) may import besides the shared modules and itself
MAY_IMPORT = {
    "optiml.build": set(),
    "optiml.draft": set(),
    "optiml.generate": {"optiml.edits"},
    "optiml.edits": set(),
    "optiml.profiler": set(),
    "optiml.traces": set(),
    "optiml.verify": {"optiml.build"},
    "optiml.cluster": {"optiml.build", "optiml.verify", "optiml.profiler"},
    "optiml.search": {"optiml.edits.types"},
    "optiml.runner": {"optiml.build", "optiml.verify", "optiml.profiler"},
    "optiml.app": {"optiml.build", "optiml.cluster", "optiml.edits", "optiml.profiler", "optiml.runner",
                   "optiml.search", "optiml.traces", "optiml.verify", "optiml.generate"},
    "optiml.cli": {"optiml.app", "optiml.build", "optiml.draft", "optiml.profiler", "optiml.runner",
                   "optiml.search", "optiml.traces", "optiml.verify", "optiml.edits", "optiml.cluster",
                   "optiml.generate"},
    "optiml.__main__": {"optiml.cli"},
}
# the search's only shared imports (it must not reach the spec, the runner or the GPU)
SEARCH_SHARED = {"optiml.best", "optiml.status"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every optiml module ``path`` imports (``from X import y`` counts as X.y when that is a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "optiml")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "optiml":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if _is_module(sub) else target)
    return out - {name}


def _is_module(name: str) -> bool:
    p = PKG.parent.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def unit(name: str) -> str:
    return ".".join(name.split(".")[:2])


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in PKG.rglob("*.py")}


def within(name: str, allowed: set[str]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def test_every_unit_has_a_layer():
    units = {unit(m) for m in graph()}
    assert units - SHARED - set(MAY_IMPORT) == set()


@pytest.mark.parametrize("src", sorted(MAY_IMPORT))
def test_a_unit_imports_only_what_its_layer_may(src):
    bad = []
    for mod, deps in graph().items():
        if unit(mod) != src:
            continue
        shared = SEARCH_SHARED if src == "optiml.search" else SHARED
        allowed = MAY_IMPORT[src] | shared | {src}
        bad += [f"{mod} -> {d}" for d in deps if not within(d, allowed) and d not in ("optiml",) or
                (src == "optiml.search" and d == "optiml")]
    assert bad == []


def test_shared_modules_import_only_shared_modules():
    bad = [f"{mod} -> {d}" for mod, deps in graph().items() if unit(mod) in SHARED
           for d in deps if not within(d, SHARED)]
    assert bad == []


def test_no_import_cycle():
    g = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for d in sorted(g.get(m, ())):
            if d not in g:
                continue
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2
    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    # a package's __init__ re-exporting its own modules is not a cycle between modules
    real = [c for c in cycles if not all(unit(x) == unit(c[0]) for x in c) or
            not any(x == unit(x) for x in c)]
    assert real == []


def test_click_lives_only_in_the_cli():
    """The library below the CLI never imports click (a notebook calls run_optimize and the stages)."""
    bad = []
    for p in PKG.rglob("*.py"):
        if module_name(p).startswith("optiml.cli"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{module_name(p)} imports {n}" for n in names if n.split(".")[0] == "click"]
    assert bad == []
