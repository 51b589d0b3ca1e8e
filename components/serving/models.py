"""The predictor behind a model reference, fast: a local native copy of each registry version.

Why: loading ``models:/kernelcast@champion`` through MLflow costs seconds per call (import, store
queries, pyfunc unpickling); ``kernelcast predict`` must answer well under 2 s and the server must
notice a new champion without a restart. So:

- the alias is resolved cheaply -- a read-only query of the registry's sqlite file when the store
  is the embedded one (milliseconds, no mlflow import), else MLflowClient with the answer reused
  for ``KERNELCAST_ALIAS_TTL_S`` seconds (default 30);
- each version's predictor folder is copied once under ``$KERNELCAST_HOME/serving/models/<name>/
  <version>/`` and later loaded natively (``components.models.load_predictor``), never via pyfunc.

``ModelHolder`` keeps the loaded predictor for the server and swaps in a new version when the
alias moves (``refresh``, polled from a background thread).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from components.serving.query import QueryError

_REGISTRY_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/]+)|/(?P<version>\d+))$")
ALIAS_TTL_S = float(os.environ.get("KERNELCAST_ALIAS_TTL_S", "30"))


@dataclass(frozen=True)
class LoadedModel:
    predictor: Any
    version: str  # "models:/kernelcast/7", a folder path, "roofline", or the runs:/ URI


def _home() -> Path:
    from components.platform.config import get_settings

    return get_settings().state_dir


def _tracking_uri() -> str:
    from components.platform.config import get_settings

    return get_settings().tracking_uri()


def _sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    path = Path(unquote(uri[len("sqlite:///") :]))
    return path if path.is_absolute() or path.exists() else None


def _alias_from_sqlite(db: Path, name: str, alias: str) -> str | None:
    """The version behind name@alias, straight from MLflow's sqlite schema (read-only)."""
    if not db.is_file():
        return None
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2.0)
    try:
        rows = connection.execute(
            "SELECT version FROM registered_model_aliases WHERE name = ? AND alias = ?", (name, alias)
        ).fetchall()
    finally:
        connection.close()
    return str(rows[0][0]) if rows else None


def _alias_cache_file() -> Path:
    return _home() / "serving" / "aliases.json"


def resolve_alias(name: str, alias: str, tracking_uri: str | None = None) -> str | None:
    """Version number behind ``name@alias`` (None when unset), cheaply; see the module docstring."""
    uri = tracking_uri or _tracking_uri()
    db = _sqlite_path(uri)
    if db is not None:
        try:
            return _alias_from_sqlite(db, name, alias)
        except sqlite3.Error:
            pass  # another schema: ask MLflow
    cache_file = _alias_cache_file()
    key = f"{uri}|{name}@{alias}"
    try:
        cached = json.loads(cache_file.read_text()).get(key)
    except (OSError, ValueError):
        cached = None
    if cached and time.time() - float(cached["at"]) < ALIAS_TTL_S:
        return cached["version"]
    from components.registry.mlflow_registry import alias_version

    version = alias_version(name, alias, uri)
    try:
        from components.common.atomic import atomic_write_text

        data = json.loads(cache_file.read_text()) if cache_file.exists() else {}
        data[key] = {"version": version, "at": time.time()}
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cache_file, json.dumps(data))
    except (OSError, ValueError, ImportError):
        pass  # the cache only saves time
    return version


def _fetch_version(name: str, version: str, target: Path, tracking_uri: str) -> None:
    """Copy version ``version``'s predictor folder to ``target`` (atomically: a temp dir, then rename)."""
    import tempfile

    import yaml

    import mlflow
    from components.registry.pyfunc import PREDICTOR_ARTIFACT

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        try:
            local = Path(
                mlflow.artifacts.download_artifacts(
                    artifact_uri=f"models:/{name}/{version}", dst_path=str(Path(tmp) / "model")
                )
            )
        except Exception as exc:
            raise QueryError(
                f"cannot fetch models:/{name}/{version} from {tracking_uri}: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from None
        spec = yaml.safe_load((local / "MLmodel").read_text())
        artifacts = spec.get("flavors", {}).get("python_function", {}).get("artifacts", {})
        relative = artifacts.get(PREDICTOR_ARTIFACT, {}).get("path")
        if not relative or not (local / relative).is_dir():
            raise QueryError(f"models:/{name}/{version} is not a kernelcast model (no predictor artifact)")
        staged = Path(tmp) / "predictor"
        shutil.copytree(local / relative, staged)
        try:
            staged.rename(target)
        except OSError:
            if not target.is_dir():  # another process won the race: its copy is the same version
                raise


def local_copy(name: str, version: str, tracking_uri: str | None = None) -> Path:
    """The predictor folder of ``name`` version ``version`` under KERNELCAST_HOME (fetched once)."""
    from components.platform.config import state_key

    uri = tracking_uri or _tracking_uri()
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{name}")
    db = _sqlite_path(uri)  # the embedded store: named by its place in the state, which may move
    where = state_key(db) if db is not None else urlparse(uri).path or uri
    store = re.sub(r"[^A-Za-z0-9_.-]", "_", where)[-48:]
    target = _home() / "serving" / "models" / store / safe / str(version)
    if not (target / "predictor.json").is_file():
        _fetch_version(name, str(version), target, uri)
        from components.serving.native import flatten_folder

        flatten_folder(target)  # once per version: later loads need no LightGBM import
    return target


def _load_folder(path: Path) -> Any:
    from components.models import load_predictor
    from components.serving.native import load_flat_predictor

    try:
        return load_flat_predictor(path) or load_predictor(path)
    except (FileNotFoundError, ValueError) as exc:
        raise QueryError(f"model folder {path}: {exc}") from None


def current_version(reference: str, tracking_uri: str | None = None) -> str:
    """What ``reference`` points at now (cheap): ``models:/name/N``, the folder, ``roofline`` or the URI."""
    reference = str(reference).strip()
    match = _REGISTRY_URI.match(reference)
    if match and match["alias"]:
        version = resolve_alias(match["name"], match["alias"], tracking_uri)
        if version is None:
            raise QueryError(
                f"model {reference}: no version has the alias {match['alias']!r} in "
                f"{tracking_uri or _tracking_uri()} (train and promote one, or pass --model roofline)"
            )
        return f"models:/{match['name']}/{version}"
    if match:
        return f"models:/{match['name']}/{match['version']}"
    if reference != "roofline" and not reference.startswith("runs:/"):
        path = Path(reference).expanduser()
        if not path.is_dir():
            raise QueryError(
                f"model {reference!r} is neither 'roofline', a models:/ or runs:/ URI, nor a predictor folder"
            )
        return str(path.resolve())
    return reference


def load_version(version: str, tracking_uri: str | None = None) -> LoadedModel:
    """The predictor for a ``current_version`` answer (registry versions from the local copy)."""
    match = _REGISTRY_URI.match(version)
    if match and match["version"]:
        return LoadedModel(_load_folder(local_copy(match["name"], match["version"], tracking_uri)), version)
    if version == "roofline" or version.startswith("runs:/"):
        from components.serving.query import load_any_predictor

        return LoadedModel(load_any_predictor(version), version)
    return LoadedModel(_load_folder(Path(version)), version)


def load_model(reference: str, tracking_uri: str | None = None) -> LoadedModel:
    """Resolve ``reference`` now and load what it points at."""
    return load_version(current_version(reference, tracking_uri), tracking_uri)


class ModelHolder:
    """The server's model: loaded once, swapped (without a restart) when the reference moves."""

    def __init__(self, reference: str, tracking_uri: str | None = None) -> None:
        self.reference = reference
        self.tracking_uri = tracking_uri
        self._lock = threading.Lock()
        self._model: LoadedModel | None = None
        self._compiled = False  # every tree model of the current one runs lleaves-compiled
        self.error: str | None = None

    @property
    def model(self) -> LoadedModel | None:
        return self._model

    def refresh(self) -> bool:
        """Reload if the reference points at another version; True when a new model was loaded."""
        from components.serving.native import load_compiled

        try:
            version = current_version(self.reference, self.tracking_uri)
            if self._model is not None and self._model.version == version:
                if not self._compiled:  # the background tree compile may have finished since
                    self._compiled = load_compiled(self._model.predictor)
                return False
            loaded = load_version(version, self.tracking_uri)
        except QueryError as exc:
            self.error = str(exc)
            return False
        self._compiled = load_compiled(loaded.predictor)
        with self._lock:
            self._model = loaded
            self.error = None
        return True

    def poll(self, interval_s: float, stop: threading.Event) -> None:
        """Refresh every ``interval_s`` seconds until ``stop`` is set (run in a daemon thread)."""
        while not stop.wait(interval_s):
            self.refresh()
