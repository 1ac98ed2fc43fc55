"""What the source rewrites of the ``rules`` proposer share: the :class:`Transform` they return and
small helpers over tree-sitter-cuda's tree (text of a node, splicing byte ranges, the entry
function, its parameters and shared arrays)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..source import _walk, function_declarator, parse_tree


@dataclass(frozen=True)
class Transform:
    kind: str                    # tune | knob | coarsen | vectorize | pad | restrict | const | unroll | launch_bounds | flag
    source: str
    edit: str
    rationale: str
    flags: tuple[str, ...] = ()  # extra nvcc flags this variant adds
    hint: float = 1.0


# ----------------------------------------------------------------------------- tree helpers
def _tree(source: str):
    return parse_tree(source).root_node


def _flat(text: str) -> str:
    """``text`` with every run of whitespace one space."""
    return re.sub(r"\s+", " ", text).strip()


def _t(node) -> str:
    return node.text.decode("utf-8", "replace")


def _short(t: str) -> str:
    """``t`` on one line, cut to 60 characters (for a refusal's reason)."""
    t = re.sub(r"\s+", " ", t).strip()
    return t if len(t) <= 60 else t[:57] + "..."


def _ancestors(node):
    up = node.parent
    while up is not None:
        yield up
        up = up.parent


def _splice(source: str, edits: list[tuple[int, int, str]]) -> str:
    """Replace byte ranges (start, end, text) of ``source``; ranges must not overlap."""
    data = source.encode("utf-8")
    for start, end, text in sorted(edits, reverse=True):
        data = data[:start] + text.encode("utf-8") + data[end:]
    return data.decode("utf-8")


def _entry_def(root, entry: str = ""):
    """The ``__global__`` function_definition named ``entry`` (or the only/first one)."""
    found = []
    for n in _walk(root):
        if n.type == "function_definition" and any(c.type == "__global__" for c in n.children):
            fd = _fdecl(n)
            if fd is not None:
                found.append((_t(fd.child_by_field_name("declarator")), n, fd))
    for name, n, fd in found:
        if not entry or name == entry:
            return n, fd
    return None, None


_fdecl = function_declarator


def _params(fdecl):
    """(name, identifier node, pointer_declarator node or None, param node) of each parameter."""
    out = []
    plist = fdecl.child_by_field_name("parameters")
    for p in plist.children if plist is not None else []:
        if p.type != "parameter_declaration":
            continue
        d, ptr = p.child_by_field_name("declarator"), None
        while d is not None and d.type == "pointer_declarator":
            ptr = d
            d = d.child_by_field_name("declarator")
        if d is not None and d.type == "identifier":
            out.append((_t(d), d, ptr, p))
    return out


def _unparen(node):
    """``node`` without the parentheses around it."""
    while node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    return node


def _assigned_names(node) -> set[str]:
    """The names ``node`` changes: assigned (``=``, ``+=``, ...), incremented or decremented, or whose
    address it takes."""
    out = set()
    for n in _walk(node):
        target = None
        if n.type == "assignment_expression":
            target = n.child_by_field_name("left")
        elif n.type == "update_expression":
            target = n.child_by_field_name("argument")
        elif n.type == "pointer_expression" and _t(n).lstrip().startswith("&"):
            target = n.child_by_field_name("argument")
        if target is not None and _unparen(target).type == "identifier":
            out.add(_t(_unparen(target)))
    return out


def _shared_arrays(fn) -> dict[str, str]:
    """name -> element type of each ``__shared__`` array declared in ``fn``."""
    out = {}
    for n in _walk(fn):
        if n.type == "declaration" and "__shared__" in _t(n).split("[")[0]:
            t = n.child_by_field_name("type")
            for d in _walk(n):
                if d.type == "array_declarator":
                    inner = d.child_by_field_name("declarator")
                    if inner is not None and inner.type == "identifier":
                        out[_t(inner)] = _t(t) if t is not None else ""
    return out
