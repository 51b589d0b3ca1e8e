"""Caches keyed by a path inside the state folder keep their keys when the state is copied or moved."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def _store(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "rows.parquet").write_bytes(b"rows")
    (folder / "index.json").write_text("{}")
    return folder


def test_a_copied_states_store_keeps_its_split_key_and_a_folder_outside_any_state_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from components.opmodel.store_cache import store_digest
    from components.platform.config import state_key

    first = tmp_path / "first"
    monkeypatch.setenv("KERNELCAST_HOME", str(first))
    store = _store(first / "models" / "opmodel" / "store")
    before = store_digest(store)
    assert state_key(store) == "$KERNELCAST_HOME/models/opmodel/store"
    shutil.copytree(first, tmp_path / "second")  # copy2: names, sizes and mtimes kept, as cp -a
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "second"))
    assert store_digest(tmp_path / "second" / "models" / "opmodel" / "store") == before
    (tmp_path / "second" / "models" / "opmodel" / "store" / "rows.parquet").write_bytes(b"new rows")
    assert store_digest(tmp_path / "second" / "models" / "opmodel" / "store") != before  # rewritten: new key
    # outside the state: the absolute path, so two stores alike in their files still differ
    outside = [_store(tmp_path / name) for name in ("x", "y")]
    for folder in outside:
        shutil.copystat(store / "rows.parquet", folder / "rows.parquet")
    assert state_key(outside[0]) == str(outside[0].resolve())
    assert store_digest(outside[0]) != store_digest(outside[1])


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
