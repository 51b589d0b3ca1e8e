"""Two C expression forms the trip-count evaluator (static.loops) reads by rewriting the text first.

- Function-like macros: ``#define MIN(a, b) ((a) <= (b) ? (a) : (b))`` (gpuFLOPBench ``hotspot``:
  ``int iter = MIN(num_iterations, total_iterations - t);`` is the kernel's loop bound). ``file_macros``
  keeps them under the key ``MIN(a,b)``; ``expand_calls`` replaces each call by the body, every parameter
  by its parenthesised argument.
- Conditionals anywhere and nested: ``c ? a : b`` becomes Python's ``(a) if (c) else (b)`` inside each
  parenthesised group, innermost first, so a macro's ``((a) <= (b) ? (a) : (b))`` reads.
"""

from __future__ import annotations

import re

from components.features.static.templates import split_args

_FUNCTION_DEFINE_RE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^()]*)\)[ \t]*([^\n]*?)[ \t]*$", re.M
)
MAX_EXPANSIONS = 16


def function_macros(text: str) -> dict[str, str]:
    """Function-like macros of ``text`` keyed ``NAME(p1,p2)`` (parameters without spaces) -> body."""
    out: dict[str, str] = {}
    for name, params, body in _FUNCTION_DEFINE_RE.findall(text):
        body = re.sub(r"/\*.*?(\*/|$)", " ", body.split("//")[0]).strip()
        if body and not body.endswith("\\"):  # multi-line macros are statements, not expressions
            out[f"{name}({','.join(p.strip() for p in params.split(','))})"] = body
    return out


def expand_calls(expr: str, macros: dict[str, str]) -> str:
    """``expr`` with the calls of function-like macros in ``macros`` replaced by their bodies."""
    heads = {k.split("(", 1)[0]: k for k in macros if k.endswith(")") and "(" in k}
    if not heads:
        return expr
    call = re.compile(r"\b(" + "|".join(re.escape(h) for h in heads) + r")\s*\(")
    for _ in range(MAX_EXPANSIONS):
        m = call.search(expr)
        if m is None:
            return expr
        close = _closing(expr, m.end() - 1)
        if close is None:
            return expr
        key = heads[m.group(1)]
        params = [p for p in key[len(m.group(1)) + 1 : -1].split(",") if p]
        args = split_args(expr[m.end() : close])
        body = macros[key]
        if len(args) == len(params) and params:
            names = re.compile(r"\b(" + "|".join(re.escape(p) for p in params) + r")\b")
            bound = dict(zip(params, args, strict=True))
            body = names.sub(lambda n, b=bound: f"({b[n.group(1)]})", body)
        expr = f"{expr[: m.start()]}({body}){expr[close + 1 :]}"
    return expr


def _closing(text: str, opening: int) -> int | None:
    depth = 0
    for j in range(opening, len(text)):
        depth += text[j] == "("
        depth -= text[j] == ")"
        if depth == 0:
            return j
    return None


def conditionals(expr: str) -> str:
    """``expr`` with every ``c ? a : b`` as ``(a) if (c) else (b)``, parenthesised groups first."""
    if "?" not in expr:
        return expr
    out, j = [], 0
    while j < len(expr):
        if expr[j] == "(":
            close = _closing(expr, j)
            if close is None:
                return expr
            out.append("(" + conditionals(expr[j + 1 : close]) + ")")
            j = close + 1
        else:
            out.append(expr[j])
            j += 1
    flat = "".join(out)
    question = _top_level(flat, "?")
    if question is None:
        return flat
    test, rest = flat[:question], flat[question + 1 :]
    colon = _top_level(rest, ":", nested="?")
    if colon is None:
        return flat
    then, other = rest[:colon], rest[colon + 1 :]
    return f"({conditionals(then)}) if ({test}) else ({conditionals(other)})"


def _top_level(text: str, char: str, nested: str = "") -> int | None:
    """Index of the first ``char`` outside parentheses (one ``nested`` opener before it skips one)."""
    depth, pending = 0, 0
    for j, c in enumerate(text):
        depth += c == "("
        depth -= c == ")"
        if depth or text[j : j + 2] == "::" or text[max(0, j - 1) : j + 1] == "::":
            continue
        if nested and c == nested:
            pending += 1
        elif c == char:
            if pending == 0:
                return j
            pending -= 1
    return None


__all__ = ["conditionals", "expand_calls", "function_macros"]
