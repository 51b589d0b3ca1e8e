"""``while`` loops with a counted variable, read as the ``for`` loop they are.

``while (nn >= 1) { blend *= nn; nn--; ... }`` runs ``n`` times once ``nn = n`` is known: the condition
compares a variable that the body changes exactly once, by a step the ``for`` reading counts (``v++``,
``v -= k``, ``v = v * 2`` ...), and whose value before the loop is known -- from a declaration or the last
plain assignment above the loop (``nn = n;``). Further ``&&`` clauses only stop the loop earlier: the count
is then an upper bound, as for a ``for`` loop. A loop whose variable changes in several places, or whose
start or bound is not known, stays unknown.
"""

from __future__ import annotations

import re

_ERRORS = (ValueError, ArithmeticError, RecursionError)


def _updates(body: str, var: str) -> list[str]:
    """The statements of ``body`` that change ``var``: ``var++``, ``--var``, ``var op= e``, ``var = e``."""
    v = re.escape(var)
    pattern = re.compile(
        rf"(?<![\w.])(?:{v}\s*(?:\+\+|--)|(?:\+\+|--)\s*{v}\b|{v}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)[^;]*)"
    )
    return [m.group(0).strip() for m in pattern.finditer(body)]


def _start(var: str, prefix: str, env: dict[str, float], macros: dict[str, str]) -> str | None:
    """The expression ``var`` holds before the loop: its last plain assignment above, else its known value."""
    from components.features.static.loops import Unknown, evaluate

    assigned = list(re.finditer(rf"(?<![\w.]){re.escape(var)}\s*=(?!=)\s*([^;,]+);", prefix))
    for m in reversed(assigned):
        try:
            evaluate(m.group(1), dict(env), macros)
        except (Unknown, *_ERRORS):
            return None  # the last assignment is the value: unknown stays unknown
        return m.group(1).strip()
    return var if var in env else None


def counted_while(
    cond: str, body: str, prefix: str, env: dict[str, float], macros: dict[str, str]
) -> str | None:
    """``init; cond; step`` of the ``for`` loop a ``while (cond) body`` is (module docstring); None if it
    is not one."""
    from components.features.static.loops import _condition

    for var in dict.fromkeys(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\b(?!\s*[.(\[])", cond)):
        if _condition(cond, var) is None:
            continue
        updates = _updates(body, var)
        if len(updates) != 1:
            continue
        start = _start(var, prefix, env, macros)
        if start is None:
            continue
        step = updates[0]
        for name in dict.fromkeys(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\b(?!\s*[.(\[])", step)):
            value = _start(name, prefix, env, macros) if name != var and name not in env else None
            if (
                value is not None and value != name
            ):  # a step set by a plain assignment: inc = blockDim.x * ...
                step = re.sub(rf"(?<![\w.]){re.escape(name)}\b", f"({value})", step)
        if _counts(var, start, cond, step, env, macros):  # else another variable of the condition may
            return f"{var} = {start}; {cond}; {step}"
    return None


def _counts(
    var: str, start: str, cond: str, step: str, env: dict[str, float], macros: dict[str, str]
) -> bool:
    """The ``for`` reading of the loop on ``var`` gives a trip count (start, bound and step known)."""
    from components.features.static.loops import Unknown, _condition, _trips, evaluate

    op, bound = _condition(cond, var) or ("", "")
    try:
        first = evaluate(start, dict(env), macros)
        return _trips(first, op, evaluate(bound, dict(env), macros), step, var, env, macros) is not None
    except (Unknown, *_ERRORS):
        return False


__all__ = ["counted_while"]
