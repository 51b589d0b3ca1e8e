"""Caches keyed by a path inside the state folder keep their keys when the state is copied or moved; the op
engine store's split is keyed by its contents, so every copy of a store shares it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def _store(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "rows.parquet").write_bytes(b"rows")
    (folder / "index.json").write_text("{}")
    return folder


def test_a_stores_split_key_follows_its_contents_not_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Train's state store, the candidate's copy evaluate reads and the champion's local copy register makes
    hold the same files in three places: one key, so one split (and one set of lattices) serves them all."""
    from components.opmodel.store_cache import store_digest

    first = tmp_path / "first"
    monkeypatch.setenv("KERNELCAST_HOME", str(first))
    store = _store(first / "models" / "opmodel" / "store")
    (store / "by_framework").mkdir()
    (store / "by_framework" / "gemm.parquet").write_bytes(b"framework rows")
    before = store_digest(store)
    shutil.copytree(first, tmp_path / "second")  # copy2: names, sizes and mtimes kept, as cp -a
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "second"))
    assert store_digest(tmp_path / "second" / "models" / "opmodel" / "store") == before
    elsewhere = tmp_path / "serving" / "copy" / "store"  # another path, new mtimes (shutil.copy: no stat)
    shutil.copytree(store, elsewhere, copy_function=shutil.copy)
    assert store_digest(elsewhere) == before
    (elsewhere / "rows.parquet").write_bytes(b"new rows")
    assert store_digest(elsewhere) != before  # rewritten: new key
    (elsewhere / "rows.parquet").write_bytes(b"rows")
    assert store_digest(elsewhere) == before
    (elsewhere / "by_framework" / "gemm.parquet").write_bytes(b"framework rowz")  # a subfolder's file too
    assert store_digest(elsewhere) != before


def test_a_remembered_digest_is_the_hashed_one_and_a_same_sized_rewrite_is_hashed_again(
    tmp_path: Path,
) -> None:
    """``folder_content_digest`` remembers a digest by the files' stat key: read back equal to hashing
    afresh, and a file rewritten in place to other bytes of the same size (a new mtime) is hashed again."""
    import os

    from components.common.source_digest import folder_content_digest

    folder = _store(tmp_path / "store")
    memo = tmp_path / "memo"
    hashed = folder_content_digest(folder, memo)
    assert len(list(memo.glob("*.txt"))) == 1
    assert folder_content_digest(folder, memo) == hashed == folder_content_digest(folder, tmp_path / "none")
    stat = (folder / "rows.parquet").stat()
    (folder / "rows.parquet").write_bytes(b"ROWS")  # same size, other bytes
    os.utime(folder / "rows.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert folder_content_digest(folder, memo) != hashed
    assert len(list(memo.glob("*.txt"))) == 2


def test_the_champions_local_copy_is_named_by_its_registrys_place_in_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from components.serving import models

    folders = []
    for name in ("first", "second"):
        home = tmp_path / name
        monkeypatch.setenv("KERNELCAST_HOME", str(home))
        target = home / "serving" / "models"
        uri = f"sqlite:///{home / 'mlflow' / 'mlflow.db'}"
        fetched: list[Path] = []
        monkeypatch.setattr(models, "_fetch_version", lambda n, v, t, u, seen=fetched: seen.append(t))
        monkeypatch.setattr("components.serving.native.flatten_folder", lambda folder: None)
        folders.append(models.local_copy("kernelcast", "3", uri).relative_to(target))
        assert fetched  # nothing there yet: fetched into that folder
    assert folders[0] == folders[1] == Path("_KERNELCAST_HOME_mlflow_mlflow.db") / "kernelcast" / "3"
