"""On-disk cache of static-analysis results: one JSON file per compile key, written atomically.

The key covers everything a result depends on (``CACHE_VERSION``, the prepared source, the name
expressions, the NVRTC options, the file name), so a cached entry is never stale; parallel sweeps
never see a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components.common.atomic import atomic_write_text

# Bump when extraction, options or parsing change, so cached reports are recomputed.
# v2: launch sites resolved, guard defaults; v3: loop nest + FLOP counts; v4: slow paths left out of counts;
# v5: uniform branches on given arguments folded, enumerators as constants, tree reductions
CACHE_VERSION = "static-v6"


def default_cache_dir() -> Path:
    """``<KERNELCAST_HOME>/cache/static``: where a caller that names no folder caches."""
    from components.platform.config import get_settings

    return get_settings().cache_dir / "static"


def cache_key(text: str, name_expressions: Sequence[str], options: Sequence[str], name: str) -> str:
    """SHA-256 of everything a compile's result depends on."""
    return hashlib.sha256(
        json.dumps(
            [CACHE_VERSION, text, list(name_expressions), list(options), name], sort_keys=True
        ).encode()
    ).hexdigest()


def cache_load(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The cached payload for ``key``, or None (absent or unreadable: recompute)."""
    try:
        return json.loads((Path(cache_dir) / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None


def cache_store(cache_dir: Path, key: str, payload: dict[str, Any]) -> None:
    atomic_write_text(Path(cache_dir) / f"{key}.json", json.dumps(payload))


__all__ = ["CACHE_VERSION", "cache_key", "cache_load", "cache_store", "default_cache_dir"]
