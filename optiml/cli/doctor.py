"""``optiml doctor``: what optiml found on this machine, one line each, with what to do about a gap."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess

import click


def _version(exe: str, pattern: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "version unknown"
    m = re.search(pattern, out)
    return m.group(1) if m else "version unknown"


_NVCC_VERSION = r"release [\d.]+, V([\d.]+)"
_NCU_VERSION = r"Version ([\d.]+)"


def checks() -> list[tuple[str, bool, str]]:
    """(what, found, the line's text: where or what it is, or what to do)."""
    from ..build import nvcc_path
    from ..errors import UserError
    from ..gpus import visible_gpus
    from ..profiler.ncu import find_ncu
    from ..verify.sanitizer import SANITIZER_ENV, find_sanitizer

    out = []
    try:
        nvcc = nvcc_path()
        out.append(("nvcc", True, f"{nvcc} ({_version(nvcc, _NVCC_VERSION)})"))
    except UserError as e:
        out.append(("nvcc", False, str(e)))
    ncu = find_ncu()
    out.append(("ncu", bool(ncu), f"{ncu} ({_version(ncu, _NCU_VERSION)})" if ncu else
                "not found; install Nsight Compute (part of the CUDA toolkit) for `optiml profile` and profiling "
                "in `optiml optimize`"))
    san = find_sanitizer()
    out.append(("compute-sanitizer", bool(san), san or f"not found; install the CUDA toolkit or set {SANITIZER_ENV} "
                                                       f"for `--sanitize`"))
    for mod, why in (("pycuda", "pip install 'optiml-kernels[gpu]' to run kernels (eval, profile, optimize)"),
                     ("torch", "optional: only for Python references that use it"),
                     ("cupy", "optional: only for Python references that use it")):
        found = importlib.util.find_spec(mod) is not None
        out.append((mod, found, "installed" if found else f"not installed; {why}"))
    gpus = visible_gpus()
    out.append(("GPUs", bool(gpus), ", ".join(f"{i}: {name}" for i, name in gpus) if gpus else
                "none found (nvidia-smi lists none or is not on PATH); `optiml build --arch sm_90` still compiles, "
                "eval, profile and optimize need a CUDA GPU"))
    base = os.environ.get("OPTIML_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
    model = os.environ.get("OPTIML_LLM_MODEL")
    key = "OPTIML_LLM_API_KEY" if os.environ.get("OPTIML_LLM_API_KEY") else \
        "OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None
    ready = bool(model) and (bool(key) or bool(base))
    said = (f"base URL {base or 'the OpenAI default'}, model {model or 'not set'}, API key "
            f"{'set (' + key + ')' if key else 'not set'}")
    if not ready:
        said += ("; for `--proposer llm` set OPTIML_LLM_MODEL and OPTIML_LLM_API_KEY (or OPTIML_LLM_BASE_URL to a "
                 "local server)")
    out.append(("LLM", ready, said))
    return out


@click.command()
@click.option("--strict", is_flag=True, help="Exit 1 when anything needed is missing (torch and cupy are optional; by default doctor only reports).")
def doctor(strict: bool) -> None:
    """Say which tools, libraries, GPUs and LLM settings optiml finds here, and what to do about a gap."""
    rows = checks()
    for what, found, text in rows:
        click.echo(f"{what:<18} {'ok' if found else 'missing':<8} {text}")
    if strict and not all(found or text.startswith("not installed; optional") for _, found, text in rows):
        raise SystemExit(1)
