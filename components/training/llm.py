"""Distributed LoRA fine-tuning of the LLM predictor with Ray Train (``TorchTrainer``).

The driver (``train_llm``) tokenizes once, fixes classes and target statistics, and hands the
encoded rows to ``train_func`` on N workers (DDP via ``prepare_model``; CPU here, GPU when asked).
Every epoch each worker reports; rank 0 attaches a checkpoint (LoRA + heads + optimizer + early
stopping state) and logs to MLflow, so a run resumes from any checkpoint. Validation is a slice
of the *train side* (never the test split); every rank evaluates the whole slice so all ranks see
the same loss and stop at the same epoch (an uneven stop would hang the DDP all-reduce).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from components.platform.config import Settings

STATE_FILE = "state.pt"
LLM_EXPERIMENT = "kernelcast-llm"
LLM_LOADER = "components.models.llm:load"


def _encoded_to_config(data: Any) -> dict[str, Any]:
    raw = {"input_ids": data.input_ids, "y_num": data.y_num.tolist(), "y_cls": data.y_cls.tolist()}
    if data.answer_start is not None:  # head="decode"
        raw["answer_start"], raw["answer_digits"] = data.answer_start.tolist(), data.answer_digits.tolist()
    return raw


def _encoded_from_config(raw: dict[str, Any], n_numeric: int) -> Any:
    from components.models.llm.encoding import Encoded

    y_num = np.asarray(raw["y_num"], dtype="float32").reshape(len(raw["input_ids"]), n_numeric)
    decode = "answer_start" in raw
    return Encoded(
        raw["input_ids"],
        y_num,
        np.asarray(raw["y_cls"], dtype="int64"),
        [],
        np.asarray(raw["answer_start"], dtype="int64") if decode else None,
        np.asarray(raw["answer_digits"], dtype="int64").reshape(-1, 3) if decode else None,
    )


def _shard(n: int, rank: int, world: int) -> list[int]:
    """Rows of this rank; every rank gets the same count (wrapping around) so DDP steps stay in lockstep."""
    per_rank = math.ceil(n / world)
    return [(rank + world * k) % n for k in range(per_rank)]


def _log_mlflow(tracking_uri: str | None, run_id: str | None, metrics: dict[str, float], step: int) -> None:
    if not (tracking_uri and run_id):
        return
    from components.registry.mlflow_registry import mlflow_client

    client = mlflow_client(tracking_uri)
    for key, value in metrics.items():
        if isinstance(value, float | int) and math.isfinite(value):
            client.log_metric(run_id, key, float(value), step=step)


def train_func(config: dict[str, Any]) -> None:
    """Ray Train worker loop: shard, DDP, train per epoch, report + checkpoint, early stop."""
    import ray.train
    import ray.train.torch
    import torch

    from components.models.llm.encoding import LLMConfig
    from components.models.llm.module import build_module, eval_loss, train_epoch, trainable_state

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    cfg = LLMConfig.from_dict(config["llm_config"])
    n_numeric, n_classes = len(cfg.numeric_targets), len(config["classes"])
    train_all = _encoded_from_config(config["train"], n_numeric)
    val = _encoded_from_config(config["val"], n_numeric) if config.get("val") else None
    train = train_all.subset(_shard(len(train_all), rank, world))

    module = build_module(cfg, n_numeric, n_classes, base_path=config["base_path"])
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr)
    start_epoch, best, bad_epochs, history = 0, math.inf, 0, []
    # Ray's own checkpoint (a restarted worker group) wins; else the one the caller resumes from.
    # (Ray Train v2 deprecates TorchTrainer(resume_from_checkpoint=...): it travels in the config.)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None and config.get("resume_from"):
        checkpoint = ray.train.Checkpoint.from_directory(config["resume_from"])
    if checkpoint:
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / STATE_FILE, weights_only=False)
        module.load_state_dict(state["trainable"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, best, bad_epochs, history = (
            state["epoch"] + 1,
            state["best"],
            state["bad_epochs"],
            state["history"],
        )
    model = ray.train.torch.prepare_model(module)

    patience = int(config.get("patience", 2))
    for epoch in range(start_epoch, int(config["epochs"])):
        if bad_epochs >= patience:
            break  # resumed after an early stop: nothing left to do
        started = time.perf_counter()
        train_loss = train_epoch(model, optimizer, train, cfg.batch_size, cfg.seed + epoch, config["pad_id"])
        step_s = (time.perf_counter() - started) / max(math.ceil(len(train) / cfg.batch_size), 1)
        val_loss = eval_loss(module, val, cfg.batch_size, config["pad_id"]) if val is not None else train_loss
        improved = val_loss < best - 1e-4
        best, bad_epochs = (val_loss, 0) if improved else (best, bad_epochs + 1)
        metrics = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "best_val_loss": best,
            "stopped_early": float(bad_epochs >= patience),
            "s_per_step": step_s,
        }
        history.append({k: float(v) for k, v in metrics.items()})
        if rank == 0:
            _log_mlflow(config.get("tracking_uri"), config.get("run_id"), metrics, epoch)
            with tempfile.TemporaryDirectory() as folder:
                torch.save(
                    {
                        "trainable": trainable_state(module),
                        "optimizer": optimizer.state_dict(),
                        "epoch": epoch,
                        "best": best,
                        "bad_epochs": bad_epochs,
                        "history": history,
                    },
                    Path(folder) / STATE_FILE,
                )
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))
        else:
            ray.train.report(metrics)
        if bad_epochs >= patience:
            break


def split_validation(
    train: pd.DataFrame, share: float = 0.15, key: str = "kernel_id"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Validation slice of the train side, grouped by kernel and chosen by hash (deterministic)."""
    from components.common.sampling import unit_hash

    keys = train[key].astype(str) if key in train else train.index.astype(str).to_series(index=train.index)
    # Historical draw: first 32 bits of sha1("llm-val|<key>") over 2**32 - 1.
    is_val = unit_hash(keys, "llm-val", sep="|", bits=32, closed=True) < share
    return train[~is_val], train[is_val]


def train_llm(
    train_frame: pd.DataFrame,
    val_frame: pd.DataFrame | None,
    settings: Settings,
    *,
    workers: int = 2,
    epochs: int = 2,
    max_tokens: int = 256,
    batch_size: int = 8,
    config: Any | None = None,
    patience: int = 2,
    use_gpu: bool | None = None,
    resume_from: Path | None = None,
    register_as: str | None = None,
    run_name: str = "llm-lora",
) -> Path:
    """Fine-tune with Ray Train; save the best epoch's predictor; log + register it (tag family=llm).

    Returns the saved predictor directory (``settings.models_dir/llm/<mlflow run id>``).
    ``register_as`` defaults to ``settings.registered_model``: an LLM is one more version of
    ``kernelcast`` (version tag ``family=llm``), and becomes champion only through ``promote``'s
    threshold gate like any other; pass "" to skip registering.
    """
    import ray
    import torch
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    import mlflow
    from components.models.llm.loader import resolve_base
    from components.models.llm.model import LLMConfig, LLMPredictor
    from components.platform.runtime import configure_environment, ensure_ray
    from components.registry.mlflow_registry import ensure_experiment, log_predictor, mlflow_client, register

    configure_environment(settings)
    cfg = config or LLMConfig()
    cfg.max_tokens, cfg.batch_size, cfg.epochs = max_tokens, batch_size, epochs
    predictor = LLMPredictor(cfg)
    predictor.prepare(train_frame)
    train_data = predictor.encode(train_frame)
    val_data = predictor.encode(val_frame) if val_frame is not None and len(val_frame) else None
    if val_frame is not None:
        predictor.mark_seen(val_frame)
    base_path = resolve_base(cfg.base, settings.cache_dir / "llm")  # de-quantize once, in the driver

    tracking_uri = settings.tracking_uri()
    mlflow.set_tracking_uri(tracking_uri)
    experiment_id = ensure_experiment(LLM_EXPERIMENT, settings.artifact_root(), tracking_uri)
    client = mlflow_client(tracking_uri)
    run_id = client.create_run(experiment_id, run_name=run_name, tags={"family": "llm"}).info.run_id
    gpu = torch.cuda.is_available() if use_gpu is None else use_gpu
    params = {
        **{k: str(v) for k, v in asdict(cfg).items()},
        "workers": workers,
        "use_gpu": gpu,
        "n_train": len(train_data),
        "n_val": len(val_data) if val_data else 0,
        "patience": patience,
    }
    for key, value in params.items():
        client.log_param(run_id, key, str(value)[:500])

    ensure_ray(settings)
    trainer = TorchTrainer(
        train_func,
        train_loop_config={
            "llm_config": asdict(cfg),
            "classes": list(predictor.classes),
            "base_path": base_path,
            "train": _encoded_to_config(train_data),
            "val": _encoded_to_config(val_data) if val_data else None,
            "pad_id": predictor.pad_id,
            "epochs": epochs,
            "patience": patience,
            "tracking_uri": tracking_uri,
            "run_id": run_id,
            "resume_from": str(resume_from) if resume_from else None,
        },
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpu),
        run_config=RunConfig(
            name=f"llm-{run_id[:12]}",
            storage_path=str(settings.state_dir / "ray-results"),
            checkpoint_config=CheckpointConfig(num_to_keep=None),
            worker_runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        ),
    )
    try:
        result = trainer.fit()
    except Exception:
        client.set_terminated(run_id, status="FAILED")
        raise
    candidates = list(result.best_checkpoints)
    if not candidates and resume_from is not None:
        # Resumed from a run that had already finished (or stopped early): nothing new was reported.
        resumed = ray.train.Checkpoint.from_directory(str(resume_from))
        candidates = [
            (resumed, torch.load(Path(resume_from) / STATE_FILE, weights_only=False)["history"][-1])
        ]
    if not candidates:
        raise RuntimeError(f"Ray Train run llm-{run_id[:12]} reported no checkpoint")
    best_checkpoint, best_metrics = min(candidates, key=lambda pair: pair[1]["val_loss"])
    with best_checkpoint.as_directory() as folder:
        state = torch.load(Path(folder) / STATE_FILE, weights_only=False)
    predictor.load_trainable(state["trainable"])
    predictor.history = state["history"]
    out_dir = settings.models_dir / "llm" / run_id
    predictor.save(out_dir)

    metrics = {
        "best_val_loss": float(best_metrics["val_loss"]),
        "best_epoch": float(best_metrics["epoch"]),
        "epochs_run": float(len(state["history"])),
    }
    with mlflow.start_run(run_id=run_id):
        model_uri = log_predictor(
            out_dir,
            metrics,
            {},
            {"family": "llm", "base": str(cfg.base or "embedded")},
            loader=LLM_LOADER,
            tracking_uri=tracking_uri,
        )
        mlflow.log_dict(
            {"checkpoint": str(best_checkpoint.path), "history": predictor.history}, "training_summary.json"
        )
    name = settings.registered_model if register_as is None else register_as
    if name:
        version = register(model_uri, name, tracking_uri)
        mlflow_client(tracking_uri).set_model_version_tag(name, str(version), "family", "llm")
    return out_dir


# --------------------------------------------------------------------------- from params.yaml


@dataclass(frozen=True)
class LLMRunParams:
    """How one LLM fine-tune runs (params.yaml ``train.llm``), beside the model's own ``LLMConfig``."""

    workers: int = 2
    patience: int = 2
    val_share: float = 0.15
    # CPU budgets (measured on 2 cores, SmolLM2-135M): a forward reads ~3 prompts of 256 tokens a
    # second, a LoRA step of 8 such prompts per worker takes ~15 s, so train sides and scored test
    # sides are capped (by hash, the same rows every run) and the caps are stated with every figure.
    max_train_rows: int | None = 384
    max_test_rows: int | None = 300


def llm_params(params: dict[str, Any]) -> tuple[Any, LLMRunParams]:
    """``(LLMConfig, LLMRunParams)`` from params.yaml; unknown keys are an error, not ignored."""
    from dataclasses import fields

    from components.models.llm.model import LLMConfig
    from components.platform.config import ParamsError, section

    train = section(params, "train")
    raw = section(train, "llm", allowed=None, label="train.llm")
    run_keys = {f.name for f in fields(LLMRunParams)}
    config_keys = {f.name for f in fields(LLMConfig)}
    unknown = sorted(str(key) for key in set(raw) - config_keys - run_keys)
    if unknown:
        raise ParamsError(
            f"params.yaml train.llm: unknown key {unknown[0]!r}"
            + (f" (and {', '.join(map(repr, unknown[1:]))})" if unknown[1:] else "")
            + f" (known: {', '.join(sorted(config_keys | run_keys))})"
        )
    run = LLMRunParams(**{key: raw.pop(key) for key in list(raw) if key in run_keys})
    if raw.get("base") in ("", "embedded"):
        raw["base"] = None  # the embedded SmolLM2-135M wheel
    raw.setdefault("seed", int(train.get("seed", 0)))
    return LLMConfig.from_dict(raw), run


def fit_and_validation_sides(
    train_side: pd.DataFrame, split: str | None, settings: Settings, config: Any, run: LLMRunParams
) -> tuple[Any, pd.DataFrame, pd.DataFrame]:
    """``(config for the split, rows to fit, validation slice)`` from a split's train side: the
    capped hash subsample, with kernel source, shapes and launch parameters joined."""
    from dataclasses import replace

    from components.common.sampling import subsample
    from components.ingest.canonical import attach_canonical_columns
    from components.models.base import class_label_column
    from components.models.llm.model import LLMPredictor

    cfg = replace(config, class_column=class_label_column(split))
    # A row that measures none of the targets the model learns would only add padding to batches.
    wanted = [
        c
        for c in (*cfg.numeric_targets, *([cfg.class_column] if cfg.predict_class else ()))
        if c in train_side
    ]
    teachable = train_side[train_side[wanted].notna().any(axis=1)] if wanted else train_side.iloc[0:0]
    sample = subsample(teachable, run.max_train_rows, salt="llm-subsample")
    if sample.empty:
        raise ValueError(f"split {split!r}: no train rows measure any of {wanted}")
    sample = attach_canonical_columns(
        sample,
        settings.data_dir / "canonical",
        kernels=LLMPredictor.kernel_columns,
        measurements=LLMPredictor.measurement_columns,
    )
    fit_side, val_side = split_validation(sample, share=run.val_share)
    return cfg, fit_side, val_side


def fit_on_side(
    train_side: pd.DataFrame,
    split: str | None,
    settings: Settings,
    *,
    config: Any,
    run: LLMRunParams,
    register_as: str | None = "",
    run_name: str = "llm-lora",
) -> tuple[Any, Path]:
    """Fine-tune on a split's train side (``fit_and_validation_sides``; the validation slice drives
    early stopping) with Ray Train. Returns (loaded predictor, its directory)."""
    from components.models.llm.model import LLMPredictor

    cfg, fit_side, val_side = fit_and_validation_sides(train_side, split, settings, config, run)
    out_dir = train_llm(
        fit_side,
        val_side,
        settings,
        workers=run.workers,
        epochs=cfg.epochs,
        max_tokens=cfg.max_tokens,
        batch_size=cfg.batch_size,
        config=cfg,
        patience=run.patience,
        register_as=register_as,
        run_name=run_name,
    )
    return LLMPredictor.load(out_dir), out_dir


def fit_for_bench(train: pd.DataFrame, split: str | None, settings: Settings) -> Any:
    """The ``kernelcast bench accuracy`` entry point: a Ray Train fine-tune on the split's train side
    with params.yaml ``train.llm`` (capped to ``max_train_rows``), not registered."""
    from components.platform.config import load_params

    params = load_params(settings.params_file)
    config, run = llm_params(params)
    predictor, _ = fit_on_side(
        train, split, settings, config=config, run=run, register_as="", run_name=f"llm-bench-{split}"
    )
    return predictor
