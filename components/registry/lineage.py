"""Lineage of a registered version: which code, which data, which run, which evaluation.

Every version carries these tags (``LINEAGE_TAGS``), so the registry alone answers "what is this
model and why was it trusted":

- ``family``: roofline | tabular | llm | ...
- ``git_commit``: HEAD of the checkout that trained it;
- ``dataset_version``: the DVC hash of the feature table it trained on -- ``<md5>.dir`` of the DVC
  output folder holding it (the same figure ``dvc.lock`` records for the features stage, computed
  from the files, so it needs no DVC cache), or ``md5:<file md5>`` for a file outside a DVC output;
- ``training_run``: the MLflow run that trained and logged it;
- ``eval_report``: the artifact URI of its full gate evaluation report (set by ``evaluate --gate``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

LINEAGE_TAGS: tuple[str, ...] = ("family", "git_commit", "dataset_version", "training_run", "eval_report")


def file_md5(path: Path) -> str:
    digest = hashlib.md5()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dvc_dir_hash(directory: Path) -> str:
    """DVC 3's hash of a directory output: md5 of the sorted ``[{"md5", "relpath"}]`` listing + ``.dir``."""
    directory = Path(directory)
    entries = [
        {"md5": file_md5(path), "relpath": path.relative_to(directory).as_posix()}
        for path in sorted(p for p in directory.rglob("*") if p.is_file())
    ]
    entries.sort(key=lambda entry: entry["relpath"])
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir"


def _dvc_outs(project_root: Path) -> set[Path]:
    """Output paths ``dvc.yaml`` declares (resolved), or none when there is no dvc.yaml."""
    import yaml

    path = Path(project_root) / "dvc.yaml"
    if not path.is_file():
        return set()
    try:
        stages = (yaml.safe_load(path.read_text()) or {}).get("stages", {}) or {}
    except yaml.YAMLError:
        return set()
    outs: set[Path] = set()
    for stage in stages.values():
        for out in (stage or {}).get("outs", []) or []:
            name = next(iter(out)) if isinstance(out, dict) else out
            outs.add((Path(project_root) / str(name)).resolve())
    return outs


def dataset_version(features_file: Path, project_root: Path) -> str:
    """The DVC hash of the output folder ``features_file`` lives in, else ``md5:`` of the file itself."""
    features_file = Path(features_file).resolve()
    if features_file.parent in _dvc_outs(project_root):
        return dvc_dir_hash(features_file.parent)
    return f"md5:{file_md5(features_file)}"
