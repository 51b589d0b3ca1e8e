"""The monotone envelope's lattices (``envelope.py``) saved once, so a later process reads them instead of
answering the whole lattice again.

Why: a lattice is a few thousand answers of the engine (a GEMM's 18**3 sizes: ~0.4 s of a ~1.5 s CLI
question), and it is the same for every question of a (GPU, dtype, family, held dimensions) answered by the
same engine. Saved under the state's cache (``$KERNELCAST_HOME/cache/opmodel-split/lattices/``), one ``.npy``
per lattice, float64 as computed, so an answer read through a saved lattice is the answer built afresh,
to the last bit. A file is named by the lattice's key and a digest of everything the engine's raw answers
come from: the contents of the engine folder's files and of the measured store's (wherever the folder is:
a copy shares them), the calibrations it answers with, the serving framework whose rows it reads, and the
code and device catalog that compute the answers; anything else changed, the name changes and the lattice
is built again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from components.common.atomic import atomic_write_bytes
from components.common.source_digest import files_digest

LATTICES_DIR = "lattices"  # under the engine's split cache folder (loading.SPLIT_DIR)
FORMAT_VERSION = 1  # bump when what a file holds changes
BUDGET_BYTES = 512 << 20  # the saved lattices of many engines (old ones are trimmed: cache_budget.py)


@functools.cache
def code_digest() -> str:
    """A digest of the code and data the engine's raw answers come from: the op engine, the physics, the
    flat-tree walker and the device catalog (the transfer tier's relatives are catalog GPUs)."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(
        [
            *(root / "opmodel").glob("*.py"),
            *(root / "physics").glob("*.py"),
            *(root / "devices").iterdir(),
            root / "common" / "flat_trees.py",
        ]
    )
    return files_digest(files)


@dataclass
class LatticeFiles:
    """Where an engine's lattices are saved, and what names them (``identity``: the engine's sources, asked
    for when the first lattice is: a question without an envelope pays nothing)."""

    folder: Path
    identity: Callable[[], dict[str, Any]]

    @functools.cached_property
    def digest(self) -> str:
        from importlib.metadata import version

        text = json.dumps(
            [FORMAT_VERSION, code_digest(), version("numpy"), self.identity()], sort_keys=True, default=str
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def path(self, key: tuple) -> Path:
        """The file of lattice ``key`` (``Envelope._lattices``'s cache key: floats and strings, whose repr is
        exact)."""
        name = hashlib.sha256(f"{self.digest}|{key!r}".encode()).hexdigest()[:32]
        return Path(self.folder) / LATTICES_DIR / f"{name}.npy"

    def read(self, key: tuple) -> tuple[np.ndarray, np.ndarray] | None:
        """(upper, lower) saved for ``key``, or None where none is (or it cannot be read)."""
        try:
            both = np.load(self.path(key), allow_pickle=False)
        except (OSError, ValueError):  # not saved yet, or a file cut short by a full disk
            return None
        return both[0], both[1]

    def write(self, key: tuple, upper: np.ndarray, lower: np.ndarray) -> None:
        """Save (upper, lower) for ``key``, atomically; a read-only cache only costs the next process the
        build."""
        buffer = io.BytesIO()
        np.save(buffer, np.stack([upper, lower]), allow_pickle=False)
        from components.common.cache_budget import trim_files

        with contextlib.suppress(OSError):
            atomic_write_bytes(self.path(key), buffer.getvalue())
            trim_files(Path(self.folder) / LATTICES_DIR, BUDGET_BYTES)


def engine_identity(engine: Any, origin: Path | None) -> dict[str, Any]:
    """What an engine's raw answers come from, as ``LatticeFiles.identity``: the contents of ``origin`` (the
    engine folder it was loaded from, if any) and of its store, its calibrations, fallback and serving
    framework. Contents, not places: the candidate's engine folder (evaluate) and the champion's local copy
    of it (register) answer alike, so they share their lattices."""
    from components.common.source_digest import folder_content_digest
    from components.opmodel.store_cache import DIGESTS_DIR, store_digest
    from components.platform.config import get_settings

    store = engine.store_dir
    has_origin = origin is not None and Path(origin).is_dir()
    memo = get_settings().cache_dir / DIGESTS_DIR
    return {
        "origin": folder_content_digest(Path(origin), memo) if has_origin else None,
        "store": store_digest(Path(store)) if store is not None and Path(store).is_dir() else None,
        "calibrations": engine.calibrations,
        "fallback_util": engine.fallback_util,
        "framework": getattr(engine, "framework", None),
    }
