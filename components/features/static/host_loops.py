"""Host values a finished ``for`` loop leaves: its step clause applied once per pass.

gpuFLOPBench ``fwt`` launches a kernel after a host loop that walks its sizes down:
``for (; log2N > ELEMENTARY_LOG2SIZE; log2N -= 2, N >>= 2, M <<= 2) { ... }`` then
``fwtBatch1Kernel<<<M, N / 4>>>(..., log2N)``. The textual host reading (static.host_assign) skips a
``for`` step (it follows the loop's first pass), so the launch saw ``log2N`` = 23 where the loop
leaves 11: 374x the kernel's FLOPs. ``loop_exit_events`` gives, at the end of each host ``for`` loop
that closes before the launch and runs on every path to it, each step target's value after the loop:
the passes are ``T = ceil((bound - v) / c)`` for a loop variable ``v`` that counts up or down by ``c``
to a bound (``v < B``, ``v <= B``, ``v > B``, ``v >= B``), and each target of the step moves ``T``
times (``+=``/``-=`` by ``T * c``, ``<<=``/``>>=`` by ``T * c`` bits). A step the reading does not
follow (``*=``, a call) makes its target unknown after the loop, never guessed.
"""

from __future__ import annotations

import re

from components.features.static.host_assign import _on_every_path
from components.features.static.source import code_mask

_FOR_RE = re.compile(r"\bfor\s*\(")
_STEP_RE = re.compile(r"^([A-Za-z_]\w*)\s*(\+|-|<<|>>)=\s*(.+)$")
_INCR_RE = re.compile(r"^(?:([A-Za-z_]\w*)\s*(\+\+|--)|(\+\+|--)\s*([A-Za-z_]\w*))$")
_WRITE_RE = re.compile(
    r"([A-Za-z_]\w*)\s*(?:(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)|(?:\+\+|--)\s*([A-Za-z_]\w*)"
)
_UNKNOWN = "__value_after_loop__"  # evaluates as an unknown name: the target is dropped


def _commas(step: str) -> list[str]:
    """The comma-separated parts of a step clause at parenthesis depth 0 (``<<`` is no bracket here)."""
    parts, depth, cur = [], 0, ""
    for ch in step:
        depth += (ch in "([") - (ch in ")]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in (*parts, cur) if p.strip()]


def _steps(step: str) -> list[tuple[str, str, str]] | None:
    """(target, operator, amount) of each comma-separated part of a step clause; None if one does not read."""
    out = []
    for part in _commas(step):
        part = part.strip()
        inc = _INCR_RE.match(part)
        if inc:
            name, op = inc.group(1) or inc.group(4), inc.group(2) or inc.group(3)
            out.append((name, op[0], "1"))
            continue
        m = _STEP_RE.match(part)
        if m is None:
            return None
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


def _passes(cond: str, steps: list[tuple[str, str, str]]) -> str | None:
    """The loop's pass count as a C expression over the values before it; None when it does not read."""
    from components.features.static.loops import _condition

    for var, op, amount in steps:
        bound = _condition(cond, var) if op in "+-" else None
        if bound is None:
            continue
        cmp, b = bound
        up = cmp in ("<", "<=")
        if (op == "+") != up:
            return None
        limit = f"(({b}) + 1)" if cmp == "<=" else f"(({b}) - 1)" if cmp == ">=" else f"({b})"
        span = f"({limit} - {var})" if up else f"({var} - {limit})"
        test = f"{var} < {limit}" if up else f"{var} > {limit}"
        return f"({test} ? ({span} + ({amount}) - 1) / ({amount}) : 0)"
    return None


def loop_exit_events(text: str) -> list[tuple[int, str, str]]:
    """(position after the loop, name, expression) for each step target of each finished host ``for`` loop."""
    from components.features.static.loops import _close, _split_semicolons, _statement_end

    mask = code_mask(text)
    events = []
    for m in _FOR_RE.finditer(text):
        if not mask[m.start()]:
            continue
        paren = m.end() - 1
        close = _close(text, mask, paren, "(", ")")
        parts = _split_semicolons(text[paren + 1 : close])
        if len(parts) != 3 or not parts[2].strip():
            continue
        end = _statement_end(text, mask, close + 1, len(text))
        if end >= len(text) - 1 or not _on_every_path(text, mask, m.start()):
            continue  # the launch sits inside the loop, or the loop may not run
        steps = _steps(parts[2])
        passes = _passes(parts[1], steps) if steps else None
        if steps is None or passes is None:
            events += [(end, a or b, _UNKNOWN) for a, b in _WRITE_RE.findall(parts[2])]
            continue
        # every target from the values before the loop: the pass count reads the loop variable, so it goes
        # last; a temporary keeps the count
        count = f"__passes_{end}"
        events.append((end, count, passes))
        for name, op, amount in steps:
            shift = {"+": "+", "-": "-", "<": "<<", ">": ">>"}[op[0]]
            events.append((end, name, f"{name} {shift} (({amount}) * {count})"))
    return events


__all__ = ["loop_exit_events"]
