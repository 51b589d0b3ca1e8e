"""Case selectors: ``if (Case == 1) {...} if (Case == 2) {...}`` on a per-thread value.

A kernel that dispatches each thread to one of several cases (gpuFLOPBench ``contract``: ``int Case =
(tid % Y) / nChanels + 1;`` then 18 ``if (Case == k)`` blocks, each a loop nest) runs one case per
thread, yet a static count runs every case's loops for every thread: 18x the work. A **case
selector** is a kernel local defined once from a thread or block index (directly or through other
such locals), never assigned again, and compared for equality with at least two different
constants in ``if`` conditions of the kernel. Each thread passes at most one of those ``if``s; with
the selector's values taken evenly, a share ``1 / k`` of the threads passes each of the ``k``
(``guards.guarded_loops`` scales the loops under each by it).
"""

from __future__ import annotations

import re

from components.features.static.loops import _LOCAL_RE, _close

_IF_EQ_RE = re.compile(r"\bif\s*\(\s*\(?\s*([A-Za-z_]\w*)\s*==\s*([0-9]+|[A-Z_][A-Z0-9_]*)\s*\)?\s*\)")
_INDEX_RE = re.compile(r"\b(?:threadIdx|blockIdx)\s*\.\s*[xyz]\b")


def _writes(body: str, name: str) -> int:
    """How often ``name`` is written in ``body``: ``=`` (not ``==``), compound assignments, ``++``, ``--``."""
    n = re.escape(name)
    return len(
        re.findall(
            rf"(?<![\w.>])(?:{n}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|{n}\s*(?:\+\+|--)|(?:\+\+|--)\s*{n}\b)", body
        )
    )


def thread_varying(body: str) -> set[str]:
    """Locals of ``body`` declared with a value that reads a thread or block index, or another such local,
    in textual order, and written only by their declaration (loop variables and accumulators are left out)."""
    varying: set[str] = set()
    for m in _LOCAL_RE.finditer(body):
        name, expr = m.group(1), m.group(2)
        reads = _INDEX_RE.search(expr) or any(re.search(rf"\b{re.escape(v)}\b", expr) for v in varying)
        if reads and _writes(body, name) == 1:
            varying.add(name)
    return varying


def case_shares(text: str, mask: bytearray, lo: int, hi: int) -> dict[str, float]:
    """``{selector: 1 / k}`` for the case selectors of the kernel body ``text[lo + 1 : hi]`` (see the module
    docstring): ``k`` the number of distinct constants it is compared with in ``if`` conditions."""
    body = text[lo + 1 : hi]
    varying = thread_varying(body)
    values: dict[str, set[str]] = {}
    for m in _IF_EQ_RE.finditer(text, lo + 1, hi):
        paren = text.index("(", m.start())
        if not mask[m.start()] or _close(text, mask, paren, "(", ")") != m.end() - 1:
            continue
        if m.group(1) in varying:
            values.setdefault(m.group(1), set()).add(m.group(2))
    return {name: 1.0 / len(consts) for name, consts in values.items() if len(consts) >= 2}


__all__ = ["case_shares", "thread_varying"]
