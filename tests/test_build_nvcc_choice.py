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


def test_the_architectures_an_nvcc_lists_are_known_once_each_in_order_and_others_refused(tmp_path, monkeypatch):
    fake = executable(tmp_path / "nvcc", "#!/bin/sh\n"
                      'if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.48"; exit 0; fi\n'
                      "printf 'sm_90\\nsm_100\\nsm_75\\nsm_90\\ncompute_90\\n'\n")
    monkeypatch.setenv("OPTIML_NVCC", str(fake))
    assert nvcc_archs() == ("sm_75", "sm_90", "sm_100")
    assert resolve_arch("sm_90a") == "sm_90a"
    with pytest.raises(EnvironmentProblem) as e:
        resolve_arch("8.6")
    assert str(e.value) == ("--arch 8.6: this nvcc (13.0.48) does not know the GPU architecture sm_86 "
                            "(it knows sm_75, sm_90, sm_100).")


def test_a_cache_folder_that_cannot_be_made_is_one_sentence_with_the_systems_reason(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(EnvironmentProblem) as e:
        build._ensure_cache_dir(blocker / "cache")
    assert str(e.value) == (f"the build cache folder {blocker / 'cache'} cannot be created or written "
                            "(Not a directory); set OPTIML_CACHE_DIR to a writable folder.")


def test_the_nvcc_version_is_its_release_build_or_its_last_line_or_unknown(tmp_path, monkeypatch):
    """The version that keys the build cache: V13.0.88 from nvcc's usual banner; an nvcc that prints
    something else is known by its last line; one that prints nothing is "unknown"."""
    banner = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
              "Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n")
    for printed, version in ((banner, "13.0.88"), ("a wrapper\nmy-nvcc 1.2\n", "my-nvcc 1.2"), ("", "unknown")):
        fake = executable(tmp_path / f"nvcc{len(printed)}", "#!/bin/sh\ncat <<'END'\n" + printed + "END\n")
        monkeypatch.setenv("OPTIML_NVCC", str(fake))
        for f in (nvcc_path, build.nvcc_version):
            f.cache_clear()
        assert build.nvcc_version() == version
