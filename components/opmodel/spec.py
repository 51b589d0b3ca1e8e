"""The spec tier: the efficiency of a GPU known only by its spec sheet, learned across every measured GPU.

The learned quantity is ``log(util)``, ``util = roofline time / measured time`` in (0, 1]: bounded, smooth,
and what transfers between GPUs -- a 4096^3 bf16 GEMM reaches a similar fraction of its tensor peak on an A100
and an H100, while the microseconds differ 3x. The features are the ones that carry across GPUs (no raw
peaks): log sizes, waves and tail of 128x128 output tiles over the SMs, arithmetic intensity over the GPU's
ridge for the pipe that runs the dtype, the speed-of-light time itself (the launch-bound regime), bytes per
SM, the dtype class. One small LightGBM booster per family (gemm, attention), saved as LightGBM's own text +
JSON (no pickle).

The efficiency is learned against a *base* time, the roofline plus a per-regime kernel latency floor (the
fixed cost of one kernel of the library, learned across the measured GPUs), and hedged toward that base on
the way out; which of these physics a family uses is its ``SpecConfig``, chosen by nested leave-one-GPU-out
(``benchmarks/spec_tier_selection.py``). The answer is never below the roofline (log util <= 0).

Where a (family, pipe, dtype) regime has few training rows the booster's answer is shrunk toward a prior, the
median log efficiency of that regime over all GPUs (or of the family where the regime was never measured): ``w
= n / (n + SHRINK_ROWS)``. The support figure says how many rows the regime had and the weight it got.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from components.common.flat_trees import NPZ_SUFFIX, FlatTrees
from components.physics import roofline as physics

if TYPE_CHECKING:  # pandas loads in the training functions: answering a question needs none of it
    import pandas as pd

SPEC_FAMILIES: tuple[str, ...] = ("gemm", "attention")
DTYPE_CODES: dict[str, int] = {d: i for i, d in enumerate(physics.GEMM_DTYPE_TRAITS)}
TILE = 128.0  # output tile edge of the tensor-core GEMM kernels cuBLAS/CUTLASS pick for large products
SHRINK_ROWS = 400.0  # a regime with this many training rows gets half its weight from the prior
MIN_LOG_UTIL = float(np.log(1e-4))
MAX_LOG_UTIL = float(np.log(4.0))  # against the latency-floored base time a kernel may beat the base
FLOOR_QUANTILE = 0.02  # the per-regime latency floor: this quantile of a GPU's measured times in the regime
PARAMS: dict[str, Any] = {
    "objective": "l2",
    "learning_rate": 0.08,
    "num_leaves": 31,
    "min_data_in_leaf": 40,
    "feature_fraction": 0.9,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "verbose": -1,
    "num_threads": 2,
    "seed": 7,
    "deterministic": True,
}
ROUNDS = 150


@dataclass(frozen=True)
class SpecConfig:
    """How one family's spec booster sees a kernel (chosen by nested leave-one-GPU-out:
    ``benchmarks/spec_tier_selection.py``).

    - ``floor``: the share of the regime's per-kernel latency floor (the median over the training GPUs of
      the fastest measured kernels of the regime: launch, prologue, epilogue -- a property of the kernel
      library, not of a GPU's peaks) added to the roofline time to make the *base* the booster's efficiency
      is learned against: ``base = roofline + floor * latency``. 0 = the bare roofline (the original tier).
    - ``l2``: a feature ``log2(working set / L2 size)``: operands that fit the L2 are re-read from it across
      CUDA-graph replays (L40S: 96 MB), so the DRAM roof over-states their time.
    - ``identity``: keep the features that name the training GPU rather than the kernel (SM count, FLOPs,
      bytes per SM). With three or four measured GPUs a tree splits on them to tell the GPUs apart; a GPU
      never seen lands in whichever training GPU it resembles on that axis.
    - ``hedge``: the learned log efficiency (after shrinkage) times this, < 1 pulls the answer toward the base
      (the roofline plus the floor), where a new GPU's error is smaller (MAPE punishes too slow answers
      without bound).
    - ``monotone``: the learned efficiency against the base may only fall as the roofline time grows at a
      fixed shape (LightGBM monotone constraint on the two time features). With the latency floor in the
      base, that is physics (a kernel's time is floor + work / rate: more work at a fixed floor never raises
      the efficiency against ``roofline + floor``), and it makes the answer monotone in the peaks: a GPU
      with more of every peak changes only the roofline time, and ``base / efficiency`` can only shrink.
    """

    floor: float = 0.0
    l2: bool = False
    identity: bool = True
    hedge: float = 1.0
    num_leaves: int = 31
    min_data_in_leaf: int = 40
    monotone: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "floor": self.floor,
            "l2": self.l2,
            "identity": self.identity,
            "hedge": self.hedge,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_data_in_leaf,
            "monotone": self.monotone,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SpecConfig:
        data = data or {}
        return cls(
            float(data.get("floor", 0.0)),
            bool(data.get("l2", False)),
            bool(data.get("identity", True)),
            float(data.get("hedge", 1.0)),
            int(data.get("num_leaves", 31)),
            int(data.get("min_data_in_leaf", 40)),
            bool(data.get("monotone", False)),
        )


ORIGINAL = SpecConfig()
# The configuration the engine trains with, per family: the candidate the nested leave-one-GPU-out selection
# (benchmarks/spec_tier_selection.py) chose on every outer fold's training GPUs.
# (the latency floor and the hedge won every outer fold of both families; benchmarks/results/
# spec_tier_selection.json holds each fold's inner ranking).
# ``monotone`` is imposed on top of the selection (issue 32): a GPU with more of every peak is never slower;
# since the transfer tier, the spec tier answers only a regime no measured GPU has.
CHOSEN: dict[str, SpecConfig] = {
    "gemm": SpecConfig(floor=1.0, l2=False, identity=False, hedge=0.7, monotone=True),
    "attention": SpecConfig(floor=1.0, l2=True, identity=True, hedge=0.7, monotone=True),
}


def regime(family: str, dtype: str, spec: Any) -> str:
    """The (family, pipe, dtype) regime a row belongs to: the unit of the prior and of calibration."""
    choice = physics.pipe_for(dtype, spec)
    return f"{family}|{choice.pipe}|{choice.dtype}"


@dataclass(frozen=True)
class SpecRows:
    """Rows of one (family, dtype, GPU) as the spec tier reads them: the question and its roofline."""

    family: str
    dtype: str
    shape: dict[str, np.ndarray]  # dimension name -> one value per row
    spec: Any  # the GPU's spec sheet
    roof: physics.Roofline
    kv_dtype: str | None = None


def features(group: SpecRows, config: SpecConfig = ORIGINAL, floor_us: float = 0.0) -> np.ndarray:
    """The transferable feature matrix of rows of one (family, dtype, GPU)."""
    spec, roof = group.spec, group.roof
    n = len(roof.time_us)
    d = {k: np.broadcast_to(np.asarray(v, dtype="float64"), (n,)) for k, v in group.shape.items()}
    sms = float(spec.sms)
    ridge = roof.peak_flops / roof.peak_bps
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(roof.dram_bytes > 0, roof.flops / roof.dram_bytes, 1.0)
    common = [
        np.log2(np.maximum(roof.time_us, 1e-6)),
        np.log2(np.maximum(intensity / ridge, 1e-9)),
        np.log2(np.maximum(roof.compute_us / np.maximum(roof.memory_us, 1e-9), 1e-9)),
        np.full(n, float(DTYPE_CODES.get(roof.choice.dtype, -1))),
        np.full(n, float(roof.choice.tensor)),
    ]
    if config.identity:
        common += [
            np.log2(np.maximum(roof.flops, 1.0)),
            np.log2(np.maximum(roof.dram_bytes / sms, 1.0)),
            np.full(n, np.log2(sms)),
        ]
    if config.floor > 0:  # how far the kernel is from its latency floor
        common.append(np.log2(np.maximum(roof.time_us, 1e-6) / max(floor_us, 1e-3)))
    if config.l2:
        l2_bytes = float(getattr(spec, "l2_mb", None) or 0.0) * 1e6
        fits = np.log2(np.maximum(roof.dram_bytes, 1.0) / l2_bytes) if l2_bytes > 0 else np.full(n, 8.0)
        common.append(fits)
    if group.family == "gemm":
        b = d.get("B", np.ones(n))
        m, nn, k = d["M"], d["N"], d["K"]
        tiles = b * np.ceil(m / TILE) * np.ceil(nn / TILE)
        waves = tiles / sms
        tail = waves / np.ceil(waves)
        own = [np.log2(m), np.log2(nn), np.log2(k), np.log2(b), np.log2(waves), tail, np.log2(np.ceil(waves))]
    else:
        b, s, kv, h, hkv, dd = d["B"], d["S"], d["KV"], d["H"], d["HKV"], d["D"]
        w = d.get("W", np.zeros(n))
        ctas = b * h * np.ceil(s / TILE)  # FlashAttention: one CTA per (batch, head, 128 query rows)
        waves = ctas / sms
        kv_code = float(DTYPE_CODES.get(group.kv_dtype or group.dtype, -1))
        own = [
            np.log2(b),
            np.log2(s),
            np.log2(kv),
            np.log2(h),
            np.log2(h / hkv),
            np.log2(dd),
            np.log2(np.where(w > 0, w, kv)),
            np.log2(waves),
            waves / np.ceil(waves),
            np.full(n, kv_code),
            (s == 1).astype(float),
        ]
    return np.column_stack(common + own)


def monotone_constraints(n_features: int, config: SpecConfig) -> list[int]:
    """-1 on the features that move with the roofline time at a fixed shape (its log, and its log over the
    latency floor), 0 elsewhere (the column order of ``features``)."""
    out = [0] * n_features
    if config.monotone:
        out[0] = -1
        if config.floor > 0:
            out[5 + (3 if config.identity else 0)] = -1
    return out


def base_time(roof: physics.Roofline, config: SpecConfig, floor_us: float) -> np.ndarray:
    """The time the booster's efficiency is learned against: the roofline plus a share of the latency
    floor."""
    return roof.time_us + config.floor * floor_us


@dataclass
class SpecModel:
    """One booster per family + the priors (median log efficiency per regime and per family), each family's
    configuration and the per-regime latency floors its base time adds."""

    # family -> lightgbm.Booster (fitted here) or FlatTrees (loaded: no LightGBM import for a question)
    boosters: dict[str, Any] = field(default_factory=dict)
    priors: dict[str, float] = field(default_factory=dict)  # regime or family -> median log util
    rows: dict[str, int] = field(default_factory=dict)  # regime -> training rows
    configs: dict[str, SpecConfig] = field(default_factory=dict)  # family -> how its booster sees a kernel
    floors: dict[str, float] = field(default_factory=dict)  # regime or family -> latency floor (us)

    def floor_of(self, family: str, key: str) -> float:
        return float(self.floors.get(key, self.floors.get(family, 0.0)))

    def predict_log_util(self, group: SpecRows) -> tuple[np.ndarray, str]:
        """log(util) per row against the roofline (<= 0), and the support text (regime rows, weight given
        to the prior)."""
        family, roof = group.family, group.roof
        key = regime(family, group.dtype, group.spec)
        config = self.configs.get(family, ORIGINAL)
        floor_us = self.floor_of(family, key)
        to_roof = np.log(roof.time_us / np.maximum(base_time(roof, config, floor_us), 1e-12))
        prior = self.priors.get(key, self.priors.get(family, np.log(0.5)))
        rows = self.rows.get(key, 0)
        booster = self.boosters.get(family)
        weight = rows / (rows + SHRINK_ROWS) if booster is not None else 0.0
        if booster is None or rows == 0:
            value = np.clip(to_roof + config.hedge * prior, MIN_LOG_UTIL, 0.0)
            return value, f"spec prior of {key} ({rows} training rows: no learned model)"
        x = features(group, config, floor_us)
        learned = booster.predict(x) if isinstance(booster, FlatTrees) else booster.predict(x, num_threads=1)
        value = config.hedge * (weight * learned + (1.0 - weight) * prior)
        note = f"spec model ({rows:,} training rows of {key}"
        note += f"; shrunk {1.0 - weight:.0%} toward its prior)" if weight < 0.95 else ")"
        return np.clip(to_roof + value, MIN_LOG_UTIL, 0.0), note

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for family, booster in self.boosters.items():
            text = folder / f"spec_{family}.txt"
            if isinstance(booster, FlatTrees):  # loaded flat: its model text is the file it came from
                text.write_text(Path(booster.booster_file).read_text())
                booster.save(text.with_suffix(NPZ_SUFFIX))
            else:  # the flat copy beside the text, so a question's load needs no LightGBM
                text.write_text(booster.model_to_string())
                FlatTrees.from_dump(booster.dump_model()).save(text.with_suffix(NPZ_SUFFIX))
        meta = {
            "priors": self.priors,
            "rows": self.rows,
            "families": sorted(self.boosters),
            "configs": {f: c.as_dict() for f, c in self.configs.items()},
            "floors": self.floors,
        }
        (folder / "spec.json").write_text(json.dumps(meta, indent=1, sort_keys=True))

    @classmethod
    def load(cls, folder: Path) -> SpecModel:
        """The saved model; its boosters as flat trees when every ``.npz`` copy is there (a question's few
        rows walk them without importing LightGBM; bulk batches still go to LightGBM), else LightGBM's."""
        meta = json.loads((folder / "spec.json").read_text())
        texts = {f: folder / f"spec_{f}.txt" for f in meta["families"]}
        if all(p.with_suffix(NPZ_SUFFIX).is_file() for p in texts.values()):
            boosters: dict[str, Any] = {
                f: FlatTrees.load(p.with_suffix(NPZ_SUFFIX)) for f, p in texts.items()
            }
            for flat in boosters.values():
                flat.threads = 1
        else:
            import lightgbm as lgb

            boosters = {f: lgb.Booster(model_str=p.read_text()) for f, p in texts.items()}
        return cls(
            boosters,
            {k: float(v) for k, v in meta["priors"].items()},
            {k: int(v) for k, v in meta["rows"].items()},
            {f: SpecConfig.from_dict(c) for f, c in meta.get("configs", {}).items()},
            {k: float(v) for k, v in meta.get("floors", {}).items()},
        )


# ------------------------------------------------------------------------------------------- training data


def hash_fraction(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """A deterministic number in [0, 1) per row from its key columns (the same row, the same number)."""
    import pandas as pd

    hashed = pd.util.hash_pandas_object(frame[columns], index=False).to_numpy()
    return (hashed % np.uint64(1_000_003)).astype("float64") / 1_000_003.0


def training_rows(
    store: dict[str, pd.DataFrame], datasets_root: Path | None = None, per_group: int = 12_000
) -> dict[str, pd.DataFrame]:
    """Per family: measured rows (device_id, dtype[, kv_dtype], shape, latency_us), at most ``per_group`` per
    (device, dtype[, kv_dtype]) chosen by hash; PipeWeave's FP8 GEMM train file (H20, H800) joins the
    GEMMs."""
    import pandas as pd

    out = {}
    for family in SPEC_FAMILIES:
        frame = store.get(family)
        if frame is None or frame.empty:
            continue
        dims = [k for k in (*physics.SHAPE_KEYS[family][0], *physics.SHAPE_KEYS[family][1]) if k in frame]
        frame = frame[(frame[dims] >= 0).all(axis=1)]
        frame = frame[(frame[[k for k in dims if k != "W"]] >= 1).all(axis=1)]
        if family == "attention":
            frame = frame[(frame["S"] == 1) | (frame["S"] == frame["KV"])]
        group = ["device_id", "dtype"] + (["kv_dtype"] if family == "attention" else [])
        frame = frame.assign(_h=hash_fraction(frame, [*group, *dims]))
        rank = frame.groupby(group, observed=True)["_h"].rank(method="first")
        out[family] = frame[rank <= per_group].drop(columns="_h").reset_index(drop=True)
    if datasets_root is not None and "gemm" in out:
        extra = pipeweave_fp8(Path(datasets_root))
        if extra is not None:
            out["gemm"] = pd.concat([out["gemm"], extra], ignore_index=True)
    return out


def pipeweave_fp8(datasets_root: Path) -> pd.DataFrame | None:
    """PipeWeave's FP8 GEMM *train* file (its test file is a held-out benchmark): H20 and H800 rows."""
    import pandas as pd

    from components.devices.catalog import load_catalog

    path = datasets_root / "pipeweave" / "dataset" / "gemm_fp8_train.csv"
    if not path.is_file():
        return None
    raw = pd.read_csv(path, usecols=["M", "N", "K", "avg_duration", "hardware"])
    catalog = load_catalog()
    ids = {h: catalog.resolve(h).id for h in raw["hardware"].unique()}
    frame = pd.DataFrame(
        {
            "device_id": raw["hardware"].map(ids),
            "dtype": "fp8",
            "M": raw["M"],
            "N": raw["N"],
            "K": raw["K"],
            "latency_us": raw["avg_duration"].astype("float64"),
        }
    )
    return frame[(frame[["M", "N", "K"]] >= 1).all(axis=1) & (frame["latency_us"] > 0)].reset_index(drop=True)


def group_keys(family: str) -> list[str]:
    return ["device_id", "dtype"] + (["kv_dtype"] if family == "attention" else [])


def _groups(family: str, frame: pd.DataFrame, specs: dict[str, Any]):
    """(device, its spec-tier rows, the frame's rows) per (device, dtype[, kv]) group of ``frame``."""
    keys = (*physics.SHAPE_KEYS[family][0], *physics.SHAPE_KEYS[family][1])
    for key, part in frame.groupby(group_keys(family), sort=True, observed=True):
        device, dtype = key[0], key[1]
        kv = key[2] if family == "attention" else None
        spec = specs[device]
        shape = {k: part[k].to_numpy(dtype="float64") for k in keys if k in part}
        roof = physics.roofline(family, dtype, shape, spec, kv)
        yield device, SpecRows(family, dtype, shape, spec, roof, kv), part


def latency_floors(family: str, frame: pd.DataFrame, specs: dict[str, Any]) -> dict[str, float]:
    """Per regime (and for the family): the median over the measured GPUs of each GPU's fastest kernels of
    that regime (its FLOOR_QUANTILE latency) -- the fixed cost of one kernel of that library."""
    per: dict[str, dict[str, list[float]]] = {}
    for device, group, part in _groups(family, frame, specs):
        key = regime(family, group.dtype, group.spec)
        per.setdefault(key, {}).setdefault(device, []).extend(part["latency_us"].tolist())
    out, everything = {}, []
    for key, devices in per.items():
        lows = [float(np.quantile(v, FLOOR_QUANTILE)) for v in devices.values()]
        out[key] = float(np.median(lows))
        everything.extend(lows)
    if everything:
        out[family] = float(np.median(everything))
    return out


def design(
    family: str,
    frame: pd.DataFrame,
    specs: dict[str, Any],
    config: SpecConfig = ORIGINAL,
    floors: dict[str, float] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, log util target against the base time, regime per row) of measured rows."""
    floors = floors or {}
    xs, ys, regimes = [], [], []
    index = []
    for _, group, part in _groups(family, frame, specs):
        key = regime(family, group.dtype, group.spec)
        floor_us = float(floors.get(key, floors.get(family, 0.0)))
        base = base_time(group.roof, config, floor_us)
        util = np.clip(base / part["latency_us"].to_numpy(dtype="float64"), 1e-4, np.exp(MAX_LOG_UTIL))
        xs.append(features(group, config, floor_us))
        ys.append(np.log(util))
        regimes.append(np.full(len(part), key, dtype=object))
        index.append(part.index.to_numpy())
    order = np.argsort(np.concatenate(index), kind="stable")
    return np.vstack(xs)[order], np.concatenate(ys)[order], np.concatenate(regimes)[order]


PRIOR_ONLY_FAMILIES: tuple[str, ...] = ("moe", "allreduce")


def fit_priors(model: SpecModel, store: dict[str, pd.DataFrame], specs: dict[str, Any]) -> SpecModel:
    """Median log efficiency per regime (and per family) of the families the spec tier has no booster for
    (MoE, all-reduce): their spec-tier answer is the roofline at the efficiency measured GPUs reached."""
    for family in PRIOR_ONLY_FAMILIES:
        frame = store.get(family)
        if frame is None or frame.empty:
            continue
        keys = physics.SHAPE_KEYS[family]
        logs, regimes = [], []
        for (device, dtype), part in frame.groupby(["device_id", "dtype"], sort=True, observed=True):
            if device not in specs:
                continue
            shape = {k: part[k].to_numpy(dtype="float64") for k in (*keys[0], *keys[1]) if k in part}
            try:
                roof = physics.roofline(family, dtype, shape, specs[device])
            except physics.PhysicsError:
                continue
            util = np.clip(roof.time_us / part["latency_us"].to_numpy(dtype="float64"), 1e-4, 1.0)
            ok = np.isfinite(util)
            logs.append(np.log(util[ok]))
            regimes.append(np.full(int(ok.sum()), regime(family, dtype, specs[device]), dtype=object))
        if not logs:
            continue
        y, reg = np.concatenate(logs), np.concatenate(regimes)
        model.priors[family] = float(np.median(y))
        for name in np.unique(reg):
            mask = reg == name
            model.priors[str(name)] = float(np.median(y[mask]))
            model.rows[str(name)] = int(mask.sum())
    return model


def fit(
    rows: dict[str, pd.DataFrame],
    specs: dict[str, Any],
    rounds: int = ROUNDS,
    params: dict[str, Any] | None = None,
    configs: dict[str, SpecConfig] | None = None,
) -> SpecModel:
    """One booster per family on every measured GPU's rows; priors per regime and per family. ``configs``:
    per family (default ``CHOSEN``)."""
    import lightgbm as lgb

    configs = {**CHOSEN, **(configs or {})}
    model = SpecModel()
    for family, frame in rows.items():
        frame = frame[frame["device_id"].isin(specs)]
        if frame.empty:
            continue
        config = configs.get(family, ORIGINAL)
        floors = latency_floors(family, frame, specs)
        x, y, regimes = design(family, frame, specs, config, floors)
        model.configs[family] = config
        model.floors.update(floors)
        model.priors[family] = float(np.median(y))
        for name in np.unique(regimes):
            mask = regimes == name
            model.priors[str(name)] = float(np.median(y[mask]))
            model.rows[str(name)] = int(mask.sum())
        data = lgb.Dataset(x, y, free_raw_data=True)
        tree = {"num_leaves": config.num_leaves, "min_data_in_leaf": config.min_data_in_leaf}
        if config.monotone:
            tree |= {
                "monotone_constraints": monotone_constraints(x.shape[1], config),
                "monotone_constraints_method": "advanced",
            }
        model.boosters[family] = lgb.train({**PARAMS, **tree, **(params or {})}, data, num_boost_round=rounds)
    return model
