"""The figures of one verification case: its max abs/rel error are the worst over its outputs
(0 without outputs), recorded in its dict and shown on the `optiml eval` verify line."""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from optiml.cli.kernel import format_evaluation
from optiml.verify.compare import check_output, summarize

REF = np.array([1, 2, 3, 4], np.float32)


def output(name, error):
    return check_output(name, REF + np.float32(error), REF, "float32", 1e-3, 1e-3, rel_rms=1e-2)


def test_a_case_reports_the_worst_error_over_its_outputs():
    """y off by 0.25 at 2.0, z off by 0.5 at 3.0: the case's max abs err is 0.5 and its max rel
    err 1/6, in CaseCheck and in its recorded dict; a case with no outputs says 0."""
    case = summarize(0, {"N": 4}, 7, [output("y", [0, 0.25, 0, 0]), output("z", [0, 0, -0.5, 0])], [])
    assert not case.passed and case.failed_check == "tolerance"
    assert (case.max_abs_err, case.max_rel_err) == (0.5, pytest.approx(1 / 6))
    d = case.to_dict()
    assert (d["max_abs_err"], d["max_rel_err"]) == (0.5, pytest.approx(1 / 6))
    empty = summarize(0, {"N": 4}, 7, [], ["x"])
    assert (empty.failed_check, empty.max_abs_err, empty.max_rel_err) == ("input_modified", 0.0, 0.0)


def test_the_eval_verify_line_gives_the_worst_case():
    """`optiml eval` prints, over all cases, the largest max abs err (0.5, from the first case's z)."""
    failed = summarize(0, {"N": 4}, 7, [output("y", [0, 0.25, 0, 0]), output("z", [0, 0, -0.5, 0])], [])
    passed = summarize(1, {"N": 4}, 8, [output("y", [0, 0, 0, 1e-4])], [])
    assert passed.passed and passed.max_abs_err == pytest.approx(1e-4, rel=1e-2)
    harness = SimpleNamespace(device_name="", checks=[failed, passed], log_tail="", timing=None)
    ev = SimpleNamespace(harness=harness, build=None, launch=None, status="wrong_output", message="y is wrong",
                         seed=7, sanitize=None)
    text = format_evaluation(ev, Path("k.cu"), SimpleNamespace(entry="k"))
    assert "verify    FAILED on 2 case(s) (seed 7): max abs err 0.5, max rel err 0.167, relative RMS error" in text
