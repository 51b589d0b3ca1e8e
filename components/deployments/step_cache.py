"""Step models kept on disk between processes (``$KERNELCAST_HOME/cache/stepmodels``).

A step model's grids (``stepmodel.build_step_models``) cost the op engine ~150k op rows for a whole-catalog
rank -- seconds of tree walks a fresh CLI process pays again for the same answers. They depend only on the
op-time function (the champion's op engine, its calibrations, the engines' constants and limits), the
deployment's step key (model shape, GPU spec, dtypes, parallelism) and the serving engine whose kernels
answer it, never on the workload. So each model is stored once under a hash of all of these and of the
code that computes it (:func:`state_tag`): a new champion, calibration, constants file or code change
gives new names, and the old files are never read again. Files are written atomically; an unreadable
one is rebuilt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

CACHE_DIR = "stepmodels"  # under $KERNELCAST_HOME/cache
BUDGET_BYTES = 256 << 20  # ~30,000 models of ~8 KB: many champions' whole-catalog ranks (cache_budget.py)
_CODE_PACKAGES = ("components/deployments", "components/opmodel", "components/physics", "components/common")


def _stat_lines(paths: Iterable[Path]) -> list[str]:
    out = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        out.append(f"{path}|{st.st_size}|{st.st_mtime_ns}")
    return out


def _files(folder: Path, pattern: str) -> list[Path]:
    return sorted(p for p in folder.rglob(pattern) if p.is_file()) if folder.is_dir() else []


def state_tag(inputs: Sequence[Path]) -> str:
    """A hash of what the production op times are computed from: every file under ``inputs`` (the
    champion's op engine, the measured store, calibrations, the engines' constants) and the code of the
    packages that turn them into a step model (size and modification time of each file: a rewrite of
    any of them changes the tag)."""
    root = Path(__file__).resolve().parents[2]
    paths = [p for folder in inputs for p in ([folder] if folder.is_file() else _files(folder, "*"))]
    code = [p for pkg in _CODE_PACKAGES for p in _files(root / pkg, "*.py")]
    return hashlib.sha256("\n".join(_stat_lines(paths + code)).encode()).hexdigest()[:24]


def model_name(tag: str, framework: str, deployment: Any) -> str:
    """The file name of one step model: the state tag, the engine whose kernels answer it and every field
    of the step key by value (the GPU spec and model shape whole, not their ids)."""
    d = deployment
    key = repr((tag, framework, d.model, d.gpu, d.weight_dtype, d.kv_dtype, d.tp, d.pp, d.ep, d.dp))
    return hashlib.sha256(key.encode()).hexdigest()[:32] + ".npy"


# One flat float64 array per model (one .npy header to parse, no pickle): the grid sizes, the scalars, then
# the arrays in this order (their shapes follow from the sizes).
_SCALARS = ("pp_hop_us", "layers", "allreduces", "dp")
_INTS = frozenset({"layers", "dp"})
_ARRAYS = ("tokens", "linear_dec", "linear_pre", "head", "seqs", "ctx", "attn_dec", "attn_pre")


def _shapes(nt: int, ns: int, nc: int) -> dict[str, tuple[int, ...]]:
    one = {"tokens": nt, "linear_dec": nt, "linear_pre": nt, "head": ns, "seqs": ns, "ctx": nc}
    return {**{k: (v,) for k, v in one.items()}, "attn_dec": (ns, nc), "attn_pre": (nt, nc)}


def load(folder: Path, name: str, cls: type) -> Any | None:
    """The step model stored as ``name`` (None where absent or unreadable)."""
    path = folder / name
    if not path.is_file():
        return None
    try:
        flat = np.load(path, allow_pickle=False)
        nt, ns, nc = (int(x) for x in flat[:3])
        values: dict[str, Any] = {}
        for i, k in enumerate(_SCALARS):
            values[k] = int(flat[3 + i]) if k in _INTS else float(flat[3 + i])
        at = 3 + len(_SCALARS)
        for k, shape in _shapes(nt, ns, nc).items():
            size = int(np.prod(shape))
            values[k] = flat[at : at + size].reshape(shape)
            at += size
        if at != flat.size:
            return None
        return cls(**values)
    except (OSError, ValueError, TypeError):
        return None


def store(folder: Path, name: str, model: Any) -> None:
    """Write one step model atomically (a failure to write leaves no file and is not an error)."""
    from components.common.atomic import atomic_write

    head = [len(model.tokens), len(model.seqs), len(model.ctx), *(getattr(model, k) for k in _SCALARS)]
    parts = [np.asarray(head, dtype="float64")]
    parts += [np.asarray(getattr(model, k), dtype="float64").ravel() for k in _ARRAYS]
    flat = np.concatenate(parts)

    def write(tmp: Path) -> None:
        with tmp.open("wb") as handle:
            np.save(handle, flat, allow_pickle=False)

    from components.common.cache_budget import trim_files

    try:
        atomic_write(folder / name, write)
    except OSError:
        return
    trim_files(folder, BUDGET_BYTES)
