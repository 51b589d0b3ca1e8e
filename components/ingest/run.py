"""Run source adapters and write the canonical tables, deterministically.

``ingest_sources`` runs each adapter on its root and merges the outputs; ``write_canonical``
writes ``measurements/kernels/rejects.parquet`` and ``summary.json`` with sorted rows and no
timestamps or absolute paths, so ``dvc repro`` reproduces them bit for bit. ``fetch_upstream``
brings a source's repository to its pinned commit when no local copy is given.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from components.common.atomic import atomic_write
from components.ingest.base import AdapterOutput, IngestError
from components.ingest.registry import UPSTREAMS, get_adapter
from components.ingest.schema import (
    KERNEL_COLUMNS,
    MEASUREMENT_COLUMNS,
    REJECT_COLUMNS,
    conform,
    with_measurement_ids,
)

TABLES: tuple[str, ...] = ("measurements.parquet", "kernels.parquet", "rejects.parquet")
REJECTED = "(rejected)"  # device column of the summary row that counts a source's rejects
GIT_TIMEOUT_S = 600
_UNKNOWN_DEVICE = re.compile(r"^unknown device '(?P<name>.*)'$")


@dataclass
class IngestResult:
    """The merged canonical tables of several sources, plus per-source bookkeeping."""

    measurements: pd.DataFrame
    kernels: pd.DataFrame
    rejects: pd.DataFrame
    rows_in: dict[str, int]
    notes: dict[str, list[str]] = field(default_factory=dict)
    # DeviceSpecs the sources described themselves (aiconfigurator spec sheets of GPUs the catalog lacks).
    devices: list = field(default_factory=list)

    @property
    def sources(self) -> list[str]:
        return list(self.rows_in)


def _sorted(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return frame.sort_values(keys, kind="mergesort", na_position="last").reset_index(drop=True)


def merge_outputs(outputs: list[AdapterOutput]) -> IngestResult:
    """Concatenate adapter outputs into one result: ids filled, kernels deduplicated, rows sorted."""
    for output in outputs:
        output.check_balance()
    measurements = conform(
        pd.concat([o.measurements for o in outputs] or [pd.DataFrame()], ignore_index=True),
        MEASUREMENT_COLUMNS,
    )
    measurements = with_measurement_ids(measurements)
    duplicated = measurements["measurement_id"].duplicated(keep=False)
    if duplicated.any():
        clash = measurements.loc[duplicated, ["source", "upstream_file", "upstream_row", "run_id"]].head(4)
        raise IngestError(
            f"{int(duplicated.sum())} measurements share a measurement key, e.g.:\n{clash.to_string()}"
        )
    kernels = conform(
        pd.concat([o.kernels for o in outputs] or [pd.DataFrame()], ignore_index=True), KERNEL_COLUMNS
    )
    rejects = conform(
        pd.concat([o.rejects for o in outputs] or [pd.DataFrame()], ignore_index=True), REJECT_COLUMNS
    )
    return IngestResult(
        measurements=_sorted(measurements, ["source", "upstream_file", "upstream_row", "measurement_id"]),
        kernels=_sorted(kernels, ["kernel_id"]).drop_duplicates("kernel_id").reset_index(drop=True),
        rejects=_sorted(rejects, ["source", "upstream_file", "upstream_row", "reason"]),
        rows_in={o.source: o.rows_in for o in outputs},
        notes={o.source: list(o.notes) for o in outputs},
        devices=[spec for o in outputs for spec in o.devices],
    )


def _run_adapter(source: str, root: Path, catalog: Any) -> AdapterOutput:
    return get_adapter(source)(Path(root), catalog)


def ingest_workers(n_sources: int) -> int:
    """Processes for ``n_sources`` adapters: ``KERNELCAST_INGEST_WORKERS`` if set, else one per idle core
    (cores less the 1-minute load average; at most 4, each holds a source's tables in memory), never more
    than there are sources. On a busy box side-by-side adapters only add spawn and pickling (measured on
    the shared 2-core box at load 6: 2 processes 72 s CPU / 168 s wall against 67 s / 147 s in one)."""
    wanted = os.environ.get("KERNELCAST_INGEST_WORKERS", "").strip()
    try:
        limit = int(wanted) if wanted else min((os.cpu_count() or 1) - round(os.getloadavg()[0]), 4)
    except ValueError:
        raise ValueError(f"KERNELCAST_INGEST_WORKERS={wanted!r}: a whole number of processes") from None
    return max(1, min(limit, n_sources))


def ingest_sources(
    sources: list[str], roots: dict[str, Path], catalog: Any, progress: Callable[[str], None] | None = None
) -> IngestResult:
    """Run each source's adapter on ``roots[source]`` and merge the canonical tables. Adapters read
    independent folders, so several run side by side in spawned processes (``ingest_workers``); the
    outputs merge in the order asked, so the tables are the same bit for bit however many ran."""
    chosen = list(dict.fromkeys(sources))  # a source named twice is ingested once
    for source in chosen:
        get_adapter(source)  # an unknown source fails before any work
        if source not in roots:
            raise ValueError(f"no root directory given for source {source!r}")
    workers = ingest_workers(len(chosen))
    if workers == 1:
        outputs = []
        for source in chosen:
            if progress:
                progress(f"ingesting {source} from {roots[source]}")
            outputs.append(_run_adapter(source, Path(roots[source]), catalog))
        return merge_outputs(outputs)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = []
        for source in chosen:
            if progress:
                progress(f"ingesting {source} from {roots[source]} ({workers} processes)")
            futures.append(pool.submit(_run_adapter, source, Path(roots[source]), catalog))
        outputs = [future.result() for future in futures]
    return merge_outputs(outputs)


def summarise(result: IngestResult) -> pd.DataFrame:
    """Rows per source and device; each source's rejects on one extra ``(rejected)`` row."""
    counts = (
        result.measurements.groupby(["source", "device_id"], dropna=False).size().rename("rows").reset_index()
    )
    counts["rejects"] = 0
    rejected = result.rejects.groupby("source").size().rename("rejects").reset_index()
    rejected["device_id"] = REJECTED
    rejected["rows"] = 0
    table = pd.concat([counts, rejected[["source", "device_id", "rows", "rejects"]]], ignore_index=True)
    table["source"] = table["source"].astype(str)
    table["device_id"] = table["device_id"].astype(str)
    table = table.sort_values(["source", "device_id"], kind="mergesort").reset_index(drop=True)
    return table.astype({"rows": "int64", "rejects": "int64"})


def unknown_devices(result: IngestResult) -> list[str]:
    """Raw device names that did not resolve in the catalog (each a candidate catalog entry)."""
    names = result.rejects["reason"].dropna().astype(str).str.extract(_UNKNOWN_DEVICE)["name"].dropna()
    return sorted(set(names))


def summary_dict(result: IngestResult) -> dict[str, Any]:
    """Everything summary.json records: deterministic (no timestamps, no machine paths)."""
    table = summarise(result)
    by_source: dict[str, Any] = {}
    for source in sorted(result.rows_in):
        rows = table[(table["source"] == source) & (table["device_id"] != REJECTED)]
        n_rejects = int((result.rejects["source"] == source).sum())
        upstream = UPSTREAMS.get(source)
        by_source[source] = {
            "rows_in": int(result.rows_in[source]),
            "measurements": int(rows["rows"].sum()),
            "rejects": n_rejects,
            "kernels": int((result.kernels["source"] == source).sum()),
            "by_device": {str(d): int(n) for d, n in zip(rows["device_id"], rows["rows"], strict=True)},
            "upstream": {"repo": upstream.repo, "commit": upstream.commit} if upstream else None,
            "notes": result.notes.get(source, []),
        }
    return {
        "rows_in": int(sum(result.rows_in.values())),
        "measurements": len(result.measurements),
        "kernels": len(result.kernels),
        "rejects": len(result.rejects),
        "unknown_devices": unknown_devices(result),
        "by_source": by_source,
    }


def write_canonical(
    result: IngestResult, out_dir: Path, after_first: Callable[[], None] | None = None
) -> dict[str, Path]:
    """Write the three tables and summary.json (last, so its presence means the set is complete).

    This writes the tables of ``result`` alone; ``commit_canonical`` is what an ingest uses (it
    keeps other sources' rows). ``after_first`` runs after the first table (fault injection)."""
    out_dir = Path(out_dir)
    frames = {
        "measurements.parquet": result.measurements,
        "kernels.parquet": result.kernels,
        "rejects.parquet": result.rejects,
    }
    paths: dict[str, Path] = {}
    for name, frame in frames.items():
        paths[name] = out_dir / name
        # One row group, no pandas index: the bytes depend on the rows alone.
        atomic_write(
            paths[name],
            lambda p, f=frame: f.to_parquet(
                p, index=False, engine="pyarrow", compression="zstd", row_group_size=len(f) or 1
            ),
        )
        if after_first is not None and name == "measurements.parquet":
            after_first()
    paths["summary.json"] = out_dir / "summary.json"
    text = json.dumps(summary_dict(result), indent=2, sort_keys=False) + "\n"
    atomic_write(paths["summary.json"], lambda p: p.write_text(text, encoding="utf-8"))
    return paths


# ----------------------------------------------------------------------------------------------
# The canonical folder as partitions: adding a source never loses another's rows
# ----------------------------------------------------------------------------------------------
# Layout: ``<out>/parts/<key>/{measurements,kernels,rejects}.parquet + part.json``, one partition
# per public source (key = source) and per profiled run (key = ``kernelcast@<run folder>``), and
# beside them the merged tables every reader uses (measurements/kernels/rejects.parquet,
# summary.json). An ingest replaces only its own partitions: it builds the whole new folder in a
# sibling temp folder (unchanged partitions hard-linked) and swaps it in with one atomic rename, so
# a process killed at any moment leaves the previous complete folder (or the new complete one).
PARTS_DIR = "parts"
PART_META = "part.json"
# Sources whose rows are partitioned per run (a profiled run replaces that run's rows only).
# A team's CSV (``csv``) is partitioned per file: re-ingesting a file replaces that file's rows.
RUN_PARTITIONED: frozenset[str] = frozenset({"kernelcast", "csv"})
# Test-only fault injection: when this variable names a point below, the process SIGKILLs itself
# there (tests/integration/test_ingest_partitions.py proves a kill leaves complete tables).
FAULT_ENV = "KERNELCAST_FAULT_INJECT"
FAULT_POINTS: tuple[str, ...] = (
    "ingest-part-written",
    "ingest-merged-half-written",
    "ingest-before-swap",
    "ingest-after-swap",
)
_RENAME_EXCHANGE = 2  # linux/fs.h


def fault_point(name: str) -> None:
    """Fault injection for tests: SIGKILL this process at ``name`` when FAULT_ENV says so."""
    if os.environ.get(FAULT_ENV) == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Part(AdapterOutput):
    """One source's (or one profiled run's) canonical rows, stored under ``key``."""

    key: str = field(kw_only=True)


def _run_of(upstream_file: pd.Series, run_id: pd.Series | None = None) -> pd.Series:
    """The run a row came from: the first folder of its upstream_file (a profiled run folder); a file at
    the root is its own run (a team's CSV); a row without a file falls back to its ``run_id``."""
    files = upstream_file.astype("string").fillna("")
    first = files.str.split("/", n=1).str[0]
    if run_id is not None:
        first = first.where(first != "", run_id.astype("string").fillna(""))
    return first.fillna("").astype(str)


def part_key(source: str, run: str | None = None) -> str:
    """``source``, or ``source@run`` for a run-partitioned source (run made path-safe)."""
    if not run:
        return source
    return f"{source}@{re.sub(r'[^A-Za-z0-9_.-]+', '_', run).strip('_.') or 'run'}"


def split_parts(result: IngestResult) -> list[Part]:
    """The result cut into partitions: one per source, one per run for run-partitioned sources."""
    parts: list[Part] = []
    for source in sorted(result.rows_in):
        m = result.measurements[result.measurements["source"] == source]
        k = result.kernels[result.kernels["source"] == source]
        r = result.rejects[result.rejects["source"] == source]
        notes = list(result.notes.get(source, []))
        if source not in RUN_PARTITIONED:
            parts.append(Part(source, m, k, r, int(result.rows_in[source]), notes, key=source))
            continue
        m_runs = _run_of(m["upstream_file"], m["run_id"])
        r_runs = _run_of(r["upstream_file"])
        runs = sorted(set(m_runs) | set(r_runs)) or [""]
        kernel_ids = k["kernel_id"].astype(str)
        unused = ~kernel_ids.isin(set(m["kernel_id"].astype(str)))  # kept with the first run, never dropped
        for i, run in enumerate(runs):
            pm, pr = m[(m_runs == run).to_numpy()], r[(r_runs == run).to_numpy()]
            mine = kernel_ids.isin(set(pm["kernel_id"].astype(str))) | (unused if i == 0 else False)
            key = part_key(source, run)
            parts.append(Part(source, pm, k[mine], pr, len(pm) + len(pr), notes if i == 0 else [], key=key))
    return parts


def _write_part(part: Part, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, frame in (
        ("measurements.parquet", part.measurements),
        ("kernels.parquet", part.kernels),
        ("rejects.parquet", part.rejects),
    ):
        frame.reset_index(drop=True).to_parquet(
            folder / name, index=False, engine="pyarrow", compression="zstd", row_group_size=len(frame) or 1
        )
    meta = {
        "key": part.key,
        "source": part.source,
        "rows_in": part.rows_in,
        "measurements": len(part.measurements),
        "rejects": len(part.rejects),
        "notes": part.notes,
    }
    (folder / PART_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _read_part(folder: Path) -> Part:
    try:
        meta = json.loads((folder / PART_META).read_text())
        return Part(
            str(meta["source"]),
            conform(pd.read_parquet(folder / "measurements.parquet"), MEASUREMENT_COLUMNS),
            conform(pd.read_parquet(folder / "kernels.parquet"), KERNEL_COLUMNS),
            conform(pd.read_parquet(folder / "rejects.parquet"), REJECT_COLUMNS),
            int(meta["rows_in"]),
            [str(n) for n in meta.get("notes", [])],
            key=str(meta["key"]),
        )
    except (OSError, KeyError, ValueError) as exc:
        raise IngestError(f"{folder}: unreadable canonical partition ({exc}); re-ingest its source") from None


def existing_parts(out_dir: Path) -> dict[str, Path | Part]:
    """The partitions already in ``out_dir``: folders under parts/, or -- a folder written before
    partitions existed -- its merged tables cut per source (so that data is kept too)."""
    out_dir = Path(out_dir)
    parts_dir = out_dir / PARTS_DIR
    if parts_dir.is_dir():
        return {p.name: p for p in sorted(parts_dir.iterdir()) if p.is_dir() and (p / PART_META).is_file()}
    if not all((out_dir / name).is_file() for name in TABLES):
        return {}
    summary_path = out_dir / "summary.json"
    by_source = json.loads(summary_path.read_text()).get("by_source", {}) if summary_path.is_file() else {}
    m = conform(pd.read_parquet(out_dir / "measurements.parquet"), MEASUREMENT_COLUMNS)
    k = conform(pd.read_parquet(out_dir / "kernels.parquet"), KERNEL_COLUMNS)
    r = conform(pd.read_parquet(out_dir / "rejects.parquet"), REJECT_COLUMNS)
    sources = sorted(set(m["source"].dropna().astype(str)) | set(r["source"].dropna().astype(str)))
    rows_in = {
        s: int(by_source.get(s, {}).get("rows_in", ((m["source"] == s).sum() + (r["source"] == s).sum())))
        for s in sources
    }
    notes = {s: list(by_source.get(s, {}).get("notes", [])) for s in sources}
    legacy = IngestResult(m, k, r, rows_in, notes)
    return {part.key: part for part in split_parts(legacy)}


def merge_parts(parts: list[Part]) -> IngestResult:
    """Partitions -> the merged canonical tables (a source's runs counted together)."""
    by_source: dict[str, list[Part]] = {}
    for part in parts:
        by_source.setdefault(part.source, []).append(part)
    outputs = [
        AdapterOutput(
            source,
            pd.concat([p.measurements for p in group], ignore_index=True),
            pd.concat([p.kernels for p in group], ignore_index=True),
            pd.concat([p.rejects for p in group], ignore_index=True),
            sum(p.rows_in for p in group),
            [n for p in group for n in p.notes],
        )
        for source, group in sorted(by_source.items())
    ]
    return merge_outputs(outputs)


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link a partition's files (never modified in place, only replaced), copy if links fail."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        try:
            os.link(path, dst / path.name)
        except OSError:
            shutil.copy2(path, dst / path.name)


def _swap_in(new: Path, target: Path) -> None:
    """Put folder ``new`` at ``target`` in one atomic step (RENAME_EXCHANGE where the kernel and
    filesystem have it); afterwards ``new`` holds the previous folder, or nothing."""
    if not target.exists():
        os.rename(new, target)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        at_fdcwd = -100
        if renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(target), _RENAME_EXCHANGE) == 0:
            return
    # No atomic exchange here: move the old folder aside first. A kill between the two renames
    # leaves ``<target>.old`` and no target; recover_canonical() puts it back on the next run.
    aside = target.with_name(f".{target.name}.old")
    if aside.exists():
        shutil.rmtree(aside)
    os.rename(target, aside)
    os.rename(new, target)
    os.rename(aside, new) if not new.exists() else shutil.rmtree(aside)


def recover_canonical(out_dir: Path) -> None:
    """Undo what a killed ingest left: temp folders removed, a folder moved aside put back."""
    out_dir = Path(out_dir)
    aside = out_dir.with_name(f".{out_dir.name}.old")
    if aside.is_dir() and not out_dir.exists():
        os.rename(aside, out_dir)
    elif aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    for stale in out_dir.parent.glob(f".{out_dir.name}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)


class _Lock:
    """An exclusive lock beside the canonical folder: two ingests never merge from the same old state."""

    def __init__(self, out_dir: Path) -> None:
        self.path = Path(out_dir).with_name(f".{Path(out_dir).name}.lock")

    def __enter__(self) -> _Lock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        import fcntl

        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def _check_own_folder(out_dir: Path) -> None:
    """The folder is swapped whole: refuse one holding anything but the canonical tables."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise IngestError(f"--out {out_dir}: not a folder")
    ours = {*TABLES, "summary.json", PARTS_DIR}
    foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in ours)
    if foreign:
        raise IngestError(
            f"--out {out_dir} holds other files ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}): give the canonical tables a folder of their own"
        )


@dataclass
class CommitResult:
    paths: dict[str, Path]
    replaced: list[str]  # partition keys written by this ingest
    kept: list[str]  # partition keys carried over unchanged
    merged: IngestResult


def commit_canonical(result: IngestResult, out_dir: Path) -> CommitResult:
    """Replace the partitions of ``result``'s sources (runs) in ``out_dir``, keep every other one,
    rewrite the merged tables; all of it lands in one atomic swap of the folder."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with _Lock(out_dir):
        recover_canonical(out_dir)
        _check_own_folder(out_dir)
        new_parts = split_parts(result)
        new_keys = {p.key for p in new_parts}
        ingested = set(result.rows_in)
        old = existing_parts(out_dir)

        def replaced_by_this_ingest(key: str, part: Path | Part) -> bool:
            source = part.source if isinstance(part, Part) else key.split("@", 1)[0]
            return key in new_keys or (source in ingested and source not in RUN_PARTITIONED)

        kept = {key: part for key, part in old.items() if not replaced_by_this_ingest(key, part)}
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
        try:
            for key, part in kept.items():
                if isinstance(part, Part):
                    _write_part(part, tmp / PARTS_DIR / key)
                else:
                    _link_tree(part, tmp / PARTS_DIR / key)
            for part in new_parts:
                _write_part(part, tmp / PARTS_DIR / part.key)
            fault_point("ingest-part-written")
            everything = [p if isinstance(p, Part) else _read_part(p) for p in kept.values()] + new_parts
            merged = merge_parts(everything)
            paths = write_canonical(
                merged, tmp, after_first=lambda: fault_point("ingest-merged-half-written")
            )
            os.chmod(tmp, 0o755)  # mkdtemp makes 0700; the tables are shared
            fault_point("ingest-before-swap")
            _swap_in(tmp, out_dir)
            fault_point("ingest-after-swap")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return CommitResult(
        {name: out_dir / path.name for name, path in paths.items()}, sorted(new_keys), sorted(kept), merged
    )


# ----------------------------------------------------------------------------------------------
# Upstream repositories
# ----------------------------------------------------------------------------------------------
def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_LFS_SKIP_SMUDGE": "1"}  # never prompt, no LFS blobs
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
    )


def _head(path: Path) -> str | None:
    if not (path / ".git").exists():
        return None
    done = _git(["rev-parse", "HEAD"], cwd=path)
    return done.stdout.strip() if done.returncode == 0 else None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def fetch_upstream(url: str, commit: str, cache_dir: Path) -> Path:
    """A checkout of ``url`` at ``commit`` under ``cache_dir`` (reused when already there).

    Fetches only that commit (shallow) where the server allows it, else clones and checks out.
    Offline, or a commit the remote lacks: IngestError naming the URL and commit.
    """
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise ValueError(f"pinned commit must be 40 hex digits, got {commit!r}")
    if shutil.which("git") is None:
        raise IngestError(
            "git is not installed: cannot fetch upstream sources (pass a local directory instead)"
        )
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", re.sub(r"(\.git)?/*$", "", url).split("://")[-1]).strip("_")
    target = Path(cache_dir) / "upstream" / f"{slug[-80:]}@{commit[:12]}"
    if _head(target) == commit:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=target.parent))
    try:
        for step in (["init", "-q"], ["remote", "add", "origin", url]):
            prepared = _git(step, cwd=work)
            if prepared.returncode != 0:
                raise IngestError(f"git {step[0]} failed in {work}: {_last_line(prepared.stderr)}")
        done = _git(["fetch", "-q", "--depth", "1", "origin", commit], cwd=work)
        if done.returncode != 0:  # server refuses fetch-by-sha: fall back to the full history
            done = _git(["fetch", "-q", "origin"], cwd=work)
            if done.returncode != 0:
                raise IngestError(
                    f"cannot fetch {url} at {commit} (offline, or no such repository?): "
                    f"{_last_line(done.stderr)}"
                )
            checkout = _git(["checkout", "-q", commit], cwd=work)
        else:
            checkout = _git(["checkout", "-q", "FETCH_HEAD"], cwd=work)
        if checkout.returncode != 0 or _head(work) != commit:
            raise IngestError(f"{url} has no commit {commit}: {_last_line(checkout.stderr)}")
        if target.exists():
            shutil.rmtree(target)
        os.replace(work, target)
    except subprocess.TimeoutExpired:
        raise IngestError(f"fetching {url} at {commit} timed out after {GIT_TIMEOUT_S} s") from None
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target
