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

from components.features.static.loops import Known, _close, _kernel_span, _thread_indices
from components.features.static.source import code_mask

_ALIAS_RE = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*\(?\s*threadIdx\.([xyz])\s*\)?\s*;")
_IF_RE = re.compile(r"\bif\s*\(")
_EQ_RE = re.compile(r"^\s*\(?\s*([A-Za-z_][\w.]*)\s*==\s*([^=&|]+?)\s*\)?\s*$")


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


def lane_guards(text: str, name: str, known: Known) -> list[LaneGuard]:
    """The kernel's top-level lane guards (see the module docstring) with the share of threads each passes."""
    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None:
        return []
    _, _, lo, hi = span
    body = text[lo + 1 : hi]
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
        if not mask[m.start()] or _depth(text, mask, lo + 1, m.start()) != 0:
            continue
        paren = m.end() - 1
        condition = text[paren + 1 : _close(text, mask, paren, "(", ")")]
        eq = _EQ_RE.match(condition)
        if eq is None:
            continue
        index = next((s for s in (eq.group(1), eq.group(2).strip()) if s in extents), None)
        if index is None or extents[index] < 2:
            continue
        out.append(LaneGuard(paren, " ".join(condition.split()), 1.0 / extents[index]))
    return out


def strip_lane_guards(text: str, guards: list[LaneGuard]) -> str:
    """``text`` with every guard's condition made false (``0 && (...)``): the compiler drops the branch."""
    for guard in sorted(guards, key=lambda g: g.paren, reverse=True):
        close = _close(text, code_mask(text), guard.paren, "(", ")")
        text = text[: guard.paren + 1] + "0 && (" + text[guard.paren + 1 : close] + ")" + text[close:]
    return text


__all__ = ["LaneGuard", "lane_guards", "strip_lane_guards"]
