"""optiml: make CUDA kernels faster by searching source edits under verification.

The library never prints; it logs through loguru under the name ``optiml``, which is
disabled until the CLI (or a user) enables it.

``optiml.compile``, ``optiml.evaluate`` and ``optiml.optimize`` are the Python API
(``optiml.app.api``, docs/api.md), imported on first use so that ``import optiml`` stays light.
"""
from loguru import logger

__version__ = "0.1.0"

logger.disable("optiml")

_API = ("compile", "evaluate", "optimize")


def __getattr__(name: str):
    if name in _API:
        # The package is the facade over the top layer: a name looked up at call time, not an import
        # of the package's own (tests/test_layers.py reads import statements; every module below
        # imports ``optiml`` for its shared names, so a static import here would close a circle).
        import importlib

        return getattr(importlib.import_module("optiml.app.api"), name)
    raise AttributeError(f"module 'optiml' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])
