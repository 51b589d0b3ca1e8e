"""Which op engine answers for a predictor: the one saved in its folder, the state folder's, one built from
the state folder's measured store, or a bare one -- with the state folder's calibrations applied. Cached per
folder: a server asks again and again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ENGINE_DIR = "opmodel"  # inside a predictor folder and under $KERNELCAST_HOME/models
SPLIT_DIR = "opmodel-split"  # under $KERNELCAST_HOME/cache: the stores split per (family, GPU, dtype)
_CACHE: dict[str, Any] = {}


def engine_for(predictor: Any) -> Any:
    """The op engine for ``predictor`` (cached per folder), with the state folder's calibrations."""
    from components.opmodel.calibrated import load_calibrations
    from components.opmodel.engine import ENGINE_FILE, OpEngine
    from components.platform.config import get_settings

    if getattr(predictor, "family", None) == "roofline":
        return OpEngine(fallback_util=1.0)  # the training-free roofline was asked for: no data, no model
    settings = get_settings()
    candidates = [getattr(predictor, "opmodel_dir", None), settings.models_dir / ENGINE_DIR]
    folder = next((Path(c) for c in candidates if c is not None and (Path(c) / ENGINE_FILE).is_file()), None)
    store = settings.data_dir / "opmodel" / "store"
    has_store = (store / "store.json").is_file()
    key = str(folder) if folder is not None else (f"store:{store}" if has_store else "bare")
    split = settings.cache_dir / SPLIT_DIR  # one GPU's question reads that GPU's groups only (store_cache)
    if key not in _CACHE:
        if folder is not None:
            _CACHE[key] = OpEngine.load(folder, split)
        elif key.startswith("store:"):
            _CACHE[key] = OpEngine.from_store(store, cache_dir=split)
        else:
            _CACHE[key] = OpEngine()
    calibrations = load_calibrations(settings.state_dir)
    engine = _CACHE[key]
    return engine.with_calibrations(calibrations) if calibrations else engine
