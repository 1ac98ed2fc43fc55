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


def test_a_cpp_kernel_signature_is_the_kernels_name():
    """The form compute-sanitizer gives a kernel without extern "C" (seen on the H100 with the
    adversarial vadd kernels): the whole signature, spaces and all, is the kernel."""
    text = ("========= COMPUTE-SANITIZER\n"
            "========= Invalid __global__ write of size 4 bytes\n"
            "=========     at vadd(const float *, const float *, float *, int)+0x140 in vadd_slack_write.cu:11\n"
            "=========     by thread (232,0,0) in block (4095,0,0)\n"
            "=========     Access to 0x7f00 is out of bounds\n"
            "========= \n"
            "========= ERROR SUMMARY: 1 error\n")
    f = parse(text, "memcheck").findings[0]
    assert f.kernel == "vadd(const float *, const float *, float *, int)" and f.where == "vadd_slack_write.cu:11"
    race = ("========= Error: Race reported between Write access at vadd(const float *, float *, int)+0x110 in r.cu:3\n"
            "=========     and Read access at vadd(const float *, float *, int)+0x120 in r.cu:4 [4000 hazards]\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    r = parse(race, "racecheck").findings[0]
    assert r.kernel == "vadd(const float *, float *, int)" and r.where == "r.cu:3" and r.detail == "4000 hazards"
