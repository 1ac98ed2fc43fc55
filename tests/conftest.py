from pathlib import Path

import pytest

from optiml.gpus import gpu_available

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DATA = Path(__file__).resolve().parent / "data"

# The deadline of a test that drives the runner's threads (none takes 15 s): a mutant or a bug that leaves
# a thread waiting forever fails the test at 60 s, its stacks printed, instead of hanging the run.
RUNNER_DEADLINE = pytest.mark.timeout(60)


def assert_one_sentence_error(r, *fragments):
    """A click CliRunner result that is what a user should see for bad input: exit code 1, no
    exception escaping the CLI (CliRunner keeps tracebacks out of the output, so looking for
    "Traceback" there proves nothing), one line starting "Error: ", naming ``fragments``."""
    assert r.exit_code == 1, (r.exit_code, r.output)
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    out = r.output.strip()
    assert len(out.splitlines()) == 1 and out.startswith("Error: "), out
    for f in fragments:
        assert f in out, (f, out)


# A GPU test may build and time a whole template space: its deadline is half an hour, not the suite's 300 s.
GPU_DEADLINE_S = 1800


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(GPU_DEADLINE_S))
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and pycuda (run on a GPU machine: see README)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def build_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("build-cache")
