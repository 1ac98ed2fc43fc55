"""A kernel's local names for products of its sizes (``int spatial = dim1 * dim2;``) written as their
values before the operation is read: the readers match indexing against the kernel's arguments,
and such a name is the same value under another name. Only what cannot change meaning is inlined:
an integer declared once, at the kernel's top level, from its scalar arguments (none of which the
kernel assigns) and literals by arithmetic, never assigned itself nor named in a macro; written as
``(E)`` for an ``int`` and ``((T)(E))`` otherwise, so its type is kept."""
from __future__ import annotations

import re

from ...source import _walk
from ..cutree import _assigned_names, _entry_def, _params, _splice, _t, _tree

_INTEGER = re.compile(r"(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|long\s+long|long\s+int|short|size_t|"
                      r"unsigned|u?int(?:8|16|32|64)_t|ptrdiff_t)(?:\s+const)?")
_ARITH = {"identifier", "number_literal", "binary_expression", "parenthesized_expression"}
_OPS = {"+", "-", "*", "/", "%", "<<", ">>"}


def inline_size_aliases(source: str, entry: str) -> str:
    """``source`` with the entry's size aliases replaced by their values (the source itself where it
    has none, or where the entry is not found)."""
    try:
        root = _tree(source)
        fn, fdecl = _entry_def(root, entry)
    except Exception:                               # noqa: BLE001 - nothing to inline in what cannot be read
        return source
    if fn is None or fdecl is None:
        return source
    body = fn.child_by_field_name("body")
    if body is None:
        return source
    scalars = {name for name, _, ptr, _ in _params(fdecl) if ptr is None}
    changed = _assigned_names(body)
    declared: dict[str, int] = {}
    for d in _walk(body):                           # every declaration of each name (a shadow: not inlined)
        if d.type == "identifier" and d.parent is not None and (
                d.parent.type in ("init_declarator", "array_declarator", "pointer_declarator")
                and d.parent.child_by_field_name("declarator") == d or
                d.parent.type == "reference_declarator" or             # its name has no field of its own
                d.parent.type in ("declaration", "parameter_declaration", "optional_parameter_declaration")
                and d in d.parent.children_by_field_name("declarator")):
            declared[_t(d)] = declared.get(_t(d), 0) + 1
    macros = " ".join(_t(n) for n in _walk(root) if n.type.startswith("preproc"))
    values: dict[str, str] = {}
    edits = []
    for st in body.named_children:
        if st.type != "declaration":
            continue
        ty = st.child_by_field_name("type")
        decls = [c for c in st.named_children if c.type not in ("primitive_type", "sized_type_specifier", "type_identifier",
                                                                 "type_qualifier", "storage_class_specifier", "comment")]
        if ty is None or len(decls) != 1 or decls[0].type != "init_declarator":
            continue
        type_text = re.sub(r"\s+", " ", _t(st)[:_t(st).find(_t(decls[0]))]).strip()
        if not _INTEGER.fullmatch(type_text):
            continue
        name_node, value = decls[0].child_by_field_name("declarator"), decls[0].child_by_field_name("value")
        if name_node is None or name_node.type != "identifier" or value is None:
            continue
        name = _t(name_node)
        if name in changed or declared.get(name, 0) != 1 or name in scalars or re.search(rf"\b{re.escape(name)}\b", macros):
            continue
        nodes = list(_walk(value))
        if any(n.type not in _ARITH for n in nodes if n.is_named) or \
                any(n.type == "binary_expression" and _t(n.child_by_field_name("operator")) not in _OPS for n in nodes):
            continue
        idents = {_t(n) for n in nodes if n.type == "identifier"}
        if not idents <= (scalars - changed) | set(values):
            continue
        text = _t(value)
        for other, v in values.items():                 # an alias of aliases: already their values
            text = re.sub(rf"\b{re.escape(other)}\b", v, text)
        bare = re.sub(r"\bconst\b", "", type_text).strip()
        values[name] = f"({text})" if bare == "int" else f"(({bare})({text}))"
        edits.append((st.start_byte, st.end_byte, ""))
        for n in _walk(body):
            if n.type == "identifier" and _t(n) == name and n.start_byte >= st.end_byte:
                edits.append((n.start_byte, n.end_byte, values[name]))
    if not edits:
        return source
    return _splice(source, edits)
