"""Reading the per-element program of a flat kernel (:mod:`.flat`): which arrays are elements,
outputs, gathers or kept as written, the atomic of a full reduction, and BODY rewritten over the
template's names."""
from __future__ import annotations

import re

from ...source import _walk
from ..cutree import _ancestors, _short, _splice, _t
from .flat_shape import _ASM, _ATOMICS, _COOPERATE, _SIZE, _Refuse, _no_comments, _same, _short_name, _strip

_READ_ONLY = {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"}    # loads through an address
_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
_ASSIGN = re.compile(r"(?<![=!<>])=(?!=)|\+\+|--|[-+*/%&|^]=|<<=|>>=")


class _Body:
    """Reads BODY: its elements, outputs, gathers and atomic, and writes it over the template's names.

    An array accessed at the element is moved as vectors only where that is what BODY does to it
    anyway for every element: read (or written) unconditionally at BODY's top level, every access a
    plain read or a plain or compound store, its element a scalar of a power-of-two size. Any other
    array keeps its accesses as written (conditional ones stay conditional: an array shorter than
    the count, or a null pointer BODY never touches, stays untouched)."""

    def __init__(self, stmts, index, pointers, params, dropped, helpers, prelude_names=(), macros=None,
                 by_reference=(), defined=()):
        self.stmts, self.index, self.pointers, self.params = stmts, index, pointers, params
        self.dropped, self.helpers = dropped, helpers
        self.prelude_names = set(prelude_names)
        self.macros = macros or {}
        self.by_reference = {_short_name(n) for n in by_reference}
        self.defined = {_short_name(n) for n in defined}
        self.volatile = {n for n, v in self.params.items() if len(v) > 3 and v[3]}
        self.parent = stmts[0].parent if stmts else None

    def _refuse_cooperation(self, text: str):
        m = _COOPERATE.search(_no_comments(text)) or _ASM.search(_no_comments(text))
        if m:
            raise _Refuse(f"not templated: the per-element code uses {m.group(0)} (threads that cooperate, or asm)")
        for h in self.helpers:
            if re.search(rf"\b{re.escape(h)}\s*\(", text):
                raise _Refuse(f"not templated: the per-element code calls {h}, whose threads cooperate")
        for d in sorted(self.dropped):
            if re.search(rf"\b{re.escape(d)}\b", _no_comments(text)):
                raise _Refuse(f"not templated: the per-element code uses {d}, the kernel's own indexing")

    def _top(self, n):
        """The statement of BODY that holds ``n``."""
        while n is not None and not any(_same(n, s) for s in self.stmts):
            n = n.parent
        return n

    def _unconditional(self, n) -> bool:
        """``n`` runs once for every element: no branch, loop, short circuit or lambda between it
        and BODY's top level."""
        top = self._top(n)
        prev, child, p = None, n, n.parent
        while p is not None and not _same(child, top):
            if p.type in _LOOPS or p.type in ("switch_statement", "lambda_expression", "case_statement"):
                return False
            if p.type in ("if_statement", "conditional_expression") and not _same(child, p.child_by_field_name("condition")):
                return False
            if p.type == "binary_expression" and _t(p.child_by_field_name("operator")) in ("&&", "||", "and", "or") and \
                    _same(child, p.child_by_field_name("right")):
                return False
            if p.type == "call_expression" and _t(p.child_by_field_name("function") or p) in self.macros and \
                    not (child.type == "argument_list" and self._evaluated(p, prev)):
                return False                             # a macro's argument it may not evaluate
            prev, child, p = child, p, p.parent
        return True

    def _evaluated(self, call, arg) -> bool:
        """The function-like macro ``call`` evaluates its argument ``arg`` once, whatever the values:
        its parameter is in the replacement, which has no branch (?:, &&, ||, if)."""
        params, body = self.macros[_t(call.child_by_field_name("function"))]
        args = [c for c in call.child_by_field_name("arguments").named_children if c.type != "comment"]
        k = next((j for j, a in enumerate(args) if _same(a, arg)), None)
        body = _no_comments(body)
        return k is not None and k < len(params) and re.search(rf"\b{re.escape(params[k])}\b", body) is not None \
            and not re.search(r"\?|&&|\|\||\b(if|and|or)\b", body)

    def _leaves(self, n) -> bool:
        """A ``break``/``continue``/``return``/``goto`` that leaves BODY (or the thread)."""
        if n.type == "goto_statement":
            return True
        p = n.parent
        while p is not None and not _same(p, self.parent):
            if p.type == "lambda_expression":
                return False
            if n.type == "break_statement" and (p.type in _LOOPS or p.type == "switch_statement"):
                return False
            if n.type == "continue_statement" and p.type in _LOOPS:
                return False
            p = p.parent
        return True

    def _checks(self, nodes, body_text):
        self._refuse_cooperation(body_text)
        for n in nodes:
            if n.type in ("return_statement", "goto_statement", "break_statement", "continue_statement") and self._leaves(n):
                raise _Refuse(f"not templated: the per-element code leaves early: {_short(_t(n))}")
            if n.type == "declaration" and any(c.type in ("pointer_declarator", "reference_declarator") for c in _walk(n)):
                raise _Refuse(f"not templated: a pointer inside the per-element code: {_short(_t(n))}")
        names = set(self.index.names) | set(self.index.aliases) | self.pointers
        for n in nodes:                  # a name of the element's index or an array declared again inside
            d = None
            if n.type == "init_declarator" and n.parent is not None and any(_same(n.parent, st) for st in self.stmts) \
                    and _t(n.child_by_field_name("declarator")) in self.index.aliases:
                continue                 # the alias's own declaration
            if n.type in ("init_declarator", "parameter_declaration", "optional_parameter_declaration"):
                d = n.child_by_field_name("declarator")
            elif n.type == "declaration":
                d = next((c for c in n.named_children if c.type == "identifier"), None)
            while d is not None and d.type != "identifier":
                d = d.child_by_field_name("declarator")
            if d is not None and _t(d) in names:
                raise _Refuse(f"not templated: the per-element code declares {_t(d)} again")
        scalars = {n for n, (_, is_ptr, *_) in self.params.items() if not is_ptr}
        for n in nodes:                  # the index changed, or a scalar from outside BODY (it would carry over)
            targets = []
            if n.type == "assignment_expression":
                targets = [n.child_by_field_name("left")]
            elif n.type == "update_expression":
                targets = [n.child_by_field_name("argument")]
            elif n.type == "pointer_expression" and _t(n).startswith("&"):
                targets = [n.child_by_field_name("argument")]
            elif n.type == "call_expression" and self._by_reference_call(n):
                targets = list(n.child_by_field_name("arguments").named_children)
            for target in targets:
                while target is not None and target.type in ("field_expression", "subscript_expression",
                                                             "parenthesized_expression"):
                    target = (target.child_by_field_name("argument") if target.type != "parenthesized_expression"
                              else next(iter(target.named_children), None))
                if target is None or target.type != "identifier":
                    continue
                if _t(target) in self.index.names or _t(target) in self.index.aliases:
                    raise _Refuse(f"not templated: the per-element code changes {_t(target)}, the element's index")
                if _t(target) in self.prelude_names or _t(target) in scalars:
                    raise _Refuse(f"not templated: the per-element code changes {_t(target)}, declared before it "
                                  "(its value would carry over from one element to the next)")
        for n in nodes:                  # the template's own names
            if n.type == "identifier" and _t(n).startswith("optiml_"):
                raise _Refuse(f"not templated: the per-element code names {_t(n)}, a name of optiml's templates")
        for n in nodes:                  # an array or an atomic inside a lambda (a copy may be what it writes)
            if n.type == "lambda_expression" and (any(_t(c) in self.pointers for c in _walk(n) if c.type == "identifier")
                                                  or "atomic" in _t(n)):
                raise _Refuse(f"not templated: a lambda in the per-element code uses an array: {_short(_t(n))}")
        for n in nodes:                  # a macro that hides control flow, a store or an array
            if n.type == "identifier" and _t(n) in self.macros:
                body = _no_comments(self.macros[_t(n)][1])
                if re.search(r"\b(return|break|continue|goto)\b", body) or _ASSIGN.search(body) or \
                        any(re.search(rf"\b{re.escape(p)}\b", body) for p in self.pointers) or _COOPERATE.search(body):
                    raise _Refuse(f"not templated: the per-element code uses the macro {_t(n)}, which hides control "
                                  "flow, a store or an array")

    def _kind(self, sub) -> str:
        """How BODY uses ``sub`` (an array at the element): "read", "store" (``=``), "compound"
        (``+=``, ``++``) or "other" (a member or its address taken, an argument by reference...)."""
        child, p = sub, sub.parent
        while p is not None and p.type == "parenthesized_expression":
            child, p = p, p.parent
        if p is None:
            return "other"
        if p.type == "assignment_expression" and _same(p.child_by_field_name("left"), child):
            return "store" if _t(p.child_by_field_name("operator")) == "=" else "compound"
        if p.type == "update_expression":
            return "compound"
        if p.type in ("field_expression", "pointer_expression", "subscript_expression") or \
                (p.type == "unary_expression" and _t(p).startswith("&")):
            return "other"
        if p.type == "argument_list" and (p.parent is None or p.parent.type != "call_expression"
                                          or self._by_reference_call(p.parent)):
            return "other"
        if any(a.type in ("sizeof_expression", "alignof_expression", "decltype") for a in _ancestors(sub)):
            return "other"                               # not an access at all
        return "read"

    def read(self) -> dict:
        if not self.stmts:
            raise _Refuse("not templated: the per-element code is empty")
        whole = self.parent
        start, end = self.stmts[0].start_byte, self.stmts[-1].end_byte
        body_text = whole.text[start - whole.start_byte:end - whole.start_byte].decode("utf-8")
        nodes = [n for s in self.stmts for n in _walk(s)]
        self._checks(nodes, body_text)
        # the atomic (a full reduction): its calls become updates of the template's accumulator
        atomics, atomic, target = [], "", ""
        for n in nodes:
            if n.type != "call_expression" or not _t(n.child_by_field_name("function")).startswith("atomic"):
                continue
            f = _t(n.child_by_field_name("function"))
            if f not in _ATOMICS:
                raise _Refuse(f"not templated: {f} (a full reduction takes atomicAdd, atomicMax or atomicMin)")
            up, whole = n.parent, n
            if up is not None and up.type == "cast_expression" and _t(up.child_by_field_name("type")).strip() == "void":
                up, whole = up.parent, up                   # (void)atomicAdd(...): the cast goes with the call
            if up is None or up.type != "expression_statement":
                raise _Refuse(f"not templated: the result of {f} is used")
            args = [c for c in n.child_by_field_name("arguments").named_children if c.type != "comment"]
            tgt = self._target(args[0]) if len(args) == 2 else None
            if tgt is None:
                raise _Refuse(f"not templated: {f} on {_short(_t(args[0]) if args else '')} (a reduction adds to one "
                              "value: out or &out[0])")
            if atomic and (tgt != target or f != atomic):
                raise _Refuse("not templated: more than one atomic target or operation")
            atomic, target = f, tgt
            atomics.append((whole, args[0], args[1]))
        # every use of a pointer argument: at the element, a gather, or the atomic's target
        at_index, gathers, written = {}, set(), set()
        for n in nodes:
            if n.type != "identifier" or _t(n) not in self.pointers:
                continue
            name, p = _t(n), n.parent
            if any(t.start_byte <= n.start_byte and n.end_byte <= t.end_byte for _, t, _ in atomics):
                continue
            if p is None or p.type != "subscript_expression" or not _same(p.child_by_field_name("argument"), n):
                if p is not None and p.type == "argument_list":
                    raise _Refuse(f"not templated: {name} is passed whole to a function in the per-element code")
                raise _Refuse(f"not templated: {name} is used as a pointer in the per-element code")
            if name == target:
                raise _Refuse(f"not templated: {name}, the atomic's target, is also read or written")
            kind = self._kind(p)
            writes = kind in ("store", "compound") or (kind == "other" and self._writes_through(p))
            if not self._at_index(p):
                if writes:
                    raise _Refuse(f"not templated: a write of {name} at another index than the element's: {_short(_t(p))}")
                gathers.add(name)
                continue
            at_index.setdefault(name, []).append((p, kind))
            if writes:
                written.add(name)
        if gathers & written:
            name = sorted(gathers & written)[0]
            raise _Refuse(f"not templated: {name} is written at the element and read at another index")
        if atomic and written:
            raise _Refuse("not templated: the kernel both writes elements and adds them up atomically")
        # which arrays move as vectors (see the class)
        elems, outs, loaded = set(), set(), set()
        for name, uses in at_index.items():
            ty = self.params[name][0]
            if any(k == "other" for _, k in uses) or _SIZE.get(ty) is None or self.params[name][2] > 1 or \
                    name in self.volatile:
                continue
            if name not in written:
                if any(self._unconditional(p) for p, _ in uses):
                    elems.add(name)
                continue
            definite = [st for st in self.stmts if self._stores(st, name)]
            compound = [p for p, k in uses if k == "compound" and self._unconditional(p)]
            if not definite and not compound:
                continue                          # written only on some paths: kept as written
            outs.add(name)
            if not definite or any(k == "compound" for _, k in uses) or \
                    any(k == "read" and p.start_byte < definite[0].end_byte for p, k in uses):
                loaded.add(name)                  # its old value may be read, or kept where BODY does not write it
        edits = []
        for name, uses in at_index.items():
            if name in elems or name in outs:
                for p, _ in uses:
                    edits.append((p.start_byte, p.end_byte, f"optiml_{'o' if name in outs else 'e'}_{name}"))
        spliced = []
        for call, _, value in atomics:
            inside = [(a - value.start_byte, b - value.start_byte, r) for a, b, r in edits
                      if value.start_byte <= a and b <= value.end_byte]
            v = _splice(_t(value), inside)
            spliced.append((call.start_byte, call.end_byte, f"optiml_acc = optiml_acc + (OPTIML_ACC)({v})" if atomic == "atomicAdd"
                            else f"optiml_acc = {_ATOMICS[atomic]}(optiml_acc, (OPTIML_ACC)({v}))"))
        spliced += [e for e in edits if not any(c.start_byte <= e[0] and e[1] <= c.end_byte for c, _, _ in atomics)]
        body = _splice(body_text, [(a - start, b - start, r) for a, b, r in spliced])
        col = self.stmts[0].start_point[1]             # the body's lines without the kernel's indentation
        body = "\n".join([ln[min(col, len(ln) - len(ln.lstrip(" "))):] for ln in body.split("\n")])
        return dict(body=body, elems=elems, outs=outs, loaded=loaded, atomic=atomic, target=target, written=written)

    def _by_reference_call(self, call) -> bool:
        """``call`` may take an argument by reference: a function of the source that does, or one from
        elsewhere named with a namespace or template arguments (``cuda::std::swap``)."""
        f = call.child_by_field_name("function")
        if f is None:
            return True
        name = _t(f)
        if re.fullmatch(r"static_cast\s*<[^&<>]*>", name):
            return False                                 # a conversion to a value
        return _short_name(name) in self.by_reference or (("::" in name or "<" in name) and
                                                          _short_name(name) not in self.defined)

    def _writes_through(self, sub) -> bool:
        """``sub`` (used other than as a plain value) may be written: a member or element of it
        assigned or incremented, its address taken, or it is passed to a function by reference."""
        child, p = sub, sub.parent
        while p is not None and p.type in ("parenthesized_expression", "field_expression", "subscript_expression"):
            if p.type == "subscript_expression" and not _same(p.child_by_field_name("argument"), child):
                return False                         # sub is inside another subscript's index: read
            child, p = p, p.parent
        if p is None:
            return False
        if p.type == "assignment_expression" and _same(p.child_by_field_name("left"), child):
            return True
        if p.type == "update_expression" or p.type == "pointer_expression" or \
                (p.type == "unary_expression" and _t(p).startswith("&")):
            call = p.parent.parent if p.parent is not None and p.parent.type == "argument_list" else None
            f = call.child_by_field_name("function") if call is not None else None
            return not (f is not None and _t(f) in _READ_ONLY)
        if p.type == "argument_list":
            return p.parent is None or p.parent.type != "call_expression" or self._by_reference_call(p.parent)
        return False

    def _stores(self, st, name: str) -> bool:
        """``st`` stores ``name`` at the element on every path through it (``y[i] = E``, a block
        that does, an if/else whose both branches do)."""
        if st is None:
            return False
        if st.type == "expression_statement" and st.named_children:
            e = st.named_children[0]
            if e.type == "assignment_expression" and _t(e.child_by_field_name("operator")) == "=":
                left = e.child_by_field_name("left")
                return left.type == "subscript_expression" and _t(left.child_by_field_name("argument")) == name \
                    and self._at_index(left)
            return False
        if st.type == "compound_statement":
            return any(self._stores(c, name) for c in st.named_children)
        if st.type == "if_statement":
            alt = st.child_by_field_name("alternative")
            if alt is None:
                return False
            if alt.type == "else_clause":
                alt = next((c for c in alt.named_children if c.type != "comment"), None)
            return self._stores(st.child_by_field_name("consequence"), name) and self._stores(alt, name)
        return False

    def _at_index(self, sub) -> bool:
        idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
        if idx is None:
            return False
        return _strip(_t(idx).strip()[1:-1] if _t(idx).strip().startswith("[") else _t(idx)) in self.index.forms

    def _target(self, node) -> str | None:
        t = _strip(_t(node))
        m = re.fullmatch(r"(\w+)|&(\w+)\[0\]|&\((\w+)\[0\]\)|(\w+)\+0", t)
        if not m:
            return None
        name = next(g for g in m.groups() if g)
        return name if name in self.pointers else None
