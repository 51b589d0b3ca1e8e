"""Disk caches kept within a budget (the step models, the envelope's lattices, the measured store's splits).

Their files are named by digests of what they were built from, so a new champion, store, calibration or code
version writes new files and never reads the old ones again; without a budget a long-lived server or a
developer's state folder collects them forever. Each cache is trimmed at most once per process, on its first
write (a write is rare: the listing costs one ``stat`` per file), oldest written first, down to three
quarters of its budget so the next trims are far apart. Another process may be reading a file being removed:
on Linux an open file stays readable, and a file gone before it is opened is a cache miss, built again.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

_TRIMMED: set[tuple[str, str]] = set()  # (folder, pattern) already trimmed by this process


def _written(path: Path) -> tuple[int, int] | None:
    """(modification time in ns, size) of ``path``, or None where it vanished meanwhile."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def trim_files(folder: Path, max_bytes: int, pattern: str = "*.npy") -> int:
    """Remove the oldest-written ``pattern`` files of ``folder`` when they hold more than ``max_bytes``,
    until they hold at most 3/4 of it; once per process and folder. Returns the number removed."""
    key = (str(Path(folder).resolve()), pattern)
    if key in _TRIMMED:
        return 0
    _TRIMMED.add(key)
    files = [(s, p) for p in Path(folder).glob(pattern) if (s := _written(p)) is not None and p.is_file()]
    total = sum(size for (_, size), _ in files)
    if total <= max_bytes:
        return 0
    removed = 0
    for (_, size), path in sorted(files, key=lambda item: item[0][0]):
        if total <= max_bytes * 3 // 4:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
        total -= size
    return removed


def trim_folders(parent: Path, suffix: str, keep: int) -> int:
    """Keep the ``keep`` newest subfolders of ``parent`` whose name ends with ``suffix`` (temp folders,
    named with a leading dot, are another writer's and left alone); remove the rest. Returns how many."""
    folders = [
        (s, p)
        for p in Path(parent).glob(f"*{suffix}")
        if not p.name.startswith(".") and p.is_dir() and (s := _written(p)) is not None
    ]
    stale = sorted(folders, key=lambda item: item[0][0], reverse=True)[keep:]
    for _, path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return len(stale)
