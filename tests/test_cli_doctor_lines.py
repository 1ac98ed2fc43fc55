"""`optiml doctor`'s nvcc and LLM lines: an nvcc that cannot be run says "version unknown", and the
LLM line is ok when a model is set together with an API key or a base URL (a local server), and
missing without a model. Runs the real checks on this machine (no GPU; nvcc is a FAKE broken
executable where the version is asked)."""
import pytest
from click.testing import CliRunner

from optiml.build import nvcc_path
from optiml.cli import main

LLM_VARS = ("OPTIML_LLM_BASE_URL", "OPENAI_BASE_URL", "OPTIML_LLM_MODEL", "OPTIML_LLM_API_KEY", "OPENAI_API_KEY")


@pytest.fixture
def lines(monkeypatch):
    """Runs doctor with only the given LLM settings; returns its lines by their first word."""
    def run(**env) -> dict[str, str]:
        for var in LLM_VARS:
            monkeypatch.delenv(var, raising=False)
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        nvcc_path.cache_clear()
        try:
            r = CliRunner().invoke(main, ["doctor"])
        finally:
            nvcc_path.cache_clear()
        assert r.exit_code == 0, r.output
        return {ln.split()[0]: ln for ln in r.output.splitlines()}
    return run


def llm_state(line: str) -> str:
    return line.split()[1]


def test_llm_is_ready_with_a_model_and_an_api_key_alone(lines):
    line = lines(OPTIML_LLM_MODEL="m", OPTIML_LLM_API_KEY="sk-secret")["LLM"]
    assert llm_state(line) == "ok", line
    assert "API key set (OPTIML_LLM_API_KEY)" in line and "sk-secret" not in line
    assert "for `--proposer llm` set" not in line


def test_llm_is_ready_with_a_model_and_a_local_server_without_a_key(lines):
    line = lines(OPTIML_LLM_MODEL="m", OPTIML_LLM_BASE_URL="http://127.0.0.1:9/v1")["LLM"]
    assert llm_state(line) == "ok", line


def test_llm_is_missing_without_a_model_even_with_key_and_server(lines):
    line = lines(OPENAI_API_KEY="sk-x", OPTIML_LLM_BASE_URL="http://127.0.0.1:9/v1")["LLM"]
    assert llm_state(line) == "missing", line
    assert "model not set" in line and "set OPTIML_LLM_MODEL" in line


def test_an_nvcc_that_cannot_be_run_has_version_unknown(lines, tmp_path):
    """A FAKE nvcc: executable, but not a program the system can start (OSError when run)."""
    broken = tmp_path / "nvcc"
    broken.write_bytes(b"\x00\x01\x02 not a program\n")
    broken.chmod(0o755)
    line = lines(OPTIML_NVCC=str(broken))["nvcc"]
    assert line.split(None, 2)[1:] == ["ok", f"{broken} (version unknown)"], line
