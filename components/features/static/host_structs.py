"""Struct values of host code: what a kernel's struct argument holds (``params p = {128, 3, 480, ...}``).

A program often packs its sizes into a struct and passes it by value (gpuFLOPBench ``car``: ``const params
p`` whose ``p.kernel_size`` bounds the kernel's loops). Plain C structs -- ``struct S { int a; int b, c; };``
or ``typedef struct { ... } S;``, no constructors -- give their fields in order; an aggregate initialiser
``S v = {1, 2, 3};`` (or ``S v{...}``) then gives ``v.a``, ``v.b`` ... and a member assignment
``v.a = expr;`` one of them. Values are named ``v__a`` in an evaluation environment (static.loops reads
``v.a`` so).
"""

from __future__ import annotations

import re

from components.features.static.source import code_mask
from components.features.static.templates import split_args

_STRUCT_RE = re.compile(r"\b(typedef\s+)?struct\s+([A-Za-z_]\w*)?\s*\{([^{}]*)\}\s*([A-Za-z_]\w*)?\s*;")
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


def struct_events(text: str, structs: dict[str, list[str]]) -> list[tuple[int, str, str]]:
    """(position, ``v__field``, expression) for each struct value ``text`` sets, in textual order."""
    events: list[tuple[int, str, str]] = []
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


__all__ = ["struct_events", "struct_fields"]
