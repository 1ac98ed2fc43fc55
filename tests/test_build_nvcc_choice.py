"""Which nvcc optiml uses: ``OPTIML_NVCC`` when it names an executable, one sentence when it does
not, and what ``nvcc_archs`` answers when that nvcc cannot be run (an empty tuple: it cannot say)."""
import os
import stat

import pytest

from optiml import build
from optiml.build import normalize_arch, nvcc_archs, nvcc_path, resolve_arch
from optiml.errors import EnvironmentProblem


@pytest.fixture(autouse=True)
def fresh_nvcc_lookups():
    """nvcc_path and nvcc_archs are cached once a process: forget them before and after each test."""
    for f in (nvcc_path, nvcc_archs, build.nvcc_version):
        f.cache_clear()
    yield
    for f in (nvcc_path, nvcc_archs, build.nvcc_version):
        f.cache_clear()


def executable(path, text: str):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_optiml_nvcc_naming_an_executable_is_the_nvcc_used(tmp_path, monkeypatch):
    fake = executable(tmp_path / "my-nvcc", "#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("OPTIML_NVCC", str(fake))
    assert nvcc_path() == str(fake)


def test_optiml_nvcc_naming_a_file_that_is_not_executable_is_one_sentence(tmp_path, monkeypatch):
    plain = tmp_path / "nvcc"
    plain.write_text("not a program\n")
    plain.chmod(0o644)
    monkeypatch.setenv("OPTIML_NVCC", str(plain))
    with pytest.raises(EnvironmentProblem) as e:
        nvcc_path()
    assert str(e.value) == (f"nvcc was not found at OPTIML_NVCC={plain}; "
                            f"point it at the nvcc executable or unset it.")


def test_optiml_nvcc_naming_nothing_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIML_NVCC", str(tmp_path / "missing" / "nvcc"))
    with pytest.raises(EnvironmentProblem, match=r"^nvcc was not found at OPTIML_NVCC="):
        nvcc_path()


def test_an_nvcc_that_cannot_run_lists_no_architectures_and_any_arch_is_accepted(tmp_path, monkeypatch):
    """An executable the system cannot start (no #! line, not a binary): ``nvcc --list-gpu-code``
    raises OSError, so nvcc_archs says it cannot tell (an empty tuple, as its docstring promises)
    and --arch is then only checked for its form."""
    broken = executable(tmp_path / "nvcc", "\x00\x01 not a program\n")
    monkeypatch.setenv("OPTIML_NVCC", str(broken))
    archs = nvcc_archs()
    assert archs == () and isinstance(archs, tuple)
    assert resolve_arch("9.0") == "sm_90" == normalize_arch("sm_90")
