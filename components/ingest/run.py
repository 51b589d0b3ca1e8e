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

from components.atomic import atomic_write
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

    @property
    def sources(self) -> list[str]:
        return list(self.rows_in)


def _sorted(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return frame.sort_values(keys, kind="mergesort", na_position="last").reset_index(drop=True)


def merge_outputs(outputs: list[AdapterOutput]) -> IngestResult:
    """Concatenate adapter outputs into one result: ids filled, kernels deduplicated, rows sorted."""
    for output in outputs:
        output.check_balance()
    measurements = conform(pd.concat([o.measurements for o in outputs] or [pd.DataFrame()], ignore_index=True),
                           MEASUREMENT_COLUMNS)
    measurements = with_measurement_ids(measurements)
    duplicated = measurements["measurement_id"].duplicated(keep=False)
    if duplicated.any():
        clash = measurements.loc[duplicated, ["source", "upstream_file", "upstream_row", "run_id"]].head(4)
        raise IngestError(f"{int(duplicated.sum())} measurements share a measurement key, e.g.:\n{clash.to_string()}")
    kernels = conform(pd.concat([o.kernels for o in outputs] or [pd.DataFrame()], ignore_index=True), KERNEL_COLUMNS)
    rejects = conform(pd.concat([o.rejects for o in outputs] or [pd.DataFrame()], ignore_index=True), REJECT_COLUMNS)
    return IngestResult(
        measurements=_sorted(measurements, ["source", "upstream_file", "upstream_row", "measurement_id"]),
        kernels=_sorted(kernels, ["kernel_id"]).drop_duplicates("kernel_id").reset_index(drop=True),
        rejects=_sorted(rejects, ["source", "upstream_file", "upstream_row", "reason"]),
        rows_in={o.source: o.rows_in for o in outputs},
        notes={o.source: list(o.notes) for o in outputs},
    )


def ingest_sources(sources: list[str], roots: dict[str, Path], catalog: Any,
                   progress: Callable[[str], None] | None = None) -> IngestResult:
    """Run each source's adapter on ``roots[source]`` and merge the canonical tables."""
    outputs: list[AdapterOutput] = []
    for source in dict.fromkeys(sources):  # a source named twice is ingested once
        adapter = get_adapter(source)
        if source not in roots:
            raise ValueError(f"no root directory given for source {source!r}")
        if progress:
            progress(f"ingesting {source} from {roots[source]}")
        outputs.append(adapter(Path(roots[source]), catalog))
    return merge_outputs(outputs)


def summarise(result: IngestResult) -> pd.DataFrame:
    """Rows per source and device; each source's rejects on one extra ``(rejected)`` row."""
    counts = (result.measurements.groupby(["source", "device_id"], dropna=False).size()
              .rename("rows").reset_index())
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


def write_canonical(result: IngestResult, out_dir: Path) -> dict[str, Path]:
    """Write the three tables and summary.json (last, so its presence means the set is complete)."""
    out_dir = Path(out_dir)
    frames = {"measurements.parquet": result.measurements, "kernels.parquet": result.kernels,
              "rejects.parquet": result.rejects}
    paths: dict[str, Path] = {}
    for name, frame in frames.items():
        paths[name] = out_dir / name
        # One row group, no pandas index: the bytes depend on the rows alone.
        atomic_write(paths[name], lambda p, f=frame: f.to_parquet(p, index=False, engine="pyarrow",
                                                                   compression="zstd", row_group_size=len(f) or 1))
    paths["summary.json"] = out_dir / "summary.json"
    text = json.dumps(summary_dict(result), indent=2, sort_keys=False) + "\n"
    atomic_write(paths["summary.json"], lambda p: p.write_text(text, encoding="utf-8"))
    return paths


# ----------------------------------------------------------------------------------------------
# Upstream repositories
# ----------------------------------------------------------------------------------------------
def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_LFS_SKIP_SMUDGE": "1"}  # never prompt, no LFS blobs
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                          check=False)


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
        raise IngestError("git is not installed: cannot fetch upstream sources (pass a local directory instead)")
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
                raise IngestError(f"cannot fetch {url} at {commit} (offline, or no such repository?): "
                                  f"{_last_line(done.stderr)}")
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
