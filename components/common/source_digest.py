"""One digest of the source files a cache's contents come from, so a file saved by other code is not
reused (the measured tier's split tables, ``opmodel.store_cache``; the envelope's lattices,
``opmodel.lattice_cache``), and one of a folder's contents, so every copy of it shares its caches."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

MEMO_BYTES = 64 * 1024  # folder_content_digest's remembered digests: ~1,000 (64 bytes each)


def files_digest(paths: Iterable[Path]) -> str:
    """SHA-256 over each existing file's name and bytes, in the given order."""
    sha = hashlib.sha256()
    for path in paths:
        if path.is_file():
            sha.update(path.name.encode() + path.read_bytes())
    return sha.hexdigest()


def folder_content_digest(folder: Path, memo_dir: Path, recursive: bool = False) -> str:
    """SHA-256 over a folder's files (each one's path under ``folder`` and bytes; its subfolders' too when
    ``recursive``), so two copies of the same files, in any place, share it: a cache keyed by it is reused
    by every copy (the state's op engine store, the candidate's, the champion's local copy). Hashing
    reads every byte (~0.1 CPU-s for the op engine's 92 MB store), so the digest is remembered under
    ``memo_dir``, named by the files' stat key (resolved path, names, sizes, mtimes: new whenever a file is
    rewritten), and a later process reads that small file instead. An unwritable ``memo_dir`` only costs the
    next process the hashing."""
    import contextlib
    import json

    from components.common.atomic import atomic_write_text

    root = Path(folder).resolve()
    found = root.rglob("*") if recursive else root.iterdir()
    files = sorted((p.relative_to(root).as_posix(), p) for p in found if p.is_file())
    stats = [(name, p.stat().st_size, p.stat().st_mtime_ns) for name, p in files]
    stat_key = hashlib.sha256(json.dumps([str(root), recursive, stats]).encode()).hexdigest()[:32]
    memo = Path(memo_dir) / f"{stat_key}.txt"
    with contextlib.suppress(OSError):  # absent: not hashed yet
        remembered = memo.read_text()
        if len(remembered) == 64:
            return remembered
    sha = hashlib.sha256()
    for name, path in files:
        sha.update(json.dumps([name, path.stat().st_size]).encode())
        with open(path, "rb") as handle:
            sha.update(hashlib.file_digest(handle, "sha256").digest())
    digest = sha.hexdigest()
    with contextlib.suppress(OSError):
        from components.common.cache_budget import trim_files

        atomic_write_text(memo, digest)
        trim_files(Path(memo_dir), MEMO_BYTES, "*.txt")  # the oldest stat keys (stores since rewritten)
    return digest
