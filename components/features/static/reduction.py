"""Tree reductions: ``for (s = B / 2; s > 0; s >>= 1) { if (tid < s) a[tid] += a[tid + s]; sync }``.

The loop runs log2(B) times for every thread, but only ``s`` of the block's ``B`` threads pass the
guard at step ``s``: summed over the steps, the guarded work is (B - 1) / B of one pass per thread,
not log2(B) passes. ``tree_reductions`` gives such a loop the trips its guarded work really has --
the sum over its steps of the share of the block's threads that pass -- when the guard holds all
of the loop's work (only barriers beside it), the guard compares a thread index of the block with
the loop variable, and the variable halves (``>>= 1``, ``/= 2``, ``= s / 2``).
"""

from __future__ import annotations

import re
from typing import Any

from components.features.static.loops import Known, _close, _kernel_span
from components.features.static.source import code_mask

_ALIAS_RE = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*\(?\s*threadIdx\.([xyz])\s*\)?\s*;")
_HEADER_RE = re.compile(
    r"^for\s*\(\s*(?:[\w:\s]+\s)?([A-Za-z_]\w*)\s*=[^;]*;[^;]*;\s*"
    r"(?:\1\s*>>=\s*1|\1\s*/=\s*2|\1\s*=\s*\1\s*(?:/\s*2|>>\s*1))\s*\)$"
)
_BARRIER_RE = re.compile(r"__sync(?:threads|warp)\s*\([^)]*\)\s*;")


def _guarded_body(body: str, index: str, var: str) -> bool:
    """The loop body is one ``if (index < var)`` (or ``var > index``) statement beside barriers."""
    m = re.match(
        rf"\s*\{{?\s*(?:{_BARRIER_RE.pattern}\s*)*if\s*\(\s*(?:{re.escape(index)}\s*<\s*{var}|{var}\s*>\s*"
        rf"{re.escape(index)})\s*\)",
        body,
    )
    if m is None:
        return False
    from components.features.static.uniform import _statement

    rest = body[m.end() :]
    _, end = _statement(rest, code_mask(rest), 0)
    return re.fullmatch(rf"\s*(?:{_BARRIER_RE.pattern}\s*)*\}}?\s*", rest[end + 1 :]) is not None


def tree_reductions(text: str, name: str, loops: list[Any], known: Known) -> None:
    """Give each tree-reduction loop of kernel ``name`` (module docstring) its active-share trips."""
    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None:
        return
    indices = {f"threadIdx.{a}": known.block[i] for i, a in enumerate("xyz")}
    for m in _ALIAS_RE.finditer(text, span[2], span[3]):
        indices[m.group(1)] = known.block["xyz".index(m.group(2))]
    for loop in loops:
        header = _HEADER_RE.match(loop.header)
        if header is None or loop.trips is None or not loop.first or loop.trips < 1:
            continue
        close = _close(text, mask, text.index("(", loop.start), "(", ")")
        body = re.sub(r"//[^\n]*|/\*.*?\*/", "", text[close + 1 : loop.end + 1], flags=re.S)
        for index, extent in indices.items():
            if extent < 2 or not _guarded_body(body, index, header.group(1)):
                continue
            value, share = int(loop.first), 0.0
            for _ in range(int(loop.trips)):
                share += min(max(value, 0), extent) / extent
                value //= 2
            loop.header += f" (tree reduction: {index} < {header.group(1)} passes a halving share)"
            loop.trips = share
            break


__all__ = ["tree_reductions"]
