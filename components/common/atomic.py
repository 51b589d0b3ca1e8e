"""Atomic file writes shared by every stage: readers never see half a file, a failure leaves none."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temp file in the same folder, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the outputs are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """``path.write_text(text)``, atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """``path.write_bytes(data)``, atomically."""
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_dir(path: Path, write: Callable[[Path], None], *, replace_existing: bool = True) -> None:
    """Build a folder in a temp sibling, then rename it over ``path``: readers see the old folder
    or the whole new one. An existing ``path`` is replaced, or with ``replace_existing=False``
    kept (another writer finished first)."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        write(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp creates 0700; the outputs are meant to be shared
        if path.exists() and replace_existing:
            shutil.rmtree(path)
        try:
            os.replace(tmp, path)
        except OSError:
            if replace_existing or not path.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
