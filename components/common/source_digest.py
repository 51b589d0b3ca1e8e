"""One digest of the source files a cache's contents come from, so a file saved by other code is not
reused (the measured tier's split tables, ``opmodel.store_cache``; the envelope's lattices,
``opmodel.lattice_cache``)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path


def files_digest(paths: Iterable[Path]) -> str:
    """SHA-256 over each existing file's name and bytes, in the given order."""
    sha = hashlib.sha256()
    for path in paths:
        if path.is_file():
            sha.update(path.name.encode() + path.read_bytes())
    return sha.hexdigest()
