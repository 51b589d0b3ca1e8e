"""Struct values of host code: what a kernel's struct argument holds (``params p = {128, 3, 480, ...}``).

A program often packs its sizes into a struct and passes it by value (gpuFLOPBench ``car``: ``const params
p`` whose ``p.kernel_size`` bounds the kernel's loops). Plain C structs -- ``struct S { int a; int b, c; };``
or ``typedef struct { ... } S;``, no constructors -- give their fields in order; an aggregate initialiser
``S v = {1, 2, 3};`` (or ``S v{...}``) then gives ``v.a``, ``v.b`` ... and a member assignment
``v.a = expr;`` one of them. A struct with a constructor (``Params p(argc, argv);``) gets what the
constructor assigns (``constructor_events``). Values are named ``v__a`` in an evaluation environment
(static.loops reads ``v.a`` so).
"""

from __future__ import annotations

import re

from components.features.static.source import code_mask
from components.features.static.templates import split_args

_STRUCT_RE = re.compile(r"\b(typedef\s+)?struct\s+([A-Za-z_]\w*)?\s*\{([^{}]*)\}\s*([A-Za-z_]\w*)?\s*;")
_TYPE_RE = re.compile(r"\b(?:struct|class)\s+([A-Za-z_]\w*)\s*(?::[^{;]*)?\{")
_ASSIGN_RE = re.compile(r"((?:(?<![\w.>])[A-Za-z_]\w*\s*=(?!=)\s*)+)([^;]+);")  # a = b = expr;
_MEMBER_SET_RE = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)\s*=(?!=)\s*([^;]+);")


def struct_fields(text: str) -> dict[str, list[str]]:
    """Plain structs of ``text``: type name (and typedef name) -> field names in declaration order."""
    mask = code_mask(text)
    out: dict[str, list[str]] = {}
    for m in _STRUCT_RE.finditer(text):
        if not mask[m.start()]:
            continue
        body = "".join(c if mask[i] else " " for i, c in enumerate(m.group(3), m.start(3)))
        fields: list[str] = []
        for decl in body.split(";"):
            head = decl.split("=")[0].strip()
            if not head or "(" in head:
                continue
            first, *rest = split_args(head)
            names = [re.findall(r"[A-Za-z_]\w*", first.split("[")[0])[-1:]]
            names += [re.findall(r"[A-Za-z_]\w*", r.split("[")[0])[-1:] for r in rest]
            fields += [n[0] for n in names if n]
        for name in (m.group(2), m.group(4) if m.group(1) else None):
            if name:
                out[name] = fields
    return out


def constructor_events(text: str) -> list[tuple[int, str, str]]:
    """(position, ``v__field``, expression) for what a struct's constructor sets in each instance
    ``S v(...);`` of it: the constructor body's assignments (``a = b = 3;`` sets both) in order, the other
    fields they read taken as ``v``'s. Scopes and control flow are ignored, as in the rest of the host
    reading (static.host_options blanks the getopt cases the command line does not give)."""
    from components.features.static.loops import _close

    mask = code_mask(text)
    events: list[tuple[int, str, str]] = []
    for m in _TYPE_RE.finditer(text):
        if not mask[m.start()]:
            continue
        name, brace = m.group(1), m.end() - 1
        close = _close(text, mask, brace, "{", "}")
        ctor = re.compile(rf"\b{re.escape(name)}\s*\([^()]*\)\s*(?::[^{{;]*)?\{{").search(text, brace, close)
        if ctor is None:
            continue
        body = text[ctor.end() : _close(text, mask, ctor.end() - 1, "{", "}")]
        sets = [(re.findall(r"[A-Za-z_]\w*", a.group(1)), a.group(2)) for a in _ASSIGN_RE.finditer(body)]
        fields = {n for names, _ in sets for n in names}
        instance = re.compile(rf"\b{re.escape(name)}\s+([A-Za-z_]\w*)\s*[({{;]")
        for inst in instance.finditer(text):
            if not mask[inst.start()] or brace <= inst.start() <= close:
                continue
            var = inst.group(1)
            for names, expr in sets:
                events += [(inst.start(), f"{var}__{n}", _owned(expr, fields, var)) for n in names]
    return events


def _owned(expr: str, fields: set[str], var: str) -> str:
    """``expr`` with the struct's own fields read as ``var``'s (``in_i`` -> ``p.in_i``)."""
    word = r"(?<![\w.])([A-Za-z_]\w*)\b"
    return re.sub(word, lambda f: f"{var}.{f.group(1)}" if f.group(1) in fields else f.group(1), expr)


def struct_events(text: str, structs: dict[str, list[str]]) -> list[tuple[int, str, str]]:
    """(position, ``v__field``, expression) for each struct value ``text`` sets, in textual order."""
    events: list[tuple[int, str, str]] = constructor_events(text)
    if structs:
        types = "|".join(re.escape(t) for t in structs)
        init = re.compile(
            rf"\b(?:struct\s+)?(?:const\s+)?({types})\s+([A-Za-z_]\w*)\s*=?\s*\{{([^{{}};]*)\}}\s*;"
        )
        for m in init.finditer(text):
            for field, expr in zip(structs[m.group(1)], split_args(m.group(3)), strict=False):
                events.append((m.start(), f"{m.group(2)}__{field}", expr))
    for m in _MEMBER_SET_RE.finditer(text):
        events.append((m.start(), f"{m.group(1)}__{m.group(2)}", m.group(3)))
    return sorted(events, key=lambda e: e[0])


__all__ = ["constructor_events", "struct_events", "struct_fields"]
