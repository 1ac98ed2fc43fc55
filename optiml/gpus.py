"""What GPUs this machine has: the one place nvidia-smi is asked (and pycuda looked for)."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

from .errors import EnvironmentProblem, UserError


def smi(*args: str) -> str:
    """nvidia-smi's output ("" without it, or when it fails)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return ""
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_available() -> bool:
    """Whether kernels can run here: nvidia-smi lists GPUs and pycuda is installed."""
    exe = shutil.which("nvidia-smi")
    if exe is None or importlib.util.find_spec("pycuda") is None:
        return False
    try:
        return subprocess.run([exe, "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def gpu_facts() -> tuple[str | None, str | None]:
    """GPU 0's name and the driver version, or None each."""
    out = smi("--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0").strip()
    name, _, driver = out.partition(",")
    return (name.strip() or None), (driver.strip() or None)


def compute_capability() -> str | None:
    """``sm_XY`` of GPU 0, or None."""
    out = smi("--query-gpu=compute_cap", "--format=csv,noheader").split()
    if out and re.fullmatch(r"\d+\.\d+", out[0]):
        major, minor = out[0].split(".")
        return f"sm_{major}{minor}"
    return None


def flags_name_arch(flags) -> bool:
    """Whether nvcc ``flags`` name the GPU architecture themselves (a template for sm_90a carries
    ``-arch=sm_90a``): then they, not the GPU's own, say what the code was built for."""
    return any(f.startswith(("-arch", "--gpu-architecture", "-gencode", "--generate-code")) for f in flags)


def visible_gpus() -> list[tuple[int, str]]:
    """(index, name) of every GPU nvidia-smi lists (CUDA_VISIBLE_DEVICES renumbers them from 0)."""
    out = smi("--query-gpu=index,name", "--format=csv,noheader")
    rows = [ln.split(",", 1) for ln in out.strip().splitlines() if "," in ln]
    gpus = [(i, name.strip()) for i, (_, name) in enumerate(rows)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() not in ("", "all"):
        picked = [v.strip() for v in visible.split(",") if v.strip()]
        by_index = {str(i): name.strip() for i, (_, name) in enumerate(rows)}
        gpus = [(n, by_index.get(v, "GPU")) for n, v in enumerate(picked)]
    return gpus


def parse_gpus(text: str, visible: list[tuple[int, str]]) -> list[int]:
    """``--gpus``: "all", or CUDA ordinals like "0,2". GPUs of different models are refused:
    candidates timed on one would be compared with candidates timed on the other."""
    names = dict(visible)
    if text.strip() == "all":
        chosen = sorted(names)
        if not chosen:
            raise UserError("--gpus all: nvidia-smi lists no GPU.")
    else:
        try:
            chosen = sorted({int(x) for x in text.split(",") if x.strip()})
        except ValueError:
            raise UserError(f"--gpus takes \"all\" or GPU numbers like 0,1, not {text!r}.") from None
        if not chosen:
            raise UserError("--gpus names no GPU.")
        missing = [g for g in chosen if names and g not in names]
        if missing:
            raise UserError(f"--gpus {text}: no GPU {missing[0]} here (visible: {', '.join(map(str, sorted(names))) or 'none'}).")
    models = {names.get(g) for g in chosen if names.get(g)}
    if len(models) > 1:
        raise UserError(f"--gpus {text} mixes GPU models ({', '.join(sorted(models))}); their timings would not "
                        f"compare; choose GPUs of one model.")
    return chosen


def no_gpu_error(why: str | None = None) -> EnvironmentProblem:
    """The one sentence every command gives when it finds no GPU (``optiml build`` without --arch
    included), with why nvidia-smi did not name one."""
    if why is None:
        why = "nvidia-smi is not on PATH" if shutil.which("nvidia-smi") is None else "nvidia-smi lists no GPU"
    return EnvironmentProblem(f"no GPU was found ({why}); `optiml eval`, `profile` and `optimize` run kernels and need a CUDA "
                     f"GPU, and `optiml build` needs --arch (e.g. --arch sm_90) to compile without one.")


def require_gpu(command: str) -> None:
    """A UserError unless a CUDA GPU and pycuda are here (``command``: the optiml command asking)."""
    if shutil.which("nvidia-smi") is None:
        raise no_gpu_error()
    if importlib.util.find_spec("pycuda") is None:
        raise UserError("pycuda is not installed; install the gpu extra: pip install 'optiml-kernels[gpu]'.")
