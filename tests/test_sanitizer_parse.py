"""compute-sanitizer's real output (tests/data/sanitizer/, an H100, 2025.3.1) parsed: each tool
flags its own planted bug and nothing else, and the first finding reads as a sentence."""
import pytest

from optiml.verify.sanitizer import TOOLS, parse
from tests.conftest import DATA

FIX = DATA / "sanitizer"
CAUGHT_BY = {"write_past_end": "memcheck", "read_past_end": "memcheck", "uninitialized_read": "initcheck",
             "shared_race": "racecheck", "divergent_barrier": "synccheck"}


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("case", ["clean", *CAUGHT_BY])
def test_each_tool_flags_exactly_its_own_planted_bug(tool, case):
    r = parse((FIX / f"{tool}-{case}.txt").read_text(), tool)
    assert r.complete
    assert r.clean == (CAUGHT_BY.get(case) != tool), (tool, case, r)
    assert bool(r.findings) == (not r.clean)


def test_a_write_one_past_the_end_names_the_access_and_the_allocation():
    f = parse((FIX / "memcheck-write_past_end.txt").read_text(), "memcheck").findings[0]
    assert f.kind == "Invalid __global__ write of size 4 bytes" and f.kernel == "k" and f.where == "kernel.cu:3"
    assert (f.thread, f.block) == ("232,0,0", "3,0,0")
    assert "1 bytes after the nearest allocation" in f.detail and "4,000 bytes" in f.detail
    assert "Host Frame" not in f.sentence() and f.sentence().startswith("memcheck: Invalid __global__ write")


def test_the_other_tools_first_findings():
    init = parse((FIX / "initcheck-uninitialized_read.txt").read_text(), "initcheck")
    assert init.errors == 1000 and init.findings[0].kind == "Uninitialized __global__ memory read of size 4 bytes"
    race = parse((FIX / "racecheck-shared_race.txt").read_text(), "racecheck")
    assert race.errors == 1 and race.findings[0].kind == "Race reported between Write access and Read access"
    assert race.findings[0].where == "kernel.cu:3" and race.findings[0].detail == "256 hazards"
    sync = parse((FIX / "synccheck-divergent_barrier.txt").read_text(), "synccheck")
    assert sync.errors == 16 and sync.findings[0].kind.startswith("Barrier error detected")
    assert len(sync.findings) == 3                          # --print-limit 3


def test_output_cut_off_before_its_summary_is_not_clean():
    text = (FIX / "memcheck-clean.txt").read_text()
    cut = "\n".join(ln for ln in text.splitlines() if "SUMMARY" not in ln)
    r = parse(cut, "memcheck")
    assert not r.complete and not r.clean and r.errors == 0
