"""Program-level model: a whole module's wall-clock time as its ops' GPU time plus what runs between them.

    ops_us = sum over op kinds k of  S_k / eff_k            (eff_k <= 1: an op never runs faster
                                                             than its basis time; eff_k = 1 for the
                                                             kinds the op engine answers: they stand)
    gpu_us = ops_us + w_lowpar * L + n_kernels * launch_us  (launch gaps, under-filled GPUs)
             + max(rnn_steps * step_us - S_rnn, 0)  (an RNN's time steps run one after another:
                                                     the latency its op time does not already cover;
                                                     not scaled with the host proxy)
    cpu_us = max(n_aten * framework_us - head, 0)           (eager PyTorch dispatch, per aten call; head:
                                                             host time a timing harness let pass before
                                                             its first event -- kernelcast's L2 flush)
    time   = ops_us + max(smoothmax(gpu_us, cpu_us) * r(x) - ops_us, 0)

``S_k`` is the summed op time of kind k from the basis (the op-level predictor's answers, or the roofline),
``L`` the extra time of kernels too small to fill the GPU, ``launch_us`` the per-kernel gap, ``step_us`` the
latency of one sequential RNN time step (cuDNN LSTM/GRU layers are latency-bound: their time barely moves
with the GPU's FLOP rate, so a roofline-scaled efficiency is 3x too slow on a T4 and 3x too fast on an H100;
measured, 5.5-14 us a step on every KernelBench GPU, T4 included, whose FP32 roofline is 3 us a step: no
factor is learned on ``S_rnn``; nor does the step follow the host proxy below: the measured step runs
5.5-20.7 us with no trend in DRAM bandwidth -- H200 14.5, T4 9.8 -- so scaling it as launches are scaled
made the fast-DRAM GPUs' RNNs too fast), ``framework_us`` the CPU cost of one aten call -- GPU and CPU
overlap, hence the smooth maximum (``p``). ``r`` is a small gradient-boosted correction of the time
*between* the ops, on transferable program features (time shares per kind, kernel counts, logs of times;
never a device id or a raw peak). One total, never below the ops' GPU time by construction: the
breakdown's op times (the basis scaled by ``eff_k``) sum to ``ops_us`` and everything learned on top of
them is non-negative.

Fitted on KernelBench timings of training GPUs only, one model per run config (eager, and each
torch.compile mode as a separate target). Saved as one JSON file (LightGBM residuals as text).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.models import PROGRAM_MODEL_FILE
from components.programs.program_features import (
    FEATURE_KINDS,
    FP32_SHARED,
    L2_WARM,
    op_terms,
    transfer_features,
)

MODEL_FILE = PROGRAM_MODEL_FILE  # in a predictor's folder, beside its predictor.json
FORMAT_VERSION = 1
SMOOTH_P = 4.0
# Without a fitted model (a fresh install before the first train): per-kernel and per-call costs
# typical of eager PyTorch on a CUDA GPU, used only with a note saying the total is not learned.
DEFAULT_LAUNCH_US = 4.0
DEFAULT_FRAMEWORK_US = 6.0
DEFAULT_STEP_US = 10.0  # only the fit's starting point: an untrained model adds no step latency
DEFAULT_CALL_US = 2.0  # the fit's starting point for a HOST_COUNTS cost (an untrained model adds none)
# The host-side counts that get a learned host cost each (time on the CPU, scaled like framework_us). Only
# the timed call itself (``n_forwards``, 1 a forward or training step): the timing harness's event records,
# the top-level Python call and the host latency before the first kernel, which the GPU waits for. Measured
# on KernelBench, leave-one-GPU-out, each level fitted on its own rows (median GPU MAPE, level 1/2/3): without
# any 28.5/25.2/20.9%; with n_forwards 28.0/25.2/20.3%. The tracer's Python counts were tried here too and
# are left out: torch API calls from Python (n_pycalls) 28.9/25.3/20.6%, with n_forwards 28.6/25.7/20.0%;
# nn.Module calls (n_modules) fit at the lower bound on every fold (no information beyond n_aten).
HOST_COUNTS: tuple[str, ...] = ("n_forwards",)
RESIDUAL_PARAMS = {
    "objective": "regression_l2",
    "n_estimators": 150,
    "learning_rate": 0.05,
    "num_leaves": 8,
    "min_child_samples": 25,
    "subsample": 0.8,
    "subsample_freq": 1,
    "colsample_bytree": 0.8,
    "reg_lambda": 1.0,
    "verbose": -1,
    "n_jobs": 1,
}
RELATIVE_LOSS = True
MIN_GPU_ROWS = 20  # a training GPU counts towards the minimums below with at least this many rows
MIN_HOST_GPUS = 3  # GPUs needed to learn the host exponent
MIN_RESIDUAL_GPUS = 3  # GPUs needed for the residual trees (with fewer they learn one GPU's quirks)
CPU_GROUPS: dict[str, tuple[str, ...]] = {
    "conv": ("conv", "conv_grouped", "conv_transposed"),
    "gemm": ("gemm", "bmm"),
    "norm": ("norm", "batchnorm"),
    "rnn": ("rnn",),
}
OP_TERMS: tuple[str, ...] = (*FEATURE_KINDS, L2_WARM, FP32_SHARED)  # the ops' GPU time: basis times, scaled
PARAM_TERMS: tuple[str, ...] = (*OP_TERMS, "lowpar")  # time sums with a learned weight each
RATIO_CLIP: tuple[float, float] = (0.05, 50.0)  # the residual's range of factors on the between-ops time
RESIDUAL_EXCLUDE: tuple[str, ...] = ("clock_ghz",)  # a per-GPU constant: lets trees memorise training GPUs
# Host time (us) a timed row's harness let pass before its first event (``kernelbench_model.head_start_us``):
# subtracted from the host side only; a module question's row has none (its forward is timed cold).
HEAD_START = "host_head_us"


class FloatColumns:
    """A frame's columns as float64 arrays, each converted once (``frame[c].to_numpy("float64")``, read-only):
    what ``ConfigModel.ops``/``base`` read, for the least-squares fit that evaluates ``base`` thousands of
    times on the same rows (pandas column lookups were ~40% of the fit's CPU). The same values in the same
    arithmetic, so the same answers to the bit."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.columns = frame.columns
        self._frame = frame
        self._arrays: dict[str, _FloatColumn] = {}

    def __len__(self) -> int:
        return len(self._frame)

    def __contains__(self, column: object) -> bool:
        return column in self.columns

    def __getitem__(self, column: str) -> _FloatColumn:
        if column not in self._arrays:
            array = np.array(self._frame[column].to_numpy("float64"), dtype="float64", copy=True)
            array.setflags(write=False)
            self._arrays[column] = _FloatColumn(array)
        return self._arrays[column]


class _FloatColumn:
    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def to_numpy(self, dtype: str = "float64") -> np.ndarray:
        if np.dtype(dtype) != np.float64:
            raise TypeError(f"FloatColumns holds float64 columns only, not {dtype}")
        return self.array


@dataclass
class ConfigModel:
    """One run config's parameters (see the module docstring)."""

    log_eff: dict[str, float]
    launch_us: float
    framework_us: float
    # Overheads scale as (DRAM GB/s / 1000)^-host_beta: newer, faster GPUs ship in hosts with faster
    # CPUs, so per-call costs fall with the GPU generation (one shared exponent, learned).
    host_beta: float = 0.0
    # Extra CPU cost per call of some kinds, as log multipliers of framework_us: cuDNN convolutions
    # and cuBLAS calls choose algorithms and build descriptors on the host on every call.
    cpu_log: dict[str, float] = field(default_factory=dict)
    step_us: float = 0.0  # one sequential RNN time step (x directions)
    # whether ``step_us`` is scaled with the host proxy like launches: True only for a model saved before
    # the step stood alone (its step_us was fitted that way); every fit sets False (see the docstring)
    step_host: bool = True
    # Host time on top of the per-aten-call cost, per count of HOST_COUNTS (count column -> us); empty when
    # not learned (a model fitted before these counts existed)
    call_us: dict[str, float] = field(default_factory=dict)
    # Op kinds whose basis time is the op's answer from the op engine (GEMM, bmm, attention: each from its
    # tier): no factor is learned for them, the answer stands. Every other kind's basis is its roofline,
    # which no op reaches: a factor per kind is learned.
    stands: list[str] = field(default_factory=list)
    # 90% interval half-width in log space, from GPU-grouped cross-validation on the training GPUs
    # (residuals on GPUs the fold did not see); None when too few GPUs.
    q_log: float | None = None
    residual: str | None = None  # LightGBM model text
    features: list[str] = field(default_factory=list)
    n_train: int = 0
    devices: list[str] = field(default_factory=list)
    _booster: Any = field(default=None, repr=False)

    def op_scale(self, kind: str) -> float:
        """Factor from a kind's basis time to its GPU time in the program (1 / eff_k >= 1)."""
        return math.exp(-min(self.log_eff.get(kind, 0.0), 0.0)) if kind != "lowpar" else 1.0

    def ops(self, frame: pd.DataFrame | FloatColumns, basis: str) -> np.ndarray:
        """The ops' GPU time: the basis times per kind scaled by ``op_scale``."""
        total = np.zeros(len(frame))
        for kind in OP_TERMS:
            column = f"{basis}_{kind}"
            if column in frame.columns:
                total = total + frame[column].to_numpy("float64") * self.op_scale(kind)
        return total

    def base(self, frame: pd.DataFrame | FloatColumns, basis: str) -> np.ndarray:
        gpu = self.ops(frame, basis)
        column = f"{basis}_lowpar"
        if column in frame.columns:
            gpu = gpu + frame[column].to_numpy("float64") * math.exp(-self.log_eff.get("lowpar", 0.0))
        host = np.ones(len(frame))
        if "dram_gbps" in frame.columns and self.host_beta:
            host = np.power(
                np.clip(frame["dram_gbps"].to_numpy("float64"), 50.0, 20000.0) / 1000.0, -self.host_beta
            )
        gpu = gpu + frame["n_kernels"].to_numpy("float64") * self.launch_us * host
        if self.step_us and "rnn_steps" in frame.columns:
            # a step's latency and its share of the RNN op's time overlap: only the latency beyond the op's
            # own time is added (a slow-FP32 GPU's RNN is its op time, a fast one's its step latency)
            steps = frame["rnn_steps"].to_numpy("float64") * self.step_us * (host if self.step_host else 1.0)
            rnn = frame["pred_rnn"].to_numpy("float64") * self.op_scale("rnn") if "pred_rnn" in frame else 0.0
            gpu = gpu + np.maximum(steps - rnn, 0.0)
        calls = frame["n_aten"].to_numpy("float64").copy()
        for group, log_mult in self.cpu_log.items():
            n = sum(
                frame[f"n_{k}"].to_numpy("float64") for k in CPU_GROUPS[group] if f"n_{k}" in frame.columns
            )
            calls = calls + n * (math.exp(log_mult) - 1.0)
        cpu = calls * self.framework_us
        for column, cost in self.call_us.items():
            if column in frame.columns:
                cpu = cpu + frame[column].to_numpy("float64") * cost
        cpu = cpu * host
        if HEAD_START in frame.columns:  # host time spent before the timing began (the harness's L2 flush)
            cpu = np.maximum(cpu - frame[HEAD_START].to_numpy("float64"), 0.0)
        return (gpu**SMOOTH_P + cpu**SMOOTH_P) ** (1.0 / SMOOTH_P)

    def booster(self) -> Any:
        if self._booster is None and self.residual:
            import lightgbm as lgb

            self._booster = lgb.Booster(model_str=self.residual)
        return self._booster

    def predict(self, frame: pd.DataFrame, basis: str) -> np.ndarray:
        ops = self.ops(frame, basis)
        base = self.base(frame, basis)
        booster = self.booster()
        if booster is not None:
            x = transfer_features(frame).reindex(columns=self.features, fill_value=0.0).to_numpy("float64")
            base = base * np.clip(booster.predict(x), RATIO_CLIP[0], RATIO_CLIP[1])
        # the time between the ops (launch gaps, host time not hidden): what the corrected model adds to
        # the ops' GPU time, never negative -- the correction cannot make an op faster than its time
        return ops + np.maximum(base - ops, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "log_eff": self.log_eff,
            "launch_us": self.launch_us,
            "framework_us": self.framework_us,
            "host_beta": self.host_beta,
            "cpu_log": self.cpu_log,
            "step_us": self.step_us,
            "step_host": self.step_host,
            "call_us": self.call_us,
            "stands": self.stands,
            "q_log": self.q_log,
            "residual": self.residual,
            "features": self.features,
            "n_train": self.n_train,
            "devices": self.devices,
        }


@dataclass
class ProgramModel:
    """Per-config models and the basis they were fitted on ("roofline" or an op predictor's id)."""

    basis: str
    configs: dict[str, ConfigModel]
    fitted: bool = True

    def predict(self, frame: pd.DataFrame, config: str = "eager") -> np.ndarray:
        model = self.configs.get(config) or self.configs["eager"]
        return model.predict(frame, "pred")

    def config(self, config: str = "eager") -> ConfigModel:
        return self.configs.get(config) or self.configs["eager"]

    def save(self, path: Path) -> Path:
        from components.common.atomic import atomic_write_text

        payload = {
            "format": FORMAT_VERSION,
            "basis": self.basis,
            "configs": {k: v.to_json() for k, v in self.configs.items()},
        }
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(path), json.dumps(payload) + "\n")
        return Path(path)

    @classmethod
    def load(cls, path: Path) -> ProgramModel:
        payload = json.loads(Path(path).read_text())
        if payload.get("format") != FORMAT_VERSION:
            raise ValueError(
                f"{path}: program model format {payload.get('format')!r}, expected {FORMAT_VERSION}"
            )
        configs = {k: ConfigModel(**v) for k, v in payload["configs"].items()}
        return cls(str(payload["basis"]), configs)

    @classmethod
    def untrained(cls) -> ProgramModel:
        return cls("any", {"eager": ConfigModel({}, DEFAULT_LAUNCH_US, DEFAULT_FRAMEWORK_US)}, fitted=False)


def kind_sums(op_frame: pd.DataFrame, value: str, prefix: str) -> pd.DataFrame:
    """Per (program, device): summed ``count * value`` per op kind, as ``<prefix>_<kind>`` columns --
    ops that run from the L2 (``l2_ratio`` > 0, ``program_features.l2_warm``) at their L2 time in
    ``<prefix>_l2warm`` instead of their kind's, FP32 GEMMs on GPUs whose FP32 lanes share INT32's
    datapath in ``<prefix>_gemm_fp32_shared`` (``program_features.op_terms``) --, and
    ``<prefix>_lowpar``: the extra time of kernels too small to occupy every SM
    (``time * (1/active_fraction - 1)``; its weight is learned like an efficiency)."""
    f = op_frame.assign(_t=op_frame[value] * op_frame["count"], kind=op_terms(op_frame))
    ratio = f["l2_ratio"] if "l2_ratio" in f.columns else pd.Series(0.0, index=f.index)
    warm = f.assign(kind=L2_WARM, _t=f["_t"] * ratio)[ratio > 0]
    table = pd.concat([f[ratio <= 0], warm]).pivot_table(
        index=["program", "device_id"], columns="kind", values="_t", aggfunc="sum", fill_value=0.0
    )
    table = table.reindex(columns=list(OP_TERMS), fill_value=0.0)
    active = f["active"] if "active" in f.columns else pd.Series(1.0, index=f.index)
    lowpar = f.assign(_l=f["_t"] * (1.0 / active - 1.0)).groupby(["program", "device_id"])["_l"].sum()
    table["lowpar"] = lowpar.reindex(table.index).fillna(0.0)
    return table.add_prefix(f"{prefix}_").reset_index()


def _fit_parametric(frame: pd.DataFrame, target: np.ndarray, kinds: Sequence[str]) -> ConfigModel:
    """Least squares (relative error) for per-kind efficiencies, the launch floor, the per-call CPU
    cost, its host scaling and the per-group extra CPU cost."""
    from scipy.optimize import least_squares

    steps = "rnn_steps" in frame.columns and int((frame["rnn_steps"] > 0).sum()) >= 5
    # With a step latency the RNN's time is the larger of its steps' latency and its op time; no factor is
    # learned on its op time (its roofline), which the latency hides on every GPU but the slowest at FP32.
    active = [
        k
        for k in kinds
        if f"pred_{k}" in frame.columns and (frame[f"pred_{k}"] > 0).sum() >= 5 and not (steps and k == "rnn")
    ]
    groups = [
        g
        for g, ks in CPU_GROUPS.items()
        if sum((frame[f"n_{k}"] > 0).sum() for k in ks if f"n_{k}" in frame.columns) >= 5
    ]
    n_k, n_g = len(active), len(groups)
    n_s = int(steps)
    # the host-side counts present in the rows (HOST_COUNTS)
    counted = [c for c in HOST_COUNTS if c in frame.columns and int((frame[c] > 0).sum()) >= 5]
    n_h = len(counted)

    def unpack(theta: np.ndarray) -> ConfigModel:
        log_eff = {k: float(v) for k, v in zip(active, theta[:n_k], strict=False)}
        cpu_log = {g: float(v) for g, v in zip(groups, theta[n_k : n_k + n_g], strict=False)}
        step = float(math.exp(theta[n_k + n_g])) if steps else 0.0
        costs = zip(counted, theta[n_k + n_g + n_s : n_k + n_g + n_s + n_h], strict=True)
        launch, framework, beta = theta[n_k + n_g + n_s + n_h :]
        return ConfigModel(
            log_eff,
            float(math.exp(launch)),
            float(math.exp(framework)),
            float(beta),
            cpu_log,
            step,
            step_host=False,
            call_us={c: float(math.exp(v)) for c, v in costs},
        )

    columns = FloatColumns(frame)  # base() is evaluated thousands of times on these rows

    def residuals(theta: np.ndarray) -> np.ndarray:
        pred = np.maximum(unpack(theta).base(columns, "pred"), 1e-6)
        if RELATIVE_LOSS:  # the relative error itself, as MAPE scores it (an over-estimate costs more)
            return pred / target - 1.0
        return np.log(pred) - np.log(target)

    # The host exponent needs GPUs of several generations to be identified: with fewer than
    # MIN_HOST_GPUS training GPUs it is pinned to 0 (else it extrapolates wildly to a new GPU).
    counts = frame["device_id"].value_counts() if "device_id" in frame.columns else pd.Series(dtype=int)
    has_host = "dram_gbps" in frame.columns and int((counts >= MIN_GPU_ROWS).sum()) >= MIN_HOST_GPUS
    theta0 = np.concatenate(
        [
            np.zeros(n_k + n_g),
            np.full(n_s, math.log(DEFAULT_STEP_US)),
            np.full(n_h, math.log(DEFAULT_CALL_US)),
            [math.log(DEFAULT_LAUNCH_US), math.log(DEFAULT_FRAMEWORK_US), 0.0],
        ]
    )
    # An op kind's efficiency is at most 1 (log_eff <= 0): the program never runs an op faster than
    # its basis time (the op engine's answer, or the roofline); the under-filled-GPU term is free.
    kind_upper = np.array([5.0 if k == "lowpar" else 0.0 for k in active])
    theta0[:n_k] = np.minimum(theta0[:n_k], kind_upper - 1e-6)
    lower = np.concatenate(
        [
            np.full(n_k, -3.0),
            np.full(n_g, -2.0),
            np.full(n_s, math.log(0.01)),
            np.full(n_h, math.log(0.01)),
            [math.log(0.5), math.log(0.5), -1.0 if has_host else -1e-9],
        ]
    )
    upper = np.concatenate(
        [
            kind_upper,
            np.full(n_g, 4.0),
            np.full(n_s, math.log(1000.0)),
            np.full(n_h, math.log(200.0)),
            [math.log(200.0), math.log(200.0), 1.0 if has_host else 1e-9],
        ]
    )
    fit = least_squares(residuals, theta0, bounds=(lower, upper), loss="soft_l1", f_scale=0.3)
    return unpack(fit.x)


def fit_config(
    frame: pd.DataFrame,
    target: np.ndarray,
    *,
    residual: bool = True,
    seed: int = 17,
    stands: Sequence[str] = (),
) -> ConfigModel:
    """Fit one config's model on program rows (``pred_<kind>``, ``n_kernels``, ``n_aten`` + features).
    A factor per op kind is learned from its basis time to its time in the program (no op runs at its
    roofline), except for the kinds in ``stands``: their basis times are the op engine's answers."""
    keep = np.isfinite(target) & (target > 0)
    frame, target = frame.loc[keep].reset_index(drop=True), target[keep]
    model = _fit_parametric(frame, target, tuple(k for k in PARAM_TERMS if k not in stands))
    model.stands = sorted(stands)
    model.n_train = len(frame)
    model.devices = sorted(frame["device_id"].astype(str).unique()) if "device_id" in frame else []
    gpus = int((frame["device_id"].value_counts() >= MIN_GPU_ROWS).sum()) if "device_id" in frame else 0
    if residual and len(frame) >= 100 and gpus >= MIN_RESIDUAL_GPUS:
        import lightgbm as lgb

        x = transfer_features(frame).drop(columns=list(RESIDUAL_EXCLUDE), errors="ignore")
        # The residual is a multiplicative ratio of the parametric total fitted with LightGBM's MAPE
        # objective (the relative error the evaluation scores); predict() keeps only what it adds on top
        # of the ops' GPU time.
        y = target / np.maximum(model.base(frame, "pred"), 1e-6)
        reg = lgb.LGBMRegressor(**{**RESIDUAL_PARAMS, "objective": "mape"}, random_state=seed)
        reg.fit(x.to_numpy("float64"), y)
        model.residual = reg.booster_.model_to_string()
        model.features = list(x.columns)
    return model


INTERVAL_FOLDS = 3
INTERVAL_QUANTILE = 0.9


def gpu_grouped_q_log(
    frame: pd.DataFrame, target: np.ndarray, *, residual: bool = True, stands: Sequence[str] = ()
) -> float | None:
    """The 90% quantile of |log(predicted / measured)| on GPUs held out of the fit (GPUs split into
    INTERVAL_FOLDS groups): the interval a new GPU's answer gets."""
    keep = np.isfinite(target) & (target > 0)
    frame, target = frame.loc[keep].reset_index(drop=True), target[keep]
    devices = sorted(frame["device_id"].astype(str).unique()) if "device_id" in frame else []
    if len(devices) < INTERVAL_FOLDS + 1:
        return None
    scores = []
    for fold in range(INTERVAL_FOLDS):
        held = set(devices[fold::INTERVAL_FOLDS])
        test = frame["device_id"].astype(str).isin(held).to_numpy()
        model = fit_config(
            frame.loc[~test].reset_index(drop=True), target[~test], residual=residual, stands=stands
        )
        pred = model.predict(frame.loc[test].reset_index(drop=True), "pred")
        scores.append(np.abs(np.log(np.maximum(pred, 1e-9) / target[test])))
    values = np.concatenate(scores)
    return float(np.quantile(values, INTERVAL_QUANTILE)) if values.size >= 30 else None
