"""Running a tool under a wall-clock limit: its exit code and output, and what is left of the
output when the limit kills it."""
import sys

from optiml.procs import run_with_timeout


def test_a_tool_that_ends_gives_its_code_and_its_output():
    code, out = run_with_timeout([sys.executable, "-c", "import sys; print('done'); sys.exit(3)"], 30)
    assert (code, out) == (3, "done\n")


def test_a_tool_killed_at_the_limit_keeps_what_it_printed():
    """nvcc or ncu stuck past its limit: the code is None, and the log so far is kept for the user."""
    code, out = run_with_timeout([sys.executable, "-u", "-c", "import time; print('started'); time.sleep(30)"], 1.0)
    assert (code, out) == (None, "started\n")
