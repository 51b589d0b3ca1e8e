"""Host code the device extraction kept and NVRTC refuses, dropped where the compiler's errors point.

static.source keeps every top-level declaration it cannot tell is host-only: a class of host members
(``class Anderson { void add(std::mt19937& g); }``), a host global, a function using ``string`` under
``using namespace std``. NVRTC then refuses the whole file. ``prune_failing`` reads the error lines of a
failed compile, finds the top-level declaration (static.source's segments of the device text) each one
sits in, and drops those declarations (their preprocessor lines kept), so the compile can be tried again.
It gives up (None) when an error sits in device code -- a ``__global__``/``__device__`` function, a
``__constant__``/``__shared__`` variable -- or outside any declaration: dropping those would change what
is analysed, not the host code around it.
"""

from __future__ import annotations

import re

from components.features.static.source import _directives, _Segment, _split_top_level, code_mask

LINE_MARK = "#line 1\n"  # where the device text starts in the prepared text (static.source.prepare_source)
MAX_PRUNES = 4  # compile attempts after the first, each dropping what the last one's errors name
_ERROR_RE = re.compile(r"\((\d+)\): (?:catastrophic )?error\b")
_DEVICE_RE = re.compile(r"\b__(?:global|device|constant|shared|managed)__\b")


def prune_failing(text: str, log: str) -> str | None:
    """``text`` (a prepared source) without the top-level host declarations the errors of ``log`` sit
    in; None when there is nothing it may drop (module docstring)."""
    mark = text.find(LINE_MARK)
    lines = sorted({int(m.group(1)) for m in _ERROR_RE.finditer(log)})
    if mark < 0 or not lines:
        return None
    base = mark + len(LINE_MARK)
    device = text[base:]
    starts = [0] + [m.end() for m in re.finditer(r"\n", device)]
    mask = code_mask(device)
    segments: list[_Segment] = []
    _split_top_level(device, mask, 0, len(device), segments)
    drop: dict[int, _Segment] = {}
    for line in lines:
        if line > len(starts):
            return None
        pos = starts[line - 1]
        end = starts[line] if line < len(starts) else len(device)
        seg = next((s for s in segments if s.start <= pos < s.end or s.start < end <= s.end), None)
        if (
            seg is None
            or seg.kind not in ("decl", "func", "type")
            or _DEVICE_RE.search(device[seg.start : seg.end])
        ):
            return None
        drop[seg.start] = seg
    pieces, cursor = [], 0
    for start in sorted(drop):
        seg = drop[start]
        pieces += [device[cursor:start], "\n" + _directives(device[start : seg.end]) + "\n"]
        cursor = seg.end
    return text[:base] + "".join(pieces) + device[cursor:]


__all__ = ["MAX_PRUNES", "prune_failing"]
