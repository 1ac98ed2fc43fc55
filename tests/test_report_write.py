"""Writing the report page (optiml.traces.html.write_report): the page lands at the path given as
text or as a Path, and the written file's Path is returned for the caller to name or open."""
from pathlib import Path

from optiml.traces.html import write_report


def test_write_report_writes_the_page_and_returns_its_path(tmp_path):
    """Given a string path, the page's text is written there and the same path comes back as a Path."""
    target = tmp_path / "run-3.html"
    got = write_report("<!doctype html><p>report \u00d7 2</p>", str(target))
    assert isinstance(got, Path) and got == target
    assert got.read_text(encoding="utf-8") == "<!doctype html><p>report \u00d7 2</p>"
    assert write_report("<p>again</p>", target) == target and target.read_text(encoding="utf-8") == "<p>again</p>"
