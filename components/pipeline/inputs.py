"""Has a model family's input changed since it was last trained? Input hashes, stamped on success.

A family's inputs are the feature table's bytes, the params.yaml keys its trainer reads
(``train.seed`` and ``train.<family>``), the split, and the code that fits it (components/models,
components/training). The hash is written next to the trained predictor only after training and
registration succeeded, so a run that crashed mid-fit has no stamp and is redone; one that finished
is skipped. This is DVC's rule (rerun a stage when a dep or param changed) for the families that
have no DVC stage of their own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.common.atomic import atomic_write_text
from components.platform.config import PROJECT_ROOT

STAMP_NAME = "inputs.json"
CODE_DIRS: tuple[str, ...] = ("components/models", "components/training")


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def code_sha256(root: Path = PROJECT_ROOT, dirs: tuple[str, ...] = CODE_DIRS) -> str:
    digest = hashlib.sha256()
    for folder in dirs:
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def family_params(params: Mapping[str, Any], family: str) -> dict[str, Any]:
    """The params.yaml keys ``family``'s trainer reads."""
    train = params.get("train") or {}
    return {"seed": train.get("seed"), family: train.get(family)}


def family_inputs_hash(
    features_file: Path, params: Mapping[str, Any], family: str, split: str, code: str | None = None
) -> str:
    if not Path(features_file).is_file():
        raise FileNotFoundError(f"feature table not found: {features_file} (run the features stage first)")
    payload = {
        "features": file_sha256(features_file),
        "params": family_params(params, family),
        "family": family,
        "split": split,
        "code": code or code_sha256(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def read_stamp(out_dir: Path) -> dict[str, Any]:
    try:
        stamp = json.loads((Path(out_dir) / STAMP_NAME).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def is_current(out_dir: Path, inputs_hash: str) -> bool:
    """True when ``out_dir`` holds a finished training of exactly these inputs."""
    stamp = read_stamp(out_dir)
    registration = Path(out_dir) / "registration.json"
    return stamp.get("inputs_hash") == inputs_hash and registration.is_file()


def write_stamp(out_dir: Path, inputs_hash: str, **extra: Any) -> None:
    atomic_write_text(
        Path(out_dir) / STAMP_NAME,
        json.dumps({"inputs_hash": inputs_hash, **extra}, indent=2, default=str) + "\n",
    )


__all__ = ["family_inputs_hash", "family_params", "is_current", "read_stamp", "write_stamp"]
