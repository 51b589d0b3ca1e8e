"""The keyword options of a static analysis, one definition for both analysers (``analyze.analyze_source``
for CUDA, ``hip.analyze_hip_source`` for AMD), so the two stay behind the same interface."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.features.static.cache import default_cache_dir


@dataclass(frozen=True)
class AnalyzeOptions:
    """How one source is compiled and cached; the limits default to the toolchain's own (:meth:`of`)."""

    timeout_s: float  # wall-clock limit of the compiler child
    memory_bytes: int  # its address-space limit
    path: Path | None = None  # the file the source came from: its folder is searched for includes
    source_id: str | None = None  # the join key's program part (default: from ``name``)
    defines: Mapping[str, str] | None = None  # -D macros
    use_cache: bool = True
    cache_dir: Path | None = None  # default: ``<KERNELCAST_HOME>/cache/static``

    @classmethod
    def of(cls, given: Mapping[str, Any], timeout_s: float, memory_bytes: int) -> AnalyzeOptions:
        """The options a caller gave, the toolchain's limits where it gave none (a TypeError names an
        unknown option)."""
        return cls(**{"timeout_s": timeout_s, "memory_bytes": memory_bytes, **given})

    def cache_folder(self) -> Path | None:
        """Where results are cached; None when ``use_cache`` is off."""
        if not self.use_cache:
            return None
        return Path(self.cache_dir) if self.cache_dir is not None else default_cache_dir()
