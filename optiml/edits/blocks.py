"""Reading an LLM's answer into source edits, and applying them (pure functions, no I/O).

The answer format (what :mod:`optiml.edits.llm` asks the model for)::

    EDIT: <a short title of the edit>
    WHY: <one or two sentences: what the edit changes and why it should be faster>

    <<<<<<< SEARCH
    exact lines copied from the current source
    =======
    the lines that replace them
    >>>>>>> REPLACE

``EDIT:``/``WHY:`` are optional (markdown decoration such as ``**EDIT:**`` or ``# EDIT:`` is
accepted, and ``WHY:`` may run on over the following lines up to a blank line). There may be
several SEARCH/REPLACE blocks, inside or outside ``````` fences, applied in order: each SEARCH
must match the source exactly once as it stands after the blocks before it. Markers may use 5 to
9 of their characters, as aider accepts. Instead of blocks an answer may carry a unified diff in
a ```` ```diff ```` (or ```` ```patch ````) fence: each ``@@`` hunk becomes one edit whose SEARCH
is its context and removed lines and whose REPLACE is its context and added lines (the line
numbers in the ``@@`` header are ignored).

Matching works on whole lines. A line matches when it is equal (line endings aside: a CRLF
source matches an LF answer and keeps its CRLF); when nothing matches that way, a second pass
ignores trailing whitespace on each line. Nothing fuzzier: an edit that does not match is an
error naming the block, which the model sees on its next request.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

TITLE_CHARS = 80

_SEARCH = re.compile(r"^\s*<{5,9} ?SEARCH\b.*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9} ?REPLACE\b.*$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^[\s#>*_\-]*(EDIT|TITLE|WHY|RATIONALE)[*_\s]*:[*_\s]*(.*)$", re.IGNORECASE)
_HUNK = re.compile(r"^@@")


@dataclass(frozen=True)
class Edit:
    """One replacement: ``search`` lines (exact text of the current source) become ``replace``."""
    search: str
    replace: str
    index: int                       # 1-based position in the answer
    kind: str = "block"              # block (SEARCH/REPLACE) | hunk (unified diff)

    @property
    def label(self) -> str:
        return f"SEARCH block {self.index}" if self.kind == "block" else f"diff hunk {self.index}"


@dataclass(frozen=True)
class ParsedAnswer:
    """What an answer says: a title, a rationale, the edits, and what could not be read."""
    title: str = ""
    rationale: str = ""
    edits: tuple[Edit, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def error(self) -> str | None:
        """The one-sentence reason the answer cannot be used, or None."""
        if self.errors:
            return self.errors[0]
        if not self.edits:
            return ("the answer holds no SEARCH/REPLACE block (<<<<<<< SEARCH ... ======= ... "
                    ">>>>>>> REPLACE) and no ```diff hunk")
        return None


@dataclass(frozen=True)
class Applied:
    """The source after the edits, or why they could not be applied (then ``source`` is the input)."""
    source: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _header(lines: list[str]) -> tuple[str, str]:
    """The ``EDIT:`` title and ``WHY:`` rationale from the prose lines of an answer."""
    title, why, in_why = "", [], False
    for line in lines:
        m = _HEADING.match(line)
        if m:
            key, text = m.group(1).lower(), m.group(2).strip().strip("*_").strip()
            in_why = key in ("why", "rationale")
            if in_why and not why:
                why = [text] if text else []
            elif not in_why and not title:
                title = text
            continue
        if in_why and line.strip() and not _FENCE.match(line):
            why.append(line.strip())
        else:
            in_why = False
    return " ".join(title.split())[:TITLE_CHARS], " ".join(" ".join(why).split())


def _blocks(lines: list[str]) -> tuple[list[Edit], list[str], set[int]]:
    """SEARCH/REPLACE blocks, structural errors, and the indices of the lines they occupy."""
    edits, errors, used = [], [], set()
    i, n = 0, 0
    while i < len(lines):
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        n += 1
        start, search, replace = i, [], []
        i += 1
        while i < len(lines) and not _DIVIDER.match(lines[i]) and not _SEARCH.match(lines[i]):
            search.append(lines[i])
            i += 1
        if i >= len(lines) or not _DIVIDER.match(lines[i]):
            errors.append(f"SEARCH block {n} has no '=======' line between its SEARCH and REPLACE parts")
            continue
        i += 1
        while i < len(lines) and not _REPLACE.match(lines[i]) and not _SEARCH.match(lines[i]):
            replace.append(lines[i])
            i += 1
        if i >= len(lines) or not _REPLACE.match(lines[i]):
            errors.append(f"SEARCH block {n} is not closed by a '>>>>>>> REPLACE' line")
            continue
        used.update(range(start, i + 1))
        i += 1
        if not any(s.strip() for s in search):
            errors.append(f"SEARCH block {n} is empty; copy the exact source lines to replace into it")
            continue
        edits.append(Edit(search="\n".join(search), replace="\n".join(replace), index=n))
    return edits, errors, used


def _diff_fences(lines: list[str]) -> tuple[list[list[str]], set[int]]:
    """The bodies of ```diff / ```patch fences, and the indices of the lines they occupy."""
    bodies, used, i = [], set(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, fence, lang = i, m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        if lang in ("diff", "patch", "udiff"):
            bodies.append(lines[i + 1:j])
            used.update(range(start, j + 1))
        i = j + 1
    return bodies, used


def _hunks(body: list[str], first: int) -> list[Edit]:
    """The ``@@`` hunks of one unified diff as edits, numbered from ``first``."""
    edits, search, replace, in_hunk = [], [], [], False

    def close():
        if in_hunk and (search or replace):
            edits.append(Edit(search="\n".join(search), replace="\n".join(replace),
                              index=first + len(edits), kind="hunk"))

    for k, line in enumerate(body):
        header = line.startswith("--- ") and k + 1 < len(body) and body[k + 1].startswith("+++ ")
        if _HUNK.match(line) or header or line.startswith(("diff --git", "index ")):
            close()
            search, replace, in_hunk = [], [], bool(_HUNK.match(line))
        elif not in_hunk or line.startswith("\\"):      # "\ No newline at end of file", file headers
            continue
        elif line.startswith("-"):
            search.append(line[1:])
        elif line.startswith("+"):
            replace.append(line[1:])
        else:                                          # context; models often drop the lone space
            search.append(line[1:] if line.startswith(" ") else line)
            replace.append(line[1:] if line.startswith(" ") else line)
    close()
    return edits


def parse_answer(text: str) -> ParsedAnswer:
    """Read an answer: its title and rationale, and its SEARCH/REPLACE blocks or diff hunks."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    edits, errors, used = _blocks(lines)
    if not edits and not errors:
        bodies, used = _diff_fences(lines)
        for body in bodies:
            edits.extend(_hunks(body, len(edits) + 1))
        if bodies and not edits:
            errors.append("the ```diff fence holds no '@@' hunk")
        for e in edits:
            if not any(s.strip() for s in e.search.split("\n")):
                errors.append(f"{e.label} has no context or removed lines to locate it in the source")
                break
    title, why = _header([line for k, line in enumerate(lines) if k not in used])
    return ParsedAnswer(title=title, rationale=why, edits=tuple(edits), errors=tuple(errors))


def _split(source: str) -> tuple[list[str], list[str]]:
    """Lines of ``source`` without and with their line endings."""
    parts = source.split("\n")
    full = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    return [p.removesuffix("\n").removesuffix("\r") for p in full], full


def _matches(hay: list[str], needle: list[str], loose: bool) -> list[int]:
    if loose:
        hay, needle = [s.rstrip() for s in hay], [s.rstrip() for s in needle]
    n = len(needle)
    return [i for i in range(len(hay) - n + 1) if hay[i:i + n] == needle]


def _snippet(text: str) -> str:
    first = next((s.strip() for s in text.split("\n") if s.strip()), "")
    return first if len(first) <= 60 else first[:57] + "..."


def apply_edit(source: str, edit: Edit) -> Applied:
    """Replace the one place ``edit.search`` matches in ``source``; an error when it matches
    nowhere or in several places."""
    bare, full = _split(source)
    needle = edit.search.split("\n")
    where = _matches(bare, needle, loose=False) or _matches(bare, needle, loose=True)
    if not where:
        return Applied(source, f"{edit.label} (starting '{_snippet(edit.search)}') matches nothing in "
                               "the source; copy its lines exactly from the current source")
    if len(where) > 1:
        return Applied(source, f"{edit.label} (starting '{_snippet(edit.search)}') matches "
                               f"{len(where)} places in the source; include more context lines to make it unique")
    i, n = where[0], len(needle)
    eol = "\r\n" if "\r\n" in source else "\n"
    last_eol = full[i + n - 1][len(bare[i + n - 1]):]          # "" when the match ends the file
    new = [line + eol for line in edit.replace.split("\n")] if edit.replace else []   # "": delete
    if new and not last_eol:
        new[-1] = new[-1][:-len(eol)]
    return Applied("".join(full[:i] + new + full[i + n:]))


def apply_edits(source: str, edits: tuple[Edit, ...] | list[Edit]) -> Applied:
    """Apply ``edits`` in order, each to the result of the ones before; the first failure stops."""
    out = source
    for edit in edits:
        r = apply_edit(out, edit)
        if not r.ok:
            return Applied(source, r.error)
        out = r.source
    if out == source:
        return Applied(source, "the edit leaves the source unchanged (each REPLACE equals its SEARCH)")
    return Applied(out)


def fallback_title(edits: tuple[Edit, ...] | list[Edit]) -> str:
    """A title for an answer without ``EDIT:``: the first changed line of the first edit."""
    if not edits:
        return "llm: (no edit)"
    e = edits[0]
    old = {s.strip() for s in e.search.split("\n")}
    changed = [s.strip() for s in e.replace.split("\n") if s.strip() and s.strip() not in old]
    line = changed[0] if changed else _snippet(e.search)
    return "llm: " + line[:TITLE_CHARS]
