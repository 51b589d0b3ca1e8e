"""Adapter for KernelBench: wall-clock runtimes of PyTorch reference programs on many GPUs.

Timing files ``.../results/timing/<GPU folder>/baseline_time_<config>.json`` map
``{level: {problem file: {mean, std, min, max, num_trials, hardware, device}}}`` (ms). Each file
is paired with the problem tree it was measured on: ``_v0.0/KernelBench`` for v0.0 files,
``KernelBench`` for v0.1+ files; the bundle's PROVENANCE.csv (when beside the source) names the
problem set of every ``_history/`` file, and intermediate trees are not bundled (no source text).
The per-entry ``hardware`` field names the GPU, never the folder (folders mix GPUs).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pandas as pd

from components.ingest.base import AdapterOutput, IngestError, require_dir
from components.ingest.schema import (
    KERNEL_COLUMNS,
    MEASUREMENT_COLUMNS,
    REJECT_COLUMNS,
    canonical_json,
    conform,
    stable_id,
)

SOURCE = "kernelbench"
PROBLEM_TREES: dict[str, str] = {"v0.0": "_v0.0/KernelBench", "v0.1+": "KernelBench"}
# A file whose values are 1,000-12,000x those of the same problems elsewhere, in another schema
# (MANIFEST): unusable until someone finds out what it measured.
UNUSABLE: dict[str, str] = {
    "results/timing/A6000_babel_new/baseline_time_torch.json":
        "unusable file: different schema ({mean} only) and values 1000-12000x other A6000 timings",
}


def problem_sets_from_provenance(root: Path) -> dict[str, str]:
    """bundle-relative timing path -> ``v0.0`` | ``v0.1+`` | ``intermediate@<commit>``."""
    provenance = root.parent / "PROVENANCE.csv"
    if not provenance.is_file():
        return {}
    out = {}
    with provenance.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row.get("source") != SOURCE or "/results/timing/" not in "/" + row["bundle_path"]:
                continue
            note = row.get("note", "")
            match = re.search(r"problem_set=([^;]+)", note)
            first = re.search(r"first_commit_with_this_blob=([0-9a-f]+)", note)
            if match:
                value = match.group(1).strip()
                if value == "intermediate" and first:
                    value = f"intermediate@{first.group(1)}"
                out[row["bundle_path"].removeprefix(f"{SOURCE}/")] = value
    return out


def infer_problem_set(relpath: str, provenance: dict[str, str]) -> str:
    if relpath in provenance:
        return provenance[relpath]
    if relpath.startswith("_v0.0/"):
        return "v0.0"
    if relpath.startswith("results/"):
        return "v0.1+"
    return "unknown"


def _problem_text(root: Path, problem_set: str, level: str, problem: str) -> str | None:
    tree = PROBLEM_TREES.get(problem_set)
    if tree is None:
        return None
    path = root / tree / level / problem
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise IngestError(f"{path}: expected an object of levels, got {type(data).__name__}")
    return data


def _entries(data: dict) -> list[tuple[str, str, object]]:
    out = []
    for level, problems in data.items():
        if isinstance(problems, dict):
            out.extend((level, problem, entry) for problem, entry in problems.items())
        else:
            out.append((level, "", problems))
    return out


def ingest(root: Path, catalog) -> AdapterOutput:  # noqa: ANN001 -- catalog: components.devices.Catalog
    require_dir(root, SOURCE)
    provenance = problem_sets_from_provenance(root)
    files = sorted(p for p in root.rglob("*.json") if "results/timing/" in p.relative_to(root).as_posix())
    if not files:
        raise IngestError(f"{SOURCE}: no results/timing/**/*.json under {root}")
    measurements, rejects, kernels, rows_in = [], [], {}, 0
    texts: dict[tuple[str, str, str], str | None] = {}
    for path in files:
        relpath = path.relative_to(root).as_posix()
        problem_set = infer_problem_set(relpath, provenance)
        config = path.stem.removeprefix("baseline_time_")
        for index, (level, problem, entry) in enumerate(_entries(_load(path))):
            rows_in += 1
            reason = None
            unusable = next((why for suffix, why in UNUSABLE.items() if relpath.endswith(suffix)), None)
            if unusable:
                reason = unusable
            elif entry is None:
                reason = "run failed (null)"
            elif not isinstance(entry, dict) or not isinstance(entry.get("mean"), (int, float)):
                reason = f"no numeric mean in entry ({str(entry)[:80]})"
            if reason is None:
                try:
                    device = catalog.resolve(str(entry.get("hardware") or entry.get("device")))
                except LookupError as exc:
                    reason = str(exc.args[0] if exc.args else exc)
            if reason is not None:
                rejects.append({"source": SOURCE, "upstream_file": relpath, "upstream_row": index,
                                "reason": reason, "raw": f"{level}/{problem}: {str(entry)[:300]}"})
                continue
            key = (problem_set, level, problem)
            if key not in texts:
                texts[key] = _problem_text(root, problem_set, level, problem)
            kernel_id = stable_id(SOURCE, problem_set, level, problem)
            kernels.setdefault(kernel_id, {
                "kernel_id": kernel_id, "source": SOURCE, "family": "program", "op": problem.removesuffix(".py"),
                "name": problem, "language": "pytorch", "program": f"{level}/{problem}",
                "source_path": f"{PROBLEM_TREES[problem_set]}/{level}/{problem}" if texts[key] else None,
                "source_text": texts[key], "shape_json": canonical_json({"problem_set": problem_set}),
                "dtype": "fp32"})
            measurements.append({
                "kernel_id": kernel_id, "device_id": device.id, "device_name_raw": entry.get("hardware"),
                "source": SOURCE, "upstream_file": relpath, "upstream_row": index, "profiler": "cuda_event",
                "clock_mode": "unknown", "run_id": relpath,
                "params_json": canonical_json({"config": config, "problem_set": problem_set}),
                "duration_us": float(entry["mean"]) * 1000.0,
                "duration_std_us": float(entry["std"]) * 1000.0 if isinstance(entry.get("std"), (int, float)) else None,
                "n_trials": entry.get("num_trials"),
            })
    output = AdapterOutput(SOURCE, conform(pd.DataFrame(measurements), MEASUREMENT_COLUMNS),
                           conform(pd.DataFrame(list(kernels.values())), KERNEL_COLUMNS),
                           conform(pd.DataFrame(rejects), REJECT_COLUMNS), rows_in)
    output.check_balance()
    return output
