"""Running a tool (nvcc, ncu) in its own process group with a wall-clock limit."""
from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from loguru import logger


def run_with_timeout(cmd: list[str], timeout_s: float, *, cwd: Path | None = None,
                     env: dict | None = None) -> tuple[int | None, str]:
    """(exit code, stdout+stderr); the code is None when the whole group was killed at the timeout."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out or ""
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        return None, out or ""


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s whole process group (it was started with ``start_new_session``) and
    reap it; a group that is already gone is fine."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        logger.warning("process {} did not exit after SIGKILL", proc.pid)


# Names of variables that hold credentials: never handed to nvcc, ncu or a GPU child, which run
# code a model wrote (OPTIML_LLM_API_KEY, OPENAI_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...).
SECRET_NAME = re.compile(r"(?i)(api[_-]?key|token|secret|passw(or)?d|credential|access[_-]?key|auth)")


def scrubbed_env(base: dict | None = None) -> dict:
    """``base`` (default: this process's environment) without credential-like variables."""
    return {k: v for k, v in (os.environ if base is None else base).items() if not SECRET_NAME.search(k)}


def child_env(base: dict | None = None) -> dict:
    """An environment in which a child ``python -m optiml...`` imports this same optiml, without
    credentials (:func:`scrubbed_env`)."""
    env = scrubbed_env(base)
    pkg_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
