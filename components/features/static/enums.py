"""C/C++ enumerations as integer constants: ``enum M { A = 0, B }`` makes ``A`` 0 and ``B`` 1.

A kernel argument of enum type (gpuFLOPBench ``adam``: ``adamMode_t mode``, set on the host to
``ADAM_MODE_0``) decides uniform branches; its value is known only when the enumerators are.
"""

from __future__ import annotations

import re

from components.features.static.source import code_mask

_ENUM_RE = re.compile(r"\benum\s+(?:class\s+|struct\s+)?(\w+)?\s*(?::\s*[\w\s]+)?\{([^{}]*)\}\s*(\w+)?")


def enum_constants(text: str) -> dict[str, str]:
    """Enumerator name -> value expression (C rules: one more than the previous, 0 first)."""
    mask = code_mask(text)
    out: dict[str, str] = {}
    for m in _ENUM_RE.finditer(text):
        if not mask[m.start()]:
            continue
        previous = "-1"
        for item in re.sub(r"//[^\n]*|/\*.*?\*/", "", m.group(2), flags=re.S).split(","):
            name, _, value = item.partition("=")
            name = name.strip()
            if not name.isidentifier():
                continue
            previous = f"({value.strip()})" if value.strip() else f"({previous} + 1)"
            out[name] = previous
    return out


def enum_types(text: str) -> set[str]:
    """Names of the file's enum types (``enum M {..}`` and ``typedef enum {..} M;``)."""
    mask = code_mask(text)
    return {
        name for m in _ENUM_RE.finditer(text) if mask[m.start()] for name in (m.group(1), m.group(3)) if name
    }


__all__ = ["enum_constants", "enum_types"]
