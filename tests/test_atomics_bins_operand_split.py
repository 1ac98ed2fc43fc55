"""Privatized atomics (optiml/edits/atomics.py): the bins' count is read from the operand right of
the index's `%` or `&`, written with or without spaces around the operator; a logical `&&` is not
a mask, so an index bounded only by one is refused with the reason."""
import pytest

from optiml.edits.atomics import privatize_atomics
from tests.test_edits_atomics import HIST, LAUNCH

BIN = "int k = keys[i] % bins;"


def test_a_modulo_written_without_spaces_is_read_as_the_kernels_bins():
    (t,), why = privatize_atomics(HIST.replace(BIN, "int k = keys[i]%bins;"), "histogram", LAUNCH)
    assert why is None
    assert "const bool optiml_fit = (bins) <= OPTIML_PRIV_CAP;" in t.source
    assert "its own copy of the bins bins in shared memory" in t.rationale


def test_a_mask_written_without_spaces_gives_its_bins_to_the_copy():
    (t,), why = privatize_atomics(HIST.replace(BIN, "int k = keys[i]&255;"), "histogram", LAUNCH)
    assert why is None
    assert "#define OPTIML_PRIV_CAP 256" in t.source
    assert "its own copy of the 256 bins in shared memory" in t.rationale


@pytest.mark.parametrize("index", ["keys[i] && 1", "keys[i] && 255"])
def test_a_logical_and_is_not_read_as_a_mask(index):
    ts, why = privatize_atomics(HIST.replace(BIN, f"int k = {index};"), "histogram", LAUNCH)
    assert ts == []
    assert why == ("not privatized: the bin k is not bounded by a `% bins`, a `& mask` or an unsigned byte the "
                   "rewrite can read")
