"""Host values set after their declaration: plain assignments and constant integer arrays.

gpuFLOPBench programs often declare first and assign later (``int n1, n2, i; ... n2 = 15000;``), assign in a
condition (``if ((total_iterations = atoi(argv[3])) <= 0)``), or take a size from a constant table inside a
host loop (``const int dim[] = {256, 1024}; for (int i = 0; ...) { const int n = dim[i]; ...``). The
declaration-with-initialiser reading of static.host_env sees none of these. Here:

- ``assignment_events``: each ``name = expr`` whose ``name`` the text declares as an integer (a declaration
  list ``int a, b;`` included), ``expr`` running to the ``;``, ``,`` or closing ``)`` at its own depth;
- ``array_events``: each element of a braced integer array initialiser, as ``name[k]`` (static.loops
  evaluates ``name[i]`` by looking ``name[<value of i>]`` up), so a host loop's first pass (its variable's
  initial value, the same textual reading) indexes its first entry.

As in the rest of the host reading, scopes and control flow are ignored: events apply in textual order and
an assignment that does not evaluate makes its variable unknown, never guessed.
"""

from __future__ import annotations

import re

from components.common.braces import closing_brace
from components.features.static.source import code_mask
from components.features.static.templates import split_args

_INT = (
    r"(?:const\s+)?(?:static\s+)?(?:unsigned\s+|signed\s+)?"
    r"(?:int|long|long\s+long|size_t|short|unsigned|int64_t|int32_t|uint32_t|uint64_t|uint)"
)
# a declaration list: int a, b = 3, c;  (names with or without initialisers)
_DECL_RE = re.compile(rf"\b{_INT}\s+([A-Za-z_][^;(){{}}]*);")
# name = expr, or a compound name op= expr (not ==, <=, >=, !=; not p.x, p->x or a[i])
_ASSIGN_RE = re.compile(r"(?<![\w.>\]])([A-Za-z_]\w*)\s*(\*|/|\+|-|%|<<|>>|&|\||\^)?=(?!=)")
_ARRAY_RE = re.compile(rf"\b{_INT}\s+([A-Za-z_]\w*)\s*\[[^\]]*\]\s*=\s*\{{([^{{}};]*)\}}\s*;")


def declared_integers(text: str) -> set[str]:
    """Names the text declares with an integer type (scalar ones: arrays and pointers left out)."""
    names: set[str] = set()
    for m in _DECL_RE.finditer(text):
        for part in split_args(m.group(1)):
            head = part.split("=")[0].strip()
            if re.fullmatch(r"[A-Za-z_]\w*", head):
                names.add(head)
    return names


def _expression_end(text: str, mask: bytearray, start: int) -> int:
    """Where the right-hand side starting at ``start`` ends: ``;`` or ``,`` at its depth, or the ``)`` that
    closes a parenthesis opened before it."""
    depth, j = 0, start
    while j < len(text):
        c = text[j]
        if mask[j]:
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    return j
                depth -= 1
            elif c in ";," and depth == 0:
                return j
        j += 1
    return j


def assignment_events(text: str) -> list[tuple[int, str, str]]:
    """(position, name, expression) of each plain assignment to a declared integer, in textual order."""
    declared = declared_integers(text)
    if not declared:
        return []
    mask = code_mask(text)
    events = []
    for m in _ASSIGN_RE.finditer(text):
        name, op = m.group(1), m.group(2) or ""
        if name not in declared or not mask[m.start()] or _after_type(text, m.start()):
            continue
        if not _on_every_path(text, mask, m.start()):
            continue
        end = _expression_end(text, mask, m.end())
        expr = text[m.end() : end].strip()
        if expr:
            events.append((m.start(), name, f"{name} {op} ({expr})" if op else expr))
    return events


# a local handed to a call by address: `parseCommandline(argc, argv, &size)`, `cudaMemcpy(&n, ...)`
_ADDRESS_RE = re.compile(r"[(,]\s*&\s*([A-Za-z_]\w*)\s*(?=[,)])")
UNKNOWN = "__kc_unknown__"  # an expression no reading evaluates: the variable's value is unknown from there


def address_events(text: str) -> list[tuple[int, str, str]]:
    """(position, name, ``UNKNOWN``) of each declared integer passed to a call by address: the callee may
    write it, and the textual reading does not follow it there, so its value is unknown after the call
    (never the initialiser's, which the program overwrote: gaussian's ``int size = -1;``)."""
    declared = declared_integers(text)
    mask = code_mask(text)
    return [
        (m.start(), m.group(1), UNKNOWN)
        for m in _ADDRESS_RE.finditer(text)
        if m.group(1) in declared and mask[m.start()]
    ]


def _on_every_path(text: str, mask: bytearray, pos: int) -> bool:
    """True when the statement at ``pos`` runs on the way to the end of ``text`` (the launch site): each block
    holding it that closes before the end (an ``if (...) { c = ...; }``, another function's body) is an
    ``if`` whose condition holds (``if (argc == 3)`` with the recorded command line's count), and it is
    not the lone body of an ``if``/``else``/loop (``if (n < 256) n = 256;``). An assignment inside a
    control statement's parentheses (``if ((n = atoi(argv[1])) <= 0)``, a ``for`` initialiser) runs."""
    if not all(_taken(text, mask, b) for b in _open_blocks(text, mask, pos)):
        return False
    depth, j, start = 0, pos - 1, -1
    while j >= 0:
        c = text[j]
        if mask[j]:
            if c == ")":
                depth += 1
            elif c == "(":
                if depth == 0:  # inside a header's or a call's parentheses: it runs with them, except
                    # a for-loop's step, which runs after the first pass (the one this reading follows)
                    step = re.search(r"\bfor\s*$", text[max(0, j - 8) : j]) and text[j:pos].count(";") >= 2
                    return not step
                depth -= 1
            elif c == ";" and depth == 0 and start < 0:
                start = j  # the statement's start, unless a header's '(' is further back
            elif c in "{}" and depth == 0:
                break
        j -= 1
    statement = text[max(start, j) + 1 : pos].strip()
    return not re.match(r"(?:else\b|(?:if|for|while|switch)\s*\(|case\b|default\b)", statement)


def _after_type(text: str, pos: int) -> bool:
    """True when ``name =`` at ``pos`` is a declaration's first initialiser (read as a local already): the
    word before it a type name (or a pointer's ``*``)."""
    before = text[max(0, pos - 80) : pos].rstrip()
    return bool(re.search(rf"(?:\b{_INT}|\bauto)$", before)) or before.endswith(("*", "&"))


def _open_blocks(text: str, mask: bytearray, pos: int) -> list[int]:
    """The '{' of every block that holds ``pos``, innermost first."""
    out, depth = [], 0
    for j in range(pos - 1, -1, -1):
        if mask[j] and text[j] == "}":
            depth += 1
        elif mask[j] and text[j] == "{":
            if depth == 0:
                out.append(j)
            else:
                depth -= 1
    return out


def _taken(text: str, mask: bytearray, brace: int) -> bool:
    """True when the block opened at ``brace`` is still open at the end of ``text``, is the body of an
    ``if`` whose condition evaluates true, or the ``else`` of one whose condition evaluates false
    (literals and macros only: the command line's values are literals by then)."""
    if closing_brace(text, brace, mask) is None:
        return True
    head = text[:brace].rstrip()
    if re.search(r"\belse$", head):  # else { ... }: the if's block closes just before it
        close = len(head[:-4].rstrip()) - 1
        if close < 0 or text[close] != "}":
            return False
        opening = _opening(text, mask, close)
        condition = None if opening is None else _if_condition(text, mask, opening)
        return condition is False
    return _if_condition(text, mask, brace) is True


def _opening(text: str, mask: bytearray, close: int) -> int | None:
    depth = 0
    for k in range(close, -1, -1):
        if mask[k]:
            depth += (text[k] == "}") - (text[k] == "{")
            if depth == 0:
                return k
    return None


def _if_condition(text: str, mask: bytearray, brace: int) -> bool | None:
    """The value of the condition of the ``if (...)`` whose block opens at ``brace``; None when it is no
    ``if`` block or its condition does not evaluate."""
    from components.features.static.loops import Unknown, _close, evaluate

    j = brace - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    if j < 0 or text[j] != ")":
        return None
    depth = 0
    for k in range(j, -1, -1):
        depth += (text[k] == ")") - (text[k] == "(")
        if depth == 0:
            break
    if not re.search(r"\bif\s*$", text[max(0, k - 8) : k]) or _close(text, mask, k, "(", ")") != j:
        return None
    try:
        return bool(evaluate(text[k + 1 : j], {}, {}))
    except (Unknown, ValueError, ArithmeticError, RecursionError):
        return None


def array_events(text: str) -> list[tuple[int, str, str]]:
    """(position, ``name[k]``, expression) of each element of a braced integer array initialiser."""
    mask = code_mask(text)
    events = []
    for m in _ARRAY_RE.finditer(text):
        if mask[m.start()]:
            events += [
                (m.start(), f"{m.group(1)}[{k}]", e) for k, e in enumerate(split_args(m.group(2))) if e
            ]
    return events


__all__ = ["UNKNOWN", "address_events", "array_events", "assignment_events", "declared_integers"]
