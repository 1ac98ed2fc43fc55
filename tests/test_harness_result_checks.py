"""What a GPU job's result says of its checks, read on the CPU from a result as the GPU child
writes it: the cases that failed, and one note an output whose atol exceeds the reference's RMS
(the first case's), kept through the JSON the child hands back."""
from optiml.verify.compare import CaseCheck, OutputCheck
from optiml.verify.harness import HarnessResult


def _result():
    small = OutputCheck("y", 100, ref_rms=1e-6, atol=1e-5)          # atol past the outputs' typical size
    fine = OutputCheck("z", 100, ref_rms=1.0, atol=1e-5)
    return HarnessResult("wrong_output", "max abs error 3 at y[7]", checks=[
        CaseCheck(0, {"n": 64}, 1, True, outputs=[small, fine]),
        CaseCheck(1, {"n": 1001}, 2, False, message="max abs error 3 at y[7]",
                  outputs=[OutputCheck("y", 1001, mismatched=1, max_abs_err=3.0, ref_rms=1e-6, atol=1e-5), fine]),
    ])


def test_the_failed_cases_are_those_that_did_not_pass():
    r = _result()
    assert [c.size_index for c in r.failed_checks] == [1]
    assert HarnessResult("ok", checks=_result().checks[:1]).failed_checks == []


def test_one_note_an_output_whose_atol_is_vacuous_from_its_first_case():
    notes = _result().notes()
    assert len(notes) == 1 and notes[0].startswith("y: atol 1e-05 exceeds the reference's RMS 1e-06 at sizes {'n': 64}")
    back = HarnessResult.from_dict(_result().to_dict())
    assert back.notes() == notes and [c.size_index for c in back.failed_checks] == [1]


def test_a_timings_spread_is_its_iqr_over_its_median_and_zero_for_a_zero_median():
    from optiml.verify.harness import TimingResult

    t = TimingResult(2.0, 2.0, 1.8, 2.4, 1.9, 2.2, 0.1, 100, 10, 3, True)
    assert t.spread == 0.05
    assert TimingResult(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 100, 10, 3, True).spread == 0.0
