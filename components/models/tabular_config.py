"""The tabular predictor's hyper-parameters (params.yaml ``train:`` merged with ``train: tabular:``) and how
a bench split adjusts them (``config_for_split``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from components.models.base import CLASS_TARGET, class_label_column
from components.models.transfer import RUNTIME_NORMALISERS

MODELS: tuple[str, ...] = ("lgbm", "mlp")
FEATURE_SETS: tuple[str, ...] = ("transfer", "absolute")


@dataclass
class TabularConfig:
    """Hyper-parameters (from params.yaml ``train:``); nothing here is tuned on a test split."""

    model: str = "lgbm"
    use_measured: bool = False  # m_* counters as inputs: only for "given profiling data" tasks
    class_label: str = CLASS_TARGET  # column the classifier learns (bolet: roofline_class_published)
    seed: int = 17
    min_rows: int = 20  # a target with fewer labelled training rows is not modelled
    max_train_rows: int | None = None  # deterministic subsample of the train side (by measurement_id)
    conformal_alpha: float = 0.1  # 90% intervals
    calibration_share: float = 0.2
    n_estimators: int = 400
    learning_rate: float = 0.05
    num_leaves: int = 63
    min_child_samples: int = 20
    subsample: float = 0.8
    colsample: float = 0.8
    mlp_hidden: tuple[int, ...] = (128, 64)
    mlp_max_iter: int = 200
    mlp_alpha: float = 1e-4
    # Families outside the model's scope, neither trained on nor guessed (predicted NaN, so
    # evaluation leaves them out and says how many it scored): NCCL collectives have no per-GPU
    # analytical model (their time is the interconnect's, which the catalog does not describe), and
    # whole programs (KernelBench modules, HeCBench kernels) have no op shape to compute features
    # from -- their runtime is the source-reading (llm) path's job. The bolet-roofline class task
    # brings programs back into scope (static features of their source).
    exclude_families: tuple[str, ...] = ("collective", "program")
    # "transfer": learn efficiency against the roofline from counts and ratios that mean the same on
    # every GPU (components.models.transfer), compose time from the GPU's peaks, derive GFLOP/s,
    # bandwidth and intensity from that one runtime. "absolute": the stop-8 model (device peaks as
    # inputs, one model per target) -- kept to show on the validation protocol why it lost.
    feature_set: str = "transfer"
    runtime_normaliser: str = "roofline"  # roofline | pipes (components.models.transfer.RUNTIME_NORMALISERS)
    transfer_exclude: tuple[str, ...] = ()  # transferable inputs left out (chosen by the selection protocol)
    monotone: bool = True  # physical monotone constraints on the runtime model (transfer.MONOTONE)
    launch_floor: bool = True  # add a per-family launch/latency floor (µs) to the scaled roofline time
    # Calibration slice for the intervals: these shares of kernels and of training GPUs are held out
    # of an auxiliary fit, so residuals look like those on kernels and GPUs never seen.
    calibration_device_share: float = 0.25
    min_calibration_rows: int = 30  # a Mondrian category (family, out-of-range) needs this many

    def __post_init__(self) -> None:
        self.exclude_families = tuple(self.exclude_families)
        self.transfer_exclude = tuple(self.transfer_exclude)
        if self.model not in MODELS:
            raise ValueError(f"tabular model must be one of {', '.join(MODELS)}, not {self.model!r}")
        if self.feature_set not in FEATURE_SETS:
            raise ValueError(
                f"tabular feature_set must be one of {', '.join(FEATURE_SETS)}, not {self.feature_set!r}"
            )
        if self.runtime_normaliser not in RUNTIME_NORMALISERS:
            raise ValueError(
                f"tabular runtime_normaliser must be one of {', '.join(RUNTIME_NORMALISERS)}, "
                f"not {self.runtime_normaliser!r}"
            )
        if not 0 < self.conformal_alpha < 1:
            raise ValueError(f"conformal_alpha must be in (0, 1), got {self.conformal_alpha}")
        self.mlp_hidden = tuple(int(h) for h in self.mlp_hidden)

    @classmethod
    def from_params(cls, params: dict[str, Any], **overrides: Any) -> TabularConfig:
        """Config from params.yaml's ``train:`` merged with ``train: tabular:`` (which wins), plus overrides.

        ``train:`` also holds keys other readers own (bench caps, families; checked by
        ``components.platform.config``), so only its keys naming a field are taken. Every key under
        ``train.tabular:`` must name a field: an unknown one is a ``ParamsError`` (a ValueError)
        naming it, so a typo never silently falls back to a default.
        """
        from dataclasses import fields

        from components.platform.config import ParamsError

        section = dict(params.get("train", params) or {})
        tabular = section.pop("tabular", None) or {}
        if not isinstance(tabular, dict):
            raise ParamsError(f"params.yaml train.tabular: must be a mapping, got {type(tabular).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in set(tabular) - known)
        if unknown:
            raise ParamsError(
                f"params.yaml train.tabular: unknown key {unknown[0]!r}"
                + (f" (and {', '.join(map(repr, unknown[1:]))})" if unknown[1:] else "")
                + f" (known: {', '.join(sorted(known))})"
            )
        section.update(tabular)
        values = {k: v for k, v in section.items() if k in known}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def config_for_split(config: TabularConfig, split: str | None) -> TabularConfig:
    """``config`` as fitted on ``split``'s train side: the classifier learns the split's class label,
    and on the bolet split (classifying HeCBench programs is that task's whole point) programs stay in."""
    config = replace(config, class_label=class_label_column(split))
    if split == "bolet-roofline":
        config = replace(config, exclude_families=tuple(f for f in config.exclude_families if f != "program"))
    return config
