"""The static stage's sweep in two passes, so ``nvdisasm`` runs a few times instead of once per cubin.

nvdisasm costs ~0.4 s of CPU of set-up per call (``static.elf_batch``), and the sweep met its ~350 cubins one
at a time, each file's report built right after its compile. Inside :func:`two_passes`:

1. the sweep runs once to compile: every NVRTC reply is kept in memory (keyed by the whole request), every
   cubin that needs disassembly is collected, and nothing is written to the compile cache (that pass's
   reports have no SASS);
2. the collected cubins go through a few batched nvdisasm processes (``elf_batch.disassemble_many``);
3. the sweep runs again, its compiles answered from memory and its disassemblies from the batch, so each
   file's report -- and what the cache stores -- is the one a single pass computes (a compile or cubin not
   met in the first pass is compiled or disassembled as before).

Outside :func:`two_passes` (a single CLI question) nothing changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class _Sweep:
    def __init__(self) -> None:
        self.collecting = True
        self.replies: dict[str, dict[str, Any]] = {}
        self.cubins: dict[str, bytes] = {}
        self.functions: dict[str, list[dict]] = {}


_ACTIVE: _Sweep | None = None


def _key(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def collecting() -> bool:
    """True in the first pass: its reports lack SASS, so they must not be cached."""
    return _ACTIVE is not None and _ACTIVE.collecting


def remembered_reply(request: dict[str, Any]) -> dict[str, Any] | None:
    """The first pass's NVRTC reply to this very request, in the second pass; else None."""
    return None if _ACTIVE is None else _ACTIVE.replies.get(_key(request))


def remember_reply(request: dict[str, Any], reply: dict[str, Any]) -> None:
    if _ACTIVE is not None and _ACTIVE.collecting:
        _ACTIVE.replies[_key(request)] = reply


def sass_functions(cubin: bytes, nvdisasm: Path) -> list[dict]:
    """nvdisasm's functions of ``cubin``: collected (none yet) in the first pass, from the batch in the
    second, from its own nvdisasm call outside a sweep or for a cubin the first pass did not meet."""
    from components.features.static.sass import run_nvdisasm

    sweep = _ACTIVE
    if sweep is None:
        return run_nvdisasm(cubin, nvdisasm)
    key = hashlib.sha256(cubin).hexdigest()
    if sweep.collecting:
        sweep.cubins[key] = cubin
        return []
    found = sweep.functions.get(key)
    return found if found is not None else run_nvdisasm(cubin, nvdisasm)


def two_passes(sweep: Callable[[], T], workers: int = 2) -> T:
    """``sweep()``'s result, computed as the module docstring says (batches on ``workers`` processes)."""
    global _ACTIVE
    from components.features.static.compile import nvdisasm_path
    from components.features.static.elf_batch import disassemble_many

    if _ACTIVE is not None:  # already inside one: a single pass of its own
        return sweep()
    state = _ACTIVE = _Sweep()
    try:
        sweep()
        state.collecting = False
        keys = list(state.cubins)
        if keys:
            done = disassemble_many([state.cubins[k] for k in keys], nvdisasm_path(), workers)
            state.functions = dict(zip(keys, done, strict=True))
        state.cubins.clear()
        return sweep()
    finally:
        _ACTIVE = None


__all__ = ["collecting", "remember_reply", "remembered_reply", "sass_functions", "two_passes"]
