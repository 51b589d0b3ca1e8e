"""The closing brace of a C/C++/CUDA block, the one brace matcher of every source reader (static analysis,
template instantiation, the roofline-class features, the LLM prompt)."""

from __future__ import annotations


def closing_brace(
    text: str, open_pos: int, code: bytearray | None = None, stop: int | None = None, pair: str = "{}"
) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_pos``, None when it is not closed before ``stop``
    (default: the end). ``code``: a mask per character, 0 where braces do not count (comments, strings).
    ``pair``: the opening and closing characters (``"()"`` for a parameter list)."""
    opening, closing = pair
    depth = 0
    for j in range(open_pos, len(text) if stop is None else min(stop, len(text))):
        if code is not None and not code[j]:
            continue
        ch = text[j]
        if ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return j
    return None
