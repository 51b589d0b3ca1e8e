"""A kernel body's loops in source pre-order, the loops of the ``__device__`` functions it calls included.

NVRTC inlines device functions, so their loops are loops of the kernel's SASS (gpuFLOPBench
``cbsfil``: the kernel has no loop of its own, the spline filter it calls has three). A call's
loops are read in the callee's body with its parameters bound to the call's argument expressions,
evaluated where the call is (an argument that does not evaluate leaves its parameter unknown), and
nest under the caller's loops that hold the call. Recursion stops at ``MAX_DEPTH`` calls deep.
"""

from __future__ import annotations

import re

from components.features.static.loops import (
    _FOR_RE,
    SourceLoop,
    Unknown,
    _close,
    _code,
    _count,
    _ends_do_while,
    _locals,
    _split_args,
    _statement_end,
    evaluate,
)

MAX_DEPTH = 4
_DEVICE_RE = re.compile(r"__device__[^;{}()]*?\b([A-Za-z_]\w*)\s*\(", re.S)


def device_functions(text: str, mask: bytearray) -> dict[str, tuple[list[str], int, int]]:
    """Defined ``__device__`` functions: name -> (parameter names, '{', '}')."""
    out: dict[str, tuple[list[str], int, int]] = {}
    for m in _DEVICE_RE.finditer(text):
        if not mask[m.start()] or m.group(1) in out:
            continue
        paren = m.end() - 1
        close = _close(text, mask, paren, "(", ")")
        brace = text.find("{", close)
        if brace < 0 or _code(text, mask, close + 1, brace).strip() not in ("", "const"):
            continue
        params = [
            p.split("=")[0].split()[-1].strip("*&")
            for p in _split_args(_code(text, mask, paren + 1, close))
            if p.split()
        ]
        out[m.group(1)] = (params, brace, _close(text, mask, brace, "{", "}"))
    return out


def scan_loops(
    text: str,
    mask: bytearray,
    span: tuple[int, int],
    env: dict[str, float],
    macros: dict[str, str],
    functions: dict[str, tuple[list[str], int, int]],
    depth: int = 0,
) -> list[SourceLoop]:
    """Loops of the body ``text[lo + 1 : hi]`` (``span`` is its braces) and of the device functions it
    calls, in pre-order."""
    lo, hi = span
    calls = (
        re.compile(r"\b(" + "|".join(re.escape(f) for f in functions) + r")\s*\(")
        if functions and depth < MAX_DEPTH
        else None
    )
    events = [(m.start(), m) for m in _FOR_RE.finditer(text, lo + 1, hi)]
    events += [(m.start(), m) for m in calls.finditer(text, lo + 1, hi)] if calls else []
    loops: list[SourceLoop] = []
    for pos, m in sorted(events, key=lambda e: e[0]):
        if not mask[pos]:
            continue
        local_env, local_macros = dict(env), dict(macros)
        _locals(text[lo + 1 : pos], mask, lo + 1, local_env, local_macros)
        parent = next((i for i in range(len(loops) - 1, -1, -1) if loops[i].start < pos <= loops[i].end), -1)
        if m.re is not _FOR_RE:
            loops += _call_loops(text, mask, m, local_env, local_macros, functions, depth, parent, len(loops))
            continue
        if m.group(1) == "while" and _ends_do_while(text, mask, pos):
            continue
        paren = m.end() - 1
        close = _close(text, mask, paren, "(", ")")
        end = _statement_end(text, mask, close + 1, hi)
        loop = SourceLoop(pos, end, parent, " ".join(text[pos : close + 1].split()))
        body = _code(text, mask, close + 1, end + 1) if m.group(1) == "while" else ""
        prefix = _code(text, mask, lo + 1, pos) if m.group(1) == "while" else ""
        _count(loop, m.group(1), text[paren + 1 : close], local_env, local_macros, body, prefix)
        loops.append(loop)
    return loops


def _call_loops(
    text: str,
    mask: bytearray,
    call: re.Match[str],
    env: dict[str, float],
    macros: dict[str, str],
    functions: dict[str, tuple[list[str], int, int]],
    depth: int,
    parent: int,
    offset: int,
) -> list[SourceLoop]:
    """The loops of the device function ``call`` names, parameters bound, re-parented into the caller."""
    params, brace, end = functions[call.group(1)]
    if brace <= call.start() <= end:  # recursion: the function calls itself
        return []
    close = _close(text, mask, call.end() - 1, "(", ")")
    inner_env, inner_macros = dict(env), dict(macros)
    for name, expr in zip(params, _split_args(_code(text, mask, call.end(), close)), strict=False):
        inner_macros.pop(name, None)
        try:
            inner_env[name] = evaluate(expr, dict(env), macros)
        except (Unknown, ValueError, ArithmeticError, RecursionError):
            inner_env.pop(name, None)
    inner = scan_loops(text, mask, (brace, end), inner_env, inner_macros, functions, depth + 1)
    for lp in inner:
        lp.parent = parent if lp.parent < 0 else lp.parent + offset
        lp.start, lp.end = call.start(), close  # nest the caller's later loops by the call's place
    return inner


__all__ = ["MAX_DEPTH", "device_functions", "scan_loops"]
