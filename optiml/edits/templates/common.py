"""What every operation template shares: its default space in the [tune] form (:class:`Spaced`),
where its text goes in the user's source (:func:`place`) and, for the Jinja2 ones, their rendering
(:func:`render`, :func:`place_rendered`)."""
from __future__ import annotations

from importlib import resources

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


def render(name: str, **context) -> str:
    """The Jinja2 template ``name`` of this folder rendered with ``context`` (undefined names are errors)."""
    import jinja2
    env = jinja2.Environment(loader=jinja2.FunctionLoader(lambda n: resources.files(__package__).joinpath(n).read_text()),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True)
    return env.get_template(name).render(**context)


def place_rendered(source: str, fn, head: str, text: str) -> str:
    """``source`` with the entry ``fn`` replaced by the rendered ``text``: its ``#include`` lines the
    source lacks first, then ``head`` (the template's mark and launch line), its helpers and macros,
    then its kernel (from ``__global__ void``)."""
    includes = "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("#include") and ln not in source)
    text = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#include")) + "\n"
    cut = text.index("__global__ void")
    return place(source, fn, includes + head + text[:cut], text[cut:])
