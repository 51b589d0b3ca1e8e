"""Adapter for KernelBench: wall-clock runtimes of PyTorch reference problems on many GPUs.

Timing files ``<tree>/results/timing/<gpu folder>/baseline_time_<config>.json`` hold
``{level: {problem_file: {mean, std, min, max, num_trials, hardware, device}}}`` in ms, one mean
over ``num_trials`` runs each. Three kinds of tree are read:

- ``results/timing/**``: measured on the v0.1+ problem set at ``KernelBench/level*``;
- ``_v0.0/results/timing/**``: measured on the original v0.0 problems at ``_v0.0/KernelBench/level*``;
- ``_history/<commit>/results/timing/**``: older versions; the bundle's ``PROVENANCE.csv`` note
  (``problem_set=``, ``problems=``) says which problem tree each was measured on.

The problem set is part of a kernel's identity: v0.0 and v0.1 problems with the same file name
have different sizes (level1/1 uses N = 2048 vs 4096). The per-entry ``hardware`` field names
the GPU, never the folder (``A10G_modal`` mixes A10 and A10G; ``H100_modal`` mixes in H200).
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from components.ingest.base import AdapterOutput, IngestError, require_dir
from components.ingest.schema import (
    KERNEL_COLUMNS,
    canonical_json,
    conform,
    stable_id,
)

SOURCE = "kernelbench"
PROVENANCE_NAME = "PROVENANCE.csv"  # next to the source folder in the shared bundle
REQUIRED_KEYS = ("mean", "std", "num_trials", "hardware")
# Files whose numbers are not runtimes we can interpret (MANIFEST section 3, caveats).
UNUSABLE_FILES: dict[str, str] = {
    "results/timing/A6000_babel_new/baseline_time_torch.json": (
        "unusable file: {mean}-only schema, values 1,000-12,000x A6000_babel for the same problems (MANIFEST)"
    ),
}
V01 = "v0.1+"
V00 = "v0.0"
# <tree>results/timing/[<gpu folder>/]<file>; early upstream commits kept files directly in timing/.
_TIMING = re.compile(
    r"^(?P<tree>(?:_v0\.0/|_history/(?P<commit>[0-9a-f]{8})/)?)results/timing/"
    r"(?:(?P<folder>.+)/)?(?P<file>[^/]+\.json)$"
)
_NOTE_SET = re.compile(r"problem_set=(?P<set>[^;]+)")
_NOTE_PROBLEMS = re.compile(r"problems=(?P<problems>[^;]+)")
_NOT_BUNDLED_AT = re.compile(r"at (?P<commit>[0-9a-f]{7,40})")


@dataclass(frozen=True)
class ProblemTree:
    """The problem set a timing file was measured on, and where its modules are (None: not bundled)."""

    version: str  # v0.0 | v0.1+ | intermediate@<commit> | unknown@<commit>
    directory: Path | None


@dataclass(frozen=True)
class RunConfig:
    """How the reference module was run, parsed from the timing file's name."""

    mode: str  # eager | torch.compile
    backend: str | None  # inductor | cudagraphs
    compile_mode: str | None  # default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs
    variant: str | None  # machine/run tag some old files carry in the name (matx2, cleaned)

    def params(self) -> dict[str, Any]:
        fields = {
            "mode": self.mode,
            "backend": self.backend,
            "compile_mode": self.compile_mode,
            "variant": self.variant,
        }
        return {k: v for k, v in fields.items() if v is not None}


def parse_config(file_name: str) -> RunConfig:
    """Config from a timing file name; ValueError on a name outside KernelBench's conventions.

    ``baseline_time_torch.json`` eager; ``..._torch_compile_inductor_<mode>.json``;
    ``..._torch_compile_cudagraphs.json`` (backend, no mode); ThunderKittens' ``baseline_time.json``,
    ``..._torch_compile.json`` (inductor default) and ``..._torch_compile_mode_<mode>.json``;
    old runs' ``baseline_time_<tag>.json`` / ``..._torch_compile_<tag>.json``.
    """
    stem = file_name.removesuffix(".json")
    if not stem.startswith("baseline_time"):
        raise ValueError(f"not a KernelBench timing file name: {file_name!r}")
    rest = stem.removeprefix("baseline_time").lstrip("_")
    if rest in ("", "torch"):
        return RunConfig("eager", None, None, None)
    compile_prefix = "torch_compile"
    if rest.startswith(compile_prefix):
        tail = rest.removeprefix(compile_prefix).lstrip("_")
        if tail == "":
            return RunConfig("torch.compile", "inductor", "default", None)
        if tail.startswith("inductor_"):
            return RunConfig("torch.compile", "inductor", tail.removeprefix("inductor_"), None)
        if tail.startswith("mode_"):
            return RunConfig("torch.compile", "inductor", tail.removeprefix("mode_"), None)
        if tail == "cudagraphs":
            return RunConfig("torch.compile", "cudagraphs", None, None)
        return RunConfig("torch.compile", "inductor", "default", tail)
    return RunConfig("eager", None, None, rest)


def read_provenance(root: Path) -> dict[str, str]:
    """Upstream-relative timing path -> PROVENANCE note, when the bundle's PROVENANCE.csv is there."""
    path = root.parent / PROVENANCE_NAME
    if not path.is_file():
        return {}
    notes: dict[str, str] = {}
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                bundle = row.get("bundle_path") or ""
                if row.get("source") == SOURCE and bundle.startswith(f"{SOURCE}/"):
                    notes[bundle.removeprefix(f"{SOURCE}/")] = row.get("note") or ""
    except (csv.Error, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: unreadable provenance CSV ({exc})") from exc
    return notes


def problem_tree(root: Path, relpath: str, notes: dict[str, str]) -> ProblemTree:
    """Which problem set ``relpath`` was timed on: the PROVENANCE note first, the folder layout second."""
    match = _TIMING.match(relpath)
    if not match:
        raise ValueError(f"not under a results/timing/ folder: {relpath}")
    note = notes.get(relpath)
    if note:
        set_match, problems_match = _NOTE_SET.search(note), _NOTE_PROBLEMS.search(note)
        version = set_match["set"].strip() if set_match else "unknown"
        problems = problems_match["problems"].strip() if problems_match else ""
        if problems.startswith(f"{SOURCE}/"):
            return ProblemTree(version, root / problems.removeprefix(f"{SOURCE}/"))
        # "not bundled (KernelBench/level* at 181539ee)": name the tree by its commit, no source.
        at = _NOT_BUNDLED_AT.search(problems)
        return ProblemTree(f"{version}@{at['commit']}" if at else version, None)
    if match["commit"]:
        # A _history file outside the bundle's provenance: its tree is not known, so neither is its source.
        return ProblemTree(f"unknown@{match['commit']}", None)
    if match["tree"] == "_v0.0/":
        return ProblemTree(V00, root / "_v0.0" / "KernelBench")
    return ProblemTree(V01, root / "KernelBench")


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IngestError(f"{path}: not readable JSON ({type(exc).__name__}: {exc})") from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise IngestError(f"{path}: expected {{level: {{problem_file: entry}}}} at the top level")
    return data


def _entry_values(entry: Any) -> dict[str, Any]:
    """Validated timing values of one entry; ValueError with the reason to reject it."""
    if entry is None:
        raise ValueError("run failed (null)")
    if not isinstance(entry, dict):
        raise ValueError(f"malformed entry: {type(entry).__name__}, not an object")
    missing = [k for k in REQUIRED_KEYS if k not in entry]
    if missing:
        raise ValueError(f"unusable schema: missing {missing} (keys: {sorted(entry)})")
    mean, std, trials = entry["mean"], entry["std"], entry["num_trials"]
    for name, value in (("mean", mean), ("std", std)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} is not a finite number: {value!r}")
    if mean <= 0 or std < 0:
        raise ValueError(f"impossible timing: mean {mean!r} ms, std {std!r} ms")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"num_trials is not a positive integer: {trials!r}")
    hardware = entry["hardware"]
    if not isinstance(hardware, str) or not hardware.strip():
        raise ValueError(f"hardware is not a name: {hardware!r}")
    return {"mean": float(mean), "std": float(std), "num_trials": trials, "hardware": hardware.strip()}


def _reject(relpath: str, index: int, reason: str, raw: Any) -> dict[str, Any]:
    return {
        "source": SOURCE,
        "upstream_file": relpath,
        "upstream_row": index,
        "reason": reason,
        "raw": json.dumps(raw, sort_keys=True, default=str)[:500],
    }


def _problem_op(problem_file: str) -> str:
    """``19_ReLU.py`` -> ``ReLU``: the problem's name without its index and extension."""
    return re.sub(r"^\d+_", "", problem_file.removesuffix(".py")).strip("_") or problem_file


def _kernel_row(root: Path, tree: ProblemTree, level: str, problem_file: str) -> dict[str, Any]:
    path = tree.directory / level / problem_file if tree.directory is not None else None
    text = path.read_text(encoding="utf-8", errors="replace") if path is not None and path.is_file() else None
    return {
        "kernel_id": stable_id(SOURCE, tree.version, level, problem_file),
        "source": SOURCE,
        "family": "program",
        "op": _problem_op(problem_file),
        "name": f"{level}/{problem_file.removesuffix('.py')}@{tree.version}",
        "language": "pytorch",
        "program": f"{level}/{problem_file}",
        "source_path": path.relative_to(root).as_posix() if text is not None else None,
        "source_text": text,
        "dtype": "unknown",  # problems choose their own dtypes; not parsed here
    }


def _one_file(
    root: Path, path: Path, notes: dict[str, str], catalog, kernels: dict[str, dict[str, Any]]
) -> tuple[list[dict], list[dict], int]:
    relpath = path.relative_to(root).as_posix()
    try:
        tree, config = problem_tree(root, relpath, notes), parse_config(path.name)
    except ValueError as exc:
        raise IngestError(f"{path}: {exc}") from exc
    data = _load(path)
    # One run per file: "<tree>:<gpu folder>/<file stem>", e.g. "_v0.0:T4_modal/baseline_time_torch".
    run_id = (
        relpath.removesuffix(".json").replace("/results/timing/", ":").replace("results/timing/", "head:")
    )
    unusable = UNUSABLE_FILES.get(relpath)
    measurements, rejects, index = [], [], -1
    for level, problems in data.items():
        for problem_file, entry in problems.items():
            index += 1
            try:
                if unusable and entry is not None:
                    raise ValueError(unusable)
                values = _entry_values(entry)
                device = catalog.resolve(values["hardware"])
            except LookupError:
                rejects.append(_reject(relpath, index, f"unknown device '{entry['hardware']}'", entry))
                continue
            except ValueError as exc:
                rejects.append(_reject(relpath, index, str(exc), entry))
                continue
            kernel_id = stable_id(SOURCE, tree.version, level, problem_file)
            if kernel_id not in kernels:
                kernels[kernel_id] = _kernel_row(root, tree, level, problem_file)
            measurements.append(
                {
                    "kernel_id": kernel_id,
                    "device_id": device.id,
                    "device_name_raw": values["hardware"],
                    "source": SOURCE,
                    "upstream_file": relpath,
                    "upstream_row": index,
                    # Wall-clock of the whole module forward (torch.cuda events around it),
                    # clocks as the cloud set them.
                    "profiler": "cuda_event",
                    "clock_mode": "unknown",
                    "run_id": run_id,
                    "params_json": canonical_json(
                        {**config.params(), "level": level, "problem_set": tree.version}
                    ),
                    "duration_us": values["mean"] * 1000.0,
                    "duration_std_us": values["std"] * 1000.0,
                    "n_trials": values["num_trials"],
                }
            )
    return measurements, rejects, index + 1


def timing_files(root: Path) -> list[Path]:
    """Every timing JSON of the three tree kinds, in a stable order."""
    patterns = (
        "results/timing/**/*.json",
        "_v0.0/results/timing/**/*.json",
        "_history/*/results/timing/**/*.json",
    )
    found = {p for pattern in patterns for p in root.glob(pattern) if p.is_file()}
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def ingest(root: Path, catalog) -> AdapterOutput:
    require_dir(root, SOURCE)
    files = timing_files(root)
    if not files:
        raise IngestError(f"{SOURCE}: no results/timing/**/*.json under {root}")
    notes = read_provenance(root)
    measurements, rejects, kernels, rows_in = [], [], {}, 0
    for path in files:
        m, r, n = _one_file(root, path, notes, catalog, kernels)
        measurements += m
        rejects += r
        rows_in += n
    frame = pd.DataFrame(measurements)
    kernel_frame = conform(pd.DataFrame(list(kernels.values())), KERNEL_COLUMNS)
    no_source = int(kernel_frame["source_text"].isna().sum())
    notes = [
        f"{len(files)} timing files; provenance notes {'read' if notes else 'absent'}",
        f"{no_source} of {len(kernel_frame)} problems have no bundled source (level4/5/tk, unbundled trees)",
    ]
    return AdapterOutput.conformed(SOURCE, frame, kernel_frame, rejects, rows_in, notes)
