"""What every operation template shares: its default space in the [tune] form (:class:`Spaced`) and
where its text goes in the user's source (:func:`place`)."""
from __future__ import annotations

from ...spec.space import TuneSpace


class Spaced:
    """A template's default space in the [tune] form: its ``space`` (each name's values) and the
    ``restrictions`` every point must satisfy."""

    @property
    def tune_space(self) -> TuneSpace:
        return TuneSpace(tuple((k, tuple(v)) for k, v in self.space.items()), tuple(self.restrictions))

    def points(self) -> list[dict]:
        """Every point of the default space its restrictions allow."""
        sp = self.tune_space
        return [p for p in sp.points() if sp.violated(p, [{}]) is None]


def place(source: str, fn, prelude: str, kernel: str) -> str:
    """``source`` with the entry ``fn`` replaced by ``kernel`` and ``prelude`` (includes, macros,
    helper templates) just before it, or, where the entry sits inside a linkage block (``extern
    "C"``, where templates may not be declared), before that block."""
    top = fn
    while top.parent is not None and top.parent.type != "translation_unit":
        top = top.parent
    data = source.encode("utf-8")
    if top == fn:
        return data[:fn.start_byte].decode("utf-8") + prelude + kernel + data[fn.end_byte:].decode("utf-8")
    return (data[:top.start_byte].decode("utf-8") + prelude + data[top.start_byte:fn.start_byte].decode("utf-8")
            + kernel + data[fn.end_byte:].decode("utf-8"))
