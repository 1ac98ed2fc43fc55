"""What the bench scripts share: the checkout's root, put first on sys.path when this module is
imported (so a script measures this checkout's optiml, installed or not), and the one check that a
GPU is here, which ends a script with one sentence where none is.

A script one folder below bench/ finds it with two lines (``parents[2]`` one folder deeper):

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
    from common import ROOT, gpu_arch  # noqa: E402
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))


def gpu_arch(script: str, arch: str | None,
             hint: str = "--arch only picks what nvcc builds for") -> str:
    """``--arch`` (checked against nvcc) or the GPU's, after making sure a GPU is here: a
    SystemExit with one sentence otherwise (these scripts time kernels, so --arch alone is not
    enough; ``hint`` says what the script can do without one)."""
    from optiml.build import detect_arch, resolve_arch
    from optiml.errors import UserError
    from optiml.gpus import gpu_available, smi

    try:
        chosen = resolve_arch(arch) if arch else None
        if not gpu_available():
            why = "nvidia-smi is not on PATH" if not smi("-L") else "pycuda is not installed"
            raise UserError(f"no GPU was found ({why}); it runs kernels on a CUDA GPU ({hint}), so run it on a "
                            f"GPU machine")
        return chosen or detect_arch()
    except UserError as e:
        raise SystemExit(f"{script}: {str(e).rstrip('.')}.") from None
