"""The measured store split once into one file per (family, GPU, dtype[, kv dtype]) group, so an engine
reads only the groups its questions ask for, and the measured tier's tables built from them saved beside.

Why: reading the whole store (1.85M rows) and grouping it for every GPU took 1.6-8 s per CLI process, and
building a GPU's attention table from its rows ~0.25 s, while a question on one GPU needs that GPU's few
groups (and those of its relatives, for shapes it did not measure). The first engine over a store writes the
split under the cache folder (atomically, keyed by the store's contents and the versions of the libraries that
write it: a rebuilt store or a new pandas gets a new split, a copy of the store the same); every later process
reads the small index and, on first use, one parquet file per group, or the group's table where one was saved
(pickled, keyed by the GPU's physics, the layout and the digest of the code that builds tables; only this
module writes the folder). The groups are those ``MeasuredTier`` (``measured.measured_groups``) and the
transfer tier's curve tables would build from the whole frames, rows in the same order: answers are unchanged.
Each serving framework's own rows (``store.load_framework_rows``) are split the same way, into a subfolder
of the split, by the first engine that answers for that framework (``framework_split``): before, every
process read them whole and built their tables again (4.3-4.7 CPU-s for three frameworks' GEMM and
attention answers on two GPUs; 0.6 s from the split).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from components.common.atomic import atomic_write_bytes
from components.common.source_digest import files_digest, folder_content_digest

CACHE_VERSION = 3  # bump when the split's layout changes (3: NeuSight's rows in the measured groups)
LIBRARIES = ("pandas", "pyarrow", "numpy", "scipy")  # their versions key the split: pickles and parquet
INDEX_NAME = "index.json"
KEEP_SPLITS = 4  # stores split per cache (the state's, a pulled champion's, ...): older ones are removed
TABLES_DIR = "tables"  # the measured tier's tables built from the groups, saved on first use
DIGESTS_DIR = "content-digests"  # under $KERNELCAST_HOME/cache: folders' content digests by stat key


def measured_only_groups(store_dir: Path) -> frozenset[tuple]:
    """The measured tier's (family, device, dtype, None) groups of the store's measured-only rows (NeuSight's,
    ``store.MEASURED_ONLY_DIR``): no other GPU is answered from them (``TransferTier.not_relatives``). Read
    here, from the manifest, because ``store`` imports pandas and a cached question must not."""
    manifest = json.loads((Path(store_dir) / "store.json").read_text())  # store.MANIFEST_NAME
    return frozenset((f, d, t, None) for f, d, t in manifest.get("measured_only_groups", []))


def store_digest(store_dir: Path) -> str:
    """A key of the store's files (their contents, every subfolder's too) and the libraries that write and
    pickle the split and its tables: new when the store is rewritten, and the same for every copy of it --
    train's state store, the candidate's folder evaluate reads, the champion's local copy register makes
    -- so they share one split (before, keyed by the path, each of the three wrote its own: ~11 CPU-s in
    register). The contents' digest is remembered by the files' stat key (``folder_content_digest``), so
    a later question reads no store file for it."""
    from importlib.metadata import version  # not pandas itself: a warm question answers without it

    from components.platform.config import get_settings

    memo = get_settings().cache_dir / DIGESTS_DIR
    content = folder_content_digest(Path(store_dir), memo, recursive=True)
    text = json.dumps([CACHE_VERSION, content, *map(version, LIBRARIES)])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@functools.cache
def code_digest() -> str:
    """A digest of the code a saved table's arrays come from (the measured tier and the physics): a table
    saved by other code is not reused."""
    from components.opmodel import measured, site_blend, site_search
    from components.physics import roofline

    physics = Path(roofline.__file__).parent
    code = (measured, site_blend, site_search)
    files = sorted({*(Path(m.__file__) for m in code), *physics.glob("*.py")})
    return files_digest(files)


class GroupFrames(Mapping):
    """``{group key: frame}`` of a split store: keys from its index, each frame read on first use."""

    def __init__(
        self, folder: Path, files: dict[tuple, str], rebuild: Callable[[], None] | None = None
    ) -> None:
        self.folder = Path(folder)
        self.files = files  # group key -> file name in folder
        self.rebuild = rebuild  # writes the split again (the same files) where it vanished
        self._frames: dict[tuple, Any] = {}
        self.loaded_rows = 0  # rows read so far (what a question cost)

    def __getitem__(self, key: tuple) -> Any:
        if key not in self._frames:
            if key not in self.files:
                raise KeyError(key)
            frame = self._read(self.files[key])
            self._frames[key] = frame
            self.loaded_rows += len(frame)
        return self._frames[key]

    def _read(self, name: str) -> Any:
        """One group's frame. A split another process's cache trim removed (``cache_budget.trim_folders``:
        a bench's fold stores are split too) is written again from its store, then read."""
        import pandas as pd

        try:
            return pd.read_parquet(self.folder / name)
        except FileNotFoundError:
            if self.rebuild is None:
                raise
            self.rebuild()
            return pd.read_parquet(self.folder / name)

    def table(self, key: tuple, tag: str, build: Callable[[], Any]) -> Any:
        """The measured tier's table of group ``key`` built by ``build``, saved beside the group the first
        time: ``tag`` (the GPU's physics and the family's layout) and the code that builds tables name it."""
        digest = hashlib.sha256(f"{tag}|{code_digest()}".encode()).hexdigest()[:20]
        stem = Path(self.files[key]).stem
        path = self.folder / TABLES_DIR / f"{stem}-{digest}.pkl"
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as handle:  # absent: not saved yet
            return pickle.load(handle)  # written below into our own cache folder
        table = build()
        with contextlib.suppress(OSError):  # a read-only cache: the table is built again next time
            path.parent.mkdir(exist_ok=True)
            atomic_write_bytes(path, pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))
            for old in path.parent.glob(f"{stem}-*.pkl"):  # the group's tables of other code or physics
                if old != path:
                    old.unlink(missing_ok=True)
        return table

    def __contains__(self, key: object) -> bool:
        return key in self.files

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def subset(self, keys: Iterable[tuple]) -> GroupFrames:
        """The same split restricted to ``keys`` (frames already read are shared)."""
        out = GroupFrames(self.folder, {k: self.files[k] for k in keys}, self.rebuild)
        out._frames = {k: v for k, v in self._frames.items() if k in out.files}
        return out


def curve_groups(family: str, frame: Any) -> Iterator[tuple[tuple, Any]]:
    """The transfer tier's curve-table groups (``TransferTier.curve_groups``'s keys and parts)."""
    for (device, dtype), part in frame.groupby(["device_id", "dtype"], sort=True, observed=True):
        yield (family, str(device), str(dtype)), part


def _write_groups(folder: Path, family: str, frame: Any, measured: bool, index: dict[str, Any]) -> None:
    """``frame``'s groups (the measured tier's, else the curve tables') as numbered parquet files of
    ``folder``, listed in ``index``."""
    from components.opmodel.measured import measured_groups

    kind = "measured" if measured else "curves"
    parts = measured_groups(family, frame) if measured else curve_groups(family, frame)
    for key, part in parts:
        name = f"{len(index['measured']) + len(index['curves']):05d}.parquet"
        part.to_parquet(folder / name, compression="zstd")  # the store's own format: ~1/8 of a pickle
        index[kind].append([list(key), name, len(part)])


def split_store(
    store_dir: Path,
    folder: Path,
    measured: tuple[str, ...],
    curves: tuple[str, ...],
    replace_existing: bool = True,
) -> None:
    """Write the store's groups of the ``measured`` and ``curves`` families into ``folder`` (atomic; with
    ``replace_existing=False`` a split another writer finished first is kept)."""
    from components.common.atomic import atomic_write_dir
    from components.opmodel.store import load_store

    def write(tmp: Path) -> None:
        frames = load_store(Path(store_dir), (*measured, *curves), measured_only=True)  # NeuSight's rows too
        index: dict[str, Any] = {"measured": [], "curves": [], "devices": []}
        devices = {str(d) for frame in frames.values() for d in frame["device_id"].unique()}
        for family, frame in sorted(frames.items()):
            _write_groups(tmp, family, frame, family in measured, index)
        index["devices"] = sorted(devices)
        (tmp / INDEX_NAME).write_text(json.dumps(index, sort_keys=True))

    atomic_write_dir(Path(folder), write, replace_existing=replace_existing)


def framework_key(framework: str) -> str:
    """How the store's per-framework tables spell ``framework``: ``store.framework_name`` of one name
    (``VLLM``, ``SGLang``, ``TensorRT-LLM`` -> vllm, sglang, trtllm), without pandas (a warm question
    reads the split's index and imports none)."""
    import re

    name = re.sub(r"[-_]", "", str(framework).lower())
    return "trtllm" if name == "tensorrtllm" else name


FRAMEWORK_PREFIX = "framework-"  # a split's subfolder of one serving framework's groups (framework_split)


def framework_split(
    groups: Any, store_dir: Path, framework: str, measured: tuple[str, ...], curves: tuple[str, ...]
) -> tuple[GroupFrames, GroupFrames] | None:
    """(measured groups, curve groups) of the rows ``framework`` measured (``store.load_framework_rows``:
    the same rows in the same order), split beside the pooled split ``groups`` was read from: written by
    the first engine that answers for ``framework`` (``OpEngine.for_framework``; the register stage's
    ``serving.prepare`` for the champion), then each group read on first use and its table saved beside.
    None where ``groups`` is not a split's or the store keeps no per-framework rows of these families."""
    from components.opmodel.store import FRAMEWORK_DIR

    families = [
        f for f in (*measured, *curves) if (Path(store_dir) / FRAMEWORK_DIR / f"{f}.parquet").is_file()
    ]
    if not isinstance(groups, GroupFrames) or not families:
        return None
    folder = groups.folder / f"{FRAMEWORK_PREFIX}{framework_key(framework)}"

    def write(tmp: Path) -> None:
        from components.opmodel.store import load_framework_rows

        index: dict[str, Any] = {"measured": [], "curves": []}
        for family in families:
            rows = load_framework_rows(Path(store_dir), family, framework)
            if rows is not None and len(rows):
                _write_groups(tmp, family, rows, family in measured, index)
        (tmp / INDEX_NAME).write_text(json.dumps(index, sort_keys=True))

    def rebuild() -> None:  # the subfolder vanished with its split (another process's trim): again
        from components.common.atomic import atomic_write_dir

        atomic_write_dir(folder, write, replace_existing=False)

    if not (folder / INDEX_NAME).is_file():
        rebuild()
    index = json.loads((folder / INDEX_NAME).read_text())

    return tuple(
        GroupFrames(folder, {tuple(k): name for k, name, _ in index[kind]}, rebuild)
        for kind in ("measured", "curves")
    )  # type: ignore[return-value]


def open_split(
    store_dir: Path, cache_root: Path, measured: tuple[str, ...], curves: tuple[str, ...]
) -> tuple[GroupFrames, GroupFrames, list[str]]:
    """(measured groups, curve groups, the store's devices) of ``store_dir``, split under ``cache_root``
    first when no split of the store's current files is there."""
    tag = "-".join((*measured, "with", *curves))
    folder = Path(cache_root) / f"{store_digest(store_dir)}-{tag}"
    if not (folder / INDEX_NAME).is_file():
        from components.common.cache_budget import trim_folders

        split_store(store_dir, folder, measured, curves)
        trim_folders(Path(cache_root), f"-{tag}", keep=KEEP_SPLITS)  # older stores' splits are not read again
    index = json.loads((folder / INDEX_NAME).read_text())
    with contextlib.suppress(OSError):  # marks the split as in use: the trim keeps the newest
        os.utime(folder)

    def rebuild() -> None:
        split_store(store_dir, folder, measured, curves, replace_existing=False)

    def frames(kind: str) -> GroupFrames:
        return GroupFrames(folder, {tuple(key): name for key, name, _ in index[kind]}, rebuild)

    return frames("measured"), frames("curves"), list(index["devices"])
