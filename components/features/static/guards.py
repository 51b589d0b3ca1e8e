"""Branches only a few threads take: ``if (tid == 0) {...}`` and boundary chains ``if (ix == 0) ... else if``.

Static counts count every instruction of a kernel once per thread whatever branch it sits in, so the
one-thread-per-block tail of a reduction (gpuFLOPBench ``damage``: a double division by thread 0 of each
block) is counted for all 256 threads of the block -- 596x Nsight's FLOPs. A **lane guard** is a top-level
``if`` of the kernel body whose condition is one thread index equal to a value: ``threadIdx.x == 0``, a
local alias of ``threadIdx.x``, or a global index (``blockIdx.x * blockDim.x + threadIdx.x``) equal to a
boundary. Of the threads of a launch, a share ``1 / extent`` passes it: the block's size along the axis
for ``threadIdx``, the launch's for a global index. ``strip_lane_guards`` rewrites each such ``if (c)`` as
``if (0 && (c))`` so that a second compile drops the guarded code; the difference between the two
compiles' straight-line counts is what the guarded branches hold (``source_loops.count_kernel`` weighs
it by the mean share). Guards inside loops, and conditions with ``&&``/``||``, are left as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from components.features.static.loops import (
    _LOCAL_RE,
    Known,
    Unknown,
    _close,
    _kernel_span,
    evaluate,
    file_macros,
)
from components.features.static.selectors import case_shares
from components.features.static.source import code_mask

_ALIAS_RE = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*\(?\s*threadIdx\.([xyz])\s*\)?\s*;")
_IF_RE = re.compile(r"\bif\s*\(")
_EQ_RE = re.compile(r"^\s*\(?\s*([A-Za-z_][\w.]*)\s*==\s*([^=&|]+?)\s*\)?\s*$")
_LT_RE = re.compile(r"^\s*\(?\s*([A-Za-z_][\w.]*)\s*(<=?)\s*([^=&|<>?]+?)\s*\)?\s*$")


@dataclass(frozen=True)
class LaneGuard:
    paren: int  # the condition's '(' in the source text
    condition: str
    share: float  # of the launched threads that pass it


def _depth(text: str, mask: bytearray, lo: int, pos: int) -> int:
    depth = 0
    for i in range(lo, pos):
        if mask[i] and text[i] == "{":
            depth += 1
        elif mask[i] and text[i] == "}":
            depth -= 1
    return depth


def _range_share(
    text: str, lo: int, at: int, condition: str, extents: dict[str, float], known: Known
) -> float | None:
    """Share of the threads that pass ``index < bound`` (``threadIdx.x < n_steps``): bound over the index's
    extent, the bound evaluated with the question's arguments and the kernel's integer locals above."""
    from components.features.static.host_env import host_locals

    lt = _LT_RE.match(condition)
    if lt is None or lt.group(1) not in extents:
        return None
    macros = file_macros(text, known.defines)
    env = host_locals(text[lo + 1 : at], macros, dict(known.args))
    try:
        bound = evaluate(lt.group(3), env, macros) + (1 if lt.group(2) == "<=" else 0)
    except (Unknown, ValueError, ArithmeticError, RecursionError):
        return None
    share = min(max(bound, 0.0), extents[lt.group(1)]) / extents[lt.group(1)]
    return share if share < 1.0 else None


def _all_lane_guards(
    text: str, mask: bytearray, lo: int, hi: int, known: Known, ranges: bool = False
) -> list[tuple[LaneGuard, int]]:
    """Every lane guard of the body ``text[lo + 1 : hi]`` at any depth, with its brace depth; with
    ``ranges`` also the thread-index ranges ``index < bound`` whose bound is known and the case
    selectors (``static.selectors``)."""
    body = text[lo + 1 : hi]
    cases = case_shares(text, mask, lo, hi) if ranges else {}
    extents: dict[str, float] = {}
    for axis in "xyz":
        i = "xyz".index(axis)
        extents[f"threadIdx.{axis}"] = float(known.block[i])
    for m in _ALIAS_RE.finditer(body):
        extents[m.group(1)] = float(known.block["xyz".index(m.group(2))])
    for var, axis in _thread_indices(body).items():
        i = "xyz".index(axis)
        extents[var] = float(known.grid[i] * known.block[i])
    out = []
    for m in _IF_RE.finditer(text, lo + 1, hi):
        if not mask[m.start()]:
            continue
        paren = m.end() - 1
        condition = text[paren + 1 : _close(text, mask, paren, "(", ")")]
        eq = _EQ_RE.match(condition)
        index = next((s for s in (eq.group(1), eq.group(2).strip()) if s in extents), None) if eq else None
        share = 1.0 / extents[index] if index is not None and extents[index] >= 2 else None
        if share is None and ranges:
            share = _range_share(text, lo, m.start(), condition, extents, known)
        if share is None and eq is not None:
            share = cases.get(eq.group(1))
        if share is None:
            continue
        guard = LaneGuard(paren, " ".join(condition.split()), share)
        out.append((guard, _depth(text, mask, lo + 1, m.start())))
    return out


def lane_guards(text: str, name: str, known: Known) -> list[LaneGuard]:
    """The kernel's top-level lane guards (see the module docstring) with the share of threads each passes."""
    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None:
        return []
    return [g for g, depth in _all_lane_guards(text, mask, span[2], span[3], known) if depth == 0]


def guarded_loops(text: str, name: str, loops: list[Any], known: Known) -> None:
    """Loops a lane guard holds (``if (threadIdx.x == 0) for (...)``, or a range of thread indices
    ``if (threadIdx.x < n_steps)``, at any depth; a device function's loops by its call) run for the
    guard's share of the threads: their trips are scaled by it. A loop
    whose enclosing loop sits in the same guard is not scaled again (its runs multiply the parent's)."""
    from components.features.static.uniform import _statement

    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None or not loops:
        return
    branches = []
    for guard, _ in _all_lane_guards(text, mask, span[2], span[3], known, ranges=True):
        start, end = _statement(text, mask, _close(text, mask, guard.paren, "(", ")") + 1)
        branches.append((start, end, guard))
    for loop in loops:
        parent = loops[loop.parent].start if 0 <= loop.parent < len(loops) else None
        for start, end, guard in branches:
            inside = start <= loop.start <= end
            if inside and not (parent is not None and start <= parent <= end) and loop.trips is not None:
                loop.trips *= guard.share
                loop.header += f" (under {guard.condition}: {guard.share:.2%} of the threads)"


def thread_guard(text: str, name: str, known: Known) -> tuple[float, str] | None:
    """(share of threads that do the work, the guard) when the kernel's first top-level ``if`` bounds
    its thread index -- ``if (i >= n) return;`` or ``if (i < n && j < m) { ...whole body... }`` with
    ``i = blockIdx.x * blockDim.x + threadIdx.x`` and ``n`` known: the threads past ``n`` exit at once.
    None when there is no such guard or a bound is unknown."""
    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None:
        return None
    _, _, lo, hi = span
    m = next((m for m in re.finditer(r"\bif\s*\(", text[lo:hi]) if mask[lo + m.start()]), None)
    if m is None or text[lo + 1 : lo + m.start()].count("{") != text[lo + 1 : lo + m.start()].count("}"):
        return None
    paren = lo + m.end() - 1
    close = _close(text, mask, paren, "(", ")")
    cond, rest = text[paren + 1 : close], text[close + 1 : hi].lstrip()
    block_at = close + 1 + len(text[close + 1 : hi]) - len(rest)
    if rest.startswith("return"):
        clauses, exits = cond.split("||"), True
    elif rest.startswith("{") and not text[_close(text, mask, block_at, "{", "}") + 1 : hi].strip():
        clauses, exits = cond.split("&&"), False  # the whole rest of the body inside the if
    elif not rest.startswith("{") and not text[text.find(";", block_at) + 1 : hi].strip():
        clauses, exits = cond.split("&&"), False  # if (i < n) y[i] = ...; as the last statement
    else:
        return None
    env: dict[str, float] = {**known.args}
    macros = file_macros(text, known.defines)
    dims = _thread_indices(text[lo + 1 : lo + m.start()])
    # per axis, the passing indices [low, high): upper bounds (i < n) and lower ones (i >= 1) both
    # (gpuFLOPBench frechet: if (j >= 1 && j <= n_2 && i >= 1 && i <= n_1))
    ranges: dict[str, list[float]] = {}
    for clause in clauses:
        c = re.match(r"^\s*\(?\s*([A-Za-z_]\w*)\s*(>=|>|<=|<)\s*(.+?)\s*\)?\s*$", clause)
        if not c or c.group(1) not in dims:
            return None
        op = c.group(2)
        try:
            bound = evaluate(c.group(3), dict(env), macros) + (1 if op in (">", "<=") else 0)
        except (Unknown, ValueError, OverflowError, ZeroDivisionError):
            return None
        axis = dims[c.group(1)]
        i = "xyz".index(axis)
        low_high = ranges.setdefault(axis, [0.0, float(known.grid[i] * known.block[i])])
        upper = (op in (">=", ">")) == exits  # passing threads lie below the bound
        low_high[1 if upper else 0] = min(low_high[1], bound) if upper else max(low_high[0], bound)
    share = 1.0
    for axis, (low, high) in ranges.items():
        i = "xyz".index(axis)
        share *= min(1.0, max(high - low, 0) / (known.grid[i] * known.block[i]))
    return share, " ".join(text[lo + m.start() : close + 1].split())


def _thread_indices(prefix: str) -> dict[str, str]:
    """Locals that are a global thread index along one axis: ``blockIdx.x * blockDim.x + threadIdx.x``,
    declared so or assigned so after a bare declaration (``int i; i = blockDim.x * blockIdx.x + ...;``)."""
    out = {}
    assigned = re.finditer(r"(?<![\w.>])([A-Za-z_]\w*)\s*=(?!=)\s*([^;{}]+);", prefix)
    for m in [*_LOCAL_RE.finditer(prefix), *assigned]:
        expr = " ".join(m.group(2).split())
        for axis in "xyz":
            if re.fullmatch(
                rf"\(?\s*(blockIdx\.{axis}\s*\*\s*blockDim\.{axis}|blockDim\.{axis}\s*\*\s*blockIdx\.{axis})"
                rf"\s*\)?\s*\+\s*threadIdx\.{axis}|threadIdx\.{axis}\s*\+\s*\(?\s*(blockIdx\.{axis}\s*\*"
                rf"\s*blockDim\.{axis}|blockDim\.{axis}\s*\*\s*blockIdx\.{axis})\s*\)?",
                expr,
            ):
                out[m.group(1)] = axis
    return out


def strip_lane_guards(text: str, guards: list[LaneGuard]) -> str:
    """``text`` with every guard's condition made false (``0 && (...)``): the compiler drops the branch."""
    for guard in sorted(guards, key=lambda g: g.paren, reverse=True):
        close = _close(text, code_mask(text), guard.paren, "(", ")")
        text = text[: guard.paren + 1] + "0 && (" + text[guard.paren + 1 : close] + ")" + text[close:]
    return text


__all__ = ["LaneGuard", "guarded_loops", "lane_guards", "strip_lane_guards", "thread_guard"]
