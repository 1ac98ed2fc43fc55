"""--gpus parsing: ordinals, "all", and one sentence for what cannot work."""
import pytest

from optiml.errors import UserError
from optiml.gpus import parse_gpus

TWO = [(0, "NVIDIA H200"), (1, "NVIDIA H200")]


def test_all_and_lists():
    assert parse_gpus("all", TWO) == [0, 1]
    assert parse_gpus("1,0", TWO) == [0, 1]
    assert parse_gpus("1", TWO) == [1]


@pytest.mark.parametrize("text, visible, words", [
    ("x", TWO, "GPU numbers"),
    ("2", TWO, "no GPU 2"),
    ("all", [], "lists no GPU"),
    ("0,1", [(0, "NVIDIA H100 80GB HBM3"), (1, "NVIDIA A100")], "mixes GPU models"),
])
def test_bad_choices_are_one_sentence(text, visible, words):
    with pytest.raises(UserError, match=words):
        parse_gpus(text, visible)


def test_help_says_profiling_does_not_scale_across_gpus_of_a_host():
    from click.testing import CliRunner

    from optiml.cli import main

    out = CliRunner().invoke(main, ["optimize", "--help"], terminal_width=200).output
    assert "--gpus" in out and "serialises" in out and "--no-profile" in out


FAKE_SMI = """#!/bin/sh
case "$*" in
  *compute_cap*) echo "9.0"; echo "9.0" ;;
  *index,name*) echo "0, NVIDIA H200"; echo "1, NVIDIA H200" ;;
  *name,driver_version*) echo "NVIDIA H200, 570.86.15" ;;
  -L) echo "GPU 0: NVIDIA H200" ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """An nvidia-smi on PATH that answers the queries optiml makes, as on a host with two H200s."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return smi


def test_what_nvidia_smi_says_is_read_in_one_place(fake_smi, monkeypatch):
    from optiml.build import resolve_arch
    from optiml.build import detect_arch
    from optiml.gpus import gpu_facts, visible_gpus

    assert gpu_facts() == ("NVIDIA H200", "570.86.15")
    assert visible_gpus() == TWO
    assert detect_arch() == resolve_arch(None) == "sm_90"
    assert resolve_arch("8.0") == "sm_80"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert visible_gpus() == [(0, "NVIDIA H200")]     # renumbered from 0, the name as nvidia-smi gives it


def test_without_nvidia_smi_there_is_no_gpu(tmp_path, monkeypatch):
    from optiml.build import resolve_arch
    from optiml.errors import EnvironmentProblem
    from optiml.build import detect_arch
    from optiml.gpus import gpu_available, gpu_facts, require_gpu, visible_gpus

    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_facts() == (None, None) and visible_gpus() == [] and not gpu_available()
    with pytest.raises(EnvironmentProblem, match="needs --arch"):
        detect_arch()
    assert resolve_arch("sm_90") == "sm_90"        # `optiml build --arch` needs no GPU
    with pytest.raises(UserError, match=r"no GPU was found \(nvidia-smi is not on PATH\); `optiml eval`, `profile` and `optimize` run kernels"):
        require_gpu("eval")


def test_require_gpu_names_the_missing_pycuda(fake_smi, monkeypatch):
    import importlib.util

    from optiml.gpus import gpu_available, require_gpu

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pycuda" else real(name, *a))
    assert not gpu_available()
    with pytest.raises(UserError, match=r"pycuda is not installed; install the gpu extra"):
        require_gpu("optimize")


def test_the_architecture_is_gpu_0s(fake_smi):
    """A host whose GPUs differ: nvcc builds for GPU 0, the one nvidia-smi lists first."""
    from optiml.build import detect_arch
    fake_smi.write_text(FAKE_SMI.replace('echo "9.0"; echo "9.0"', 'echo "8.0"; echo "9.0"'))
    assert detect_arch() == "sm_80"


def test_a_gpu_is_available_when_nvidia_smi_lists_one_and_pycuda_is_installed(fake_smi, monkeypatch):
    """A FAKE nvidia-smi and a FAKE pycuda spec: the check's wiring, not GPU behaviour."""
    import importlib.util

    from optiml.gpus import gpu_available

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "pycuda" else real(name, *a))
    assert gpu_available()
    # a driver that is not loaded: nvidia-smi fails (NVIDIA-SMI has failed ..., exit 9)
    fake_smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver'\nexit 9\n")
    assert not gpu_available()


def test_an_nvidia_smi_that_cannot_run_is_no_gpu_and_no_error(fake_smi, monkeypatch):
    """nvidia-smi on PATH but broken (its interpreter gone, say): what it would say is nothing."""
    from optiml.gpus import gpu_available, gpu_facts, smi, visible_gpus

    fake_smi.write_text("#!/nonexistent/interpreter\n")
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())     # pycuda "installed"
    assert smi("-L") == "" and gpu_facts() == (None, None) and visible_gpus() == []
    assert not gpu_available()
