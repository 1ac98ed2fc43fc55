"""The project's files speak of the project: its design, its results, its limits. Never of how the work
on it was organised (issue numbers, sessions, rounds of work, who wrote a part, the tools the work was
done with), and no file is named after an issue. History is in git log."""
import re
import subprocess

from tests.conftest import ROOT

# each: what it catches, the pattern (case-insensitive)
WORDS = [
    ("an issue number", r"\bissues? #?\d+"),
    ("a session", r"\bsession \d+\b|\b(?:this|last|previous|next|earlier|later|one|a|the) sessions?\b(?! (?:id|cookie|key))"),
    ("who wrote it", r"\bsub-?agents?\b|\b(?:by|from) a helper\b|\bhelper'?s (?:survey|review|work)\b"),
    ("rounds of work", r"\brounds? of work\b|\b(?:first|second|third|fourth) review\b"),
    ("the tools of the work", r"\bdevice (?:tool|machine|time)\b|\bworkplace\b|\blease\b"),
]
NAMED_AFTER_AN_ISSUE = re.compile(r"(?i)(^|/)issue[_-]?\d+")
SKIP_SUFFIXES = (".db", ".png", ".jpg", ".whl", ".gz", ".cubin", ".parquet", ".html")
HERE = "tests/test_project_words.py"


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout.decode()
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def offences(text: str) -> list[tuple[int, str, str]]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in WORDS:
            m = re.search(pattern, line, re.IGNORECASE)
            if m:
                found.append((n, what, m.group(0)))
    return found


def test_no_file_is_named_after_an_issue():
    named = [f for f in tracked_files() if NAMED_AFTER_AN_ISSUE.search(f)]
    assert named == [], named


def test_no_file_speaks_of_how_the_work_was_organised():
    bad = []
    for f in tracked_files():
        if f == HERE or f.endswith(SKIP_SUFFIXES):
            continue
        try:
            text = (ROOT / f).read_text()
        except (UnicodeDecodeError, OSError):
            continue
        bad += [f"{f}:{n}: {what}: {word!r}" for n, what, word in offences(text)]
    assert bad == [], "\n".join(bad[:50])


def test_the_check_sees_each_kind_of_word():
    for line in ("as issue 26 asked", "fixed in session 13", "in this session", "written by a helper",
                 "a subagent's survey", "the second review found", "three rounds of work",
                 "run it on the device machine", "this workplace", "the device time left"):
        assert offences(line), line
    for line in ("a helper function", "subprocess.Popen(start_new_session=True)", "requests.Session()",
                 "issued warps a scheduler", "the device's primary context", "GPU time", "a release"):
        assert offences(line) == [], (line, offences(line))
