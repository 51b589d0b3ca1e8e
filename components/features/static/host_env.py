"""What host code makes known at one point of a CUDA/HIP file: the integer values a launch site sees.

A program often reads its arguments in ``main`` and hands them to a host helper that launches the
kernel (``conv3D<float>(N, C, M, W, H, K, repeat)`` -> ``conv3d_s1<<<...>>>(..., C, M, K, ...)``). The
helper is defined above ``main``, so a plain textual reading of the locals before the launch never sees
them. ``env_at`` follows the chain: the host function that encloses the point, the first call of that
function elsewhere in the file (its arguments evaluated, recursively, where that call stands), its
parameters bound to those values, then the function's own integer locals up to the point. A deliberately
simple reading (scopes and control flow ignored; the first call site wins): what it cannot evaluate stays
unknown, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.features.static.enums import enum_types
from components.features.static.loops import _LOCAL_RE, Unknown, _close, _code, evaluate
from components.features.static.source import code_mask
from components.features.static.templates import split_args

MAX_DEPTH = 4  # helpers calling helpers: beyond this the values stay unknown
# A function definition's head: name, the parameter list (parentheses in it balanced, one level deep: a
# function-pointer parameter), then '{'. Balanced, so that a function-like macro's ``(ans) ans`` can not
# run on into the next definition's parameters and take its place.
_DEF_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(((?:[^;{}()]|\([^;{}()]*\))*?)\)\s*(?:const\s*)?\{", re.S)
_NOT_FUNCTIONS = frozenset({"if", "for", "while", "switch", "catch", "return", "sizeof", "do"})
_ERRORS = (Unknown, ValueError, OverflowError, ZeroDivisionError, RecursionError, SyntaxError)


@dataclass(frozen=True)
class HostFunction:
    name: str
    params: tuple[str, ...]
    head: int  # where the name starts
    body: int  # the body's '{'
    end: int  # the body's matching '}'


def host_functions(text: str) -> list[HostFunction]:
    """Top-level function definitions of a file (brace depth 0 at their head), in textual order."""
    mask = code_mask(text)
    out: list[HostFunction] = []
    done = 0
    for m in _DEF_RE.finditer(text):
        if m.start() < done or not mask[m.start()] or m.group(1) in _NOT_FUNCTIONS:
            continue
        brace = m.end() - 1
        end = _close(text, mask, brace, "{", "}")
        names = []
        for param in split_args(m.group(2)):
            words = re.findall(r"[A-Za-z_]\w*", param.split("=")[0])
            names.append(words[-1] if words else "")
        out.append(HostFunction(m.group(1), tuple(names), m.start(), brace, end))
        done = end  # nested definitions (lambdas, local structs) are not host helpers
    return out


def _call_site(text: str, mask: bytearray, fn: HostFunction) -> int | None:
    """The '(' of the first call of ``fn`` outside its own definition (template arguments allowed).
    A declaration is no call: ``long reference(const int repeat, ...);`` (a type word before the name)."""
    pattern = re.compile(r"(?<![\w.>])" + re.escape(fn.name) + r"\s*(?:<[^;(){}]*?>)?\s*\(")
    for m in pattern.finditer(text):
        if not mask[m.start()] or fn.head <= m.start() <= fn.end or _declared(text, mask, m.start()):
            continue
        return m.end() - 1
    return None


def _declared(text: str, mask: bytearray, at: int) -> bool:
    """Whether the name at ``at`` is declared there, not called: a type word (``long f(``), or a type
    word and ``*``/``&`` (``float *f(``), right before it, comments skipped."""
    lo = max(0, at - 200)
    before = "".join(c if mask[lo + i] else " " for i, c in enumerate(text[lo:at]))
    m = re.search(r"(?:^|[^\w\s])?\s*\b([A-Za-z_]\w*)\s*[*&]*\s*$", before)
    if m is None or m.group(1) in _CALL_WORDS:
        return False
    if not before.rstrip().endswith(("*", "&")):
        return True
    # `a * f(x)` is a product; `float *f(` a declaration: a type word leads the statement
    return re.search(r"(?:^|[;{}])\s*(?:const\s+)?[A-Za-z_][\w:<>]*\s*[*&]+\s*$", before) is not None


_CALL_WORDS = frozenset({"return", "else", "case", "do", "throw", "co_return", "new", "delete", "goto"})


def host_locals(
    text: str,
    macros: dict[str, str],
    env: dict[str, float] | None = None,
    structs: dict[str, list[str]] | None = None,
    assignments: bool = False,
) -> dict[str, float]:
    """Integer locals of host code in textual order (scopes ignored), those that evaluate (with ``env``:
    values known before the text, e.g. a host helper's parameters), and the fields of plain structs it
    sets (``p__k`` for ``p.k``; ``structs``, static.host_structs, default: those ``text`` defines). With
    ``assignments``, also plain assignments to declared integers and constant arrays' elements
    (static.host_assign)."""
    from components.features.static.host_assign import address_events, array_events, assignment_events
    from components.features.static.host_loops import loop_exit_events
    from components.features.static.host_structs import struct_events, struct_fields

    env = dict(env or {})
    types = "|".join(re.escape(t) for t in enum_types(text))  # an enum local holds its enumerator's value
    pattern = re.compile(_LOCAL_RE.pattern.replace("|auto)", f"|auto{'|' + types if types else ''})"))
    # int a = 1, b = 2;  a's initialiser is its first expression (b's is an assignment event)
    events = [(m.start(), m.group(1), (split_args(m.group(2)) or [""])[0]) for m in pattern.finditer(text)]
    events += struct_events(text, struct_fields(text) if structs is None else structs)
    if assignments:
        events += assignment_events(text) + array_events(text) + loop_exit_events(text) + address_events(text)
    for _, name, expr in sorted(events, key=lambda e: e[0]):
        try:
            env[name] = evaluate(expr, dict(env), macros)
        except (Unknown, ValueError, OverflowError, ZeroDivisionError, RecursionError):
            env.pop(name, None)
    return env


def members(env: dict[str, float], expr: str, name: str) -> dict[str, float]:
    """The struct fields ``env`` holds for the variable ``expr``, renamed as fields of ``name``."""
    expr = expr.strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", expr):
        return {}
    return {f"{name}__{k[len(expr) + 2 :]}": v for k, v in env.items() if k.startswith(expr + "__")}


def env_at(text: str, pos: int, macros: dict[str, str], depth: int = 0) -> dict[str, float]:
    """Integer values known at ``pos`` of host ``text`` (see the module docstring)."""
    from components.features.static.host_structs import struct_fields

    structs = struct_fields(text)
    env = host_locals(
        text[:pos], macros, structs=structs, assignments=True
    )  # the plain textual reading: locals above
    fn = next((f for f in host_functions(text) if f.body < pos < f.end), None)
    if fn is None or depth >= MAX_DEPTH:
        return env
    mask = code_mask(text)
    call = _call_site(text, mask, fn)
    if call is not None:
        caller = env_at(text, call, macros, depth + 1)
        close = _close(text, mask, call, "(", ")")
        for name, expr in zip(fn.params, split_args(_code(text, mask, call + 1, close)), strict=False):
            if not name:
                continue
            env.update(members(caller, expr, name))  # a struct handed over whole: its fields
            try:
                env[name] = evaluate(expr, dict(caller), macros)
            except _ERRORS:
                env.pop(name, None)
    env.update(host_locals(text[fn.body + 1 : pos], macros, dict(env), structs, assignments=True))
    return env


__all__ = ["HostFunction", "env_at", "host_functions", "host_locals", "members"]
