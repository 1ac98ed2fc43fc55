"""The benchmark scripts load and explain themselves without a GPU (their runs need one)."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_help(script):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower(), r.stdout[:500]
