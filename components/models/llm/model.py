"""LLMPredictor: LoRA on a causal LM + small heads on the mean-pooled last hidden state.

Two ways to read a runtime out of the LM, chosen by ``LLMConfig.head`` (and by measurement; see
the issue note): ``regression`` (default) puts a linear head on the pooled last hidden state, one
forward per kernel, MSE on standardized log targets; ``decode`` is constrained numeric decoding:
the LM writes log10(runtime in us) as ``d.dd`` after a fixed answer prefix, each digit chosen
among the ten digit tokens only (trained with cross-entropy over those ten), three forwards per
kernel. The classification head replaces the answer-word choice for the fine-tuned scenario
(zero/few-shot scoring lives in ``scenarios``).

The same pieces (``build_module``, ``encode_frame``, ``train_epoch``, ``eval_loss``) drive the
in-process ``fit`` here and the distributed Ray Train loop in ``components.training.llm``. They live
in ``encoding`` (config, prompts, token ids, targets) and ``module`` (torch); their names stay
importable from here.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from components.ingest.schema import LAUNCH_COLUMNS
from components.models.base import CLASS_TARGET, NUMERIC_TARGETS
from components.models.llm.encoding import (
    ANSWER_DIGIT_OFFSETS,
    ANSWER_PREFIX,
    DIGITS,
    HEADS,
    LOG_TARGETS,
    Encoded,
    LLMConfig,
    TargetStats,
    _short_kernel_name,
    digit_token_ids,
    encode_frame,
    format_log_runtime,
    inverse_transform,
    launch_parameters,
    parse_log_runtime,
    row_prompt,
    transform,
    without_arguments,
)
from components.models.llm.module import (
    batch_loss,
    batches,
    build_module,
    decode_runtimes,
    eval_loss,
    forward_all,
    train_epoch,
    trainable_state,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

FAMILY = "llm"
PREDICTOR_FILE = "predictor.json"
ADAPTER_DIR = "adapter"
TOKENIZER_DIR = "tokenizer"
HEADS_FILE = "heads.pt"


class LLMPredictor:
    """Predictor protocol, family ``llm``. ``fit`` trains in-process; ``train_llm`` uses Ray Train."""

    family = FAMILY
    # Canonical columns the prompts read that the feature table does not carry (source, shapes,
    # launch geometry, per-measurement parameters such as NeuSight's B/M/N/K or a Kernel Tuner
    # configuration); the evaluation harness joins them for the rows it scores.
    kernel_columns: tuple[str, ...] = ("source_text", "shape_json", "name")
    measurement_columns: tuple[str, ...] = ("params_json", *LAUNCH_COLUMNS)

    def __init__(self, config: LLMConfig | None = None) -> None:
        self.config = config or LLMConfig()
        self.classes: tuple[str, ...] = ()
        self.stats: TargetStats | None = None
        self.module: nn.Module | None = None
        self.tokenizer: Any = None
        self._trained_on: frozenset[str] = frozenset()
        self.history: list[dict[str, float]] = []

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.config.numeric_targets) + ((CLASS_TARGET,) if self.classes else ())

    @property
    def trained_on(self) -> frozenset[str]:
        return self._trained_on

    def mark_seen(self, frame: pd.DataFrame) -> None:
        """Also count ``frame``'s rows as seen (the early-stopping slice shaped the model too)."""
        if "measurement_id" in frame:
            self._trained_on = self._trained_on | frozenset(str(v) for v in frame["measurement_id"].dropna())

    # -- preparation shared with the Ray Train driver
    def prepare(self, train: pd.DataFrame) -> None:
        """Fix targets, classes, target statistics and tokenizer from the training frame."""
        from components.models.llm.loader import load_tokenizer

        cfg = self.config
        present = tuple(t for t in cfg.numeric_targets if t in train and train[t].notna().any())
        unknown = set(cfg.numeric_targets) - set(NUMERIC_TARGETS)
        if unknown:
            raise ValueError(f"unknown numeric targets {sorted(unknown)}; choose from {NUMERIC_TARGETS}")
        if cfg.head == "decode" and (tuple(cfg.numeric_targets) != ("duration_us",) or cfg.predict_class):
            raise ValueError(
                "head='decode' writes duration_us only: set numeric_targets [duration_us] "
                "and predict_class false"
            )
        cfg.numeric_targets = present
        if cfg.predict_class and cfg.class_column in train:
            self.classes = tuple(sorted(v for v in train[cfg.class_column].dropna().unique()))
        self.stats = TargetStats.fit(train, present)
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer(cfg.base)
        if "measurement_id" in train:
            self._trained_on = frozenset(str(v) for v in train["measurement_id"].dropna())

    def encode(self, frame: pd.DataFrame, catalog: Any | None = None) -> Encoded:
        return encode_frame(frame, self.tokenizer, self.config, self.classes, self.stats, catalog)

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    def fit(self, features: pd.DataFrame, val: pd.DataFrame | None = None) -> LLMPredictor:
        """Single-process training (the Ray Train path is ``components.training.llm.train_llm``)."""
        import torch

        self.prepare(features)
        train_data = self.encode(features)
        val_data = self.encode(val) if val is not None and len(val) else None
        self.module = build_module(self.config, len(self.config.numeric_targets), len(self.classes))
        params = [p for p in self.module.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=self.config.lr)
        for epoch in range(self.config.epochs):
            loss = train_epoch(
                self.module,
                optimizer,
                train_data,
                self.config.batch_size,
                self.config.seed + epoch,
                self.pad_id,
            )
            record = {"epoch": float(epoch), "train_loss": loss}
            if val_data is not None:
                record["val_loss"] = eval_loss(self.module, val_data, self.config.batch_size, self.pad_id)
            self.history.append(record)
        self.module.eval()
        return self

    def load_trainable(self, state: dict[str, torch.Tensor]) -> None:
        """Build the module and load LoRA + head weights (from a Ray Train checkpoint)."""
        self.module = build_module(self.config, len(self.config.numeric_targets), len(self.classes))
        missing = set(state) - set(self.module.state_dict())
        if missing:
            raise ValueError(f"checkpoint has weights the module lacks: {sorted(missing)[:5]}")
        self.module.load_state_dict(state, strict=False)
        self.module.eval()

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        if self.module is None:
            raise RuntimeError("LLMPredictor is not fitted or loaded")
        data = self.encode(features.drop(columns=list(NUMERIC_TARGETS), errors="ignore"))  # never the answer
        out = pd.DataFrame(index=features.index)
        if self.config.head == "decode":  # runtime only (prepare() refuses a class head with it)
            point = self.tokenizer.encode(".", add_special_tokens=False)[0]
            out["pred_duration_us"] = decode_runtimes(
                self.module, data, self.config.batch_size, self.pad_id, point
            )
            return out
        reg, logits = forward_all(self.module, data, self.config.batch_size, self.pad_id)
        for j, target in enumerate(self.config.numeric_targets):
            assert self.stats is not None
            z = reg[:, j].astype("float64") * self.stats.std[target] + self.stats.mean[target]
            out[f"pred_{target}"] = inverse_transform(target, z)
        if self.classes:
            out[f"pred_{CLASS_TARGET}"] = [self.classes[k] for k in logits.argmax(axis=1)]
            shifted = logits - logits.max(axis=1, keepdims=True)
            probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
            for k, label in enumerate(self.classes):
                out[f"proba_{label}"] = probs[:, k]
        return out

    # -- persistence
    def metadata(self) -> dict[str, Any]:
        config = asdict(self.config)
        return {
            "family": FAMILY,
            "config": config,
            "classes": list(self.classes),
            "stats": asdict(self.stats) if self.stats else None,
            "trained_on": sorted(self._trained_on),
            "history": self.history,
        }

    def save(self, directory: Path) -> None:
        import torch

        if self.module is None:
            raise RuntimeError("nothing to save: LLMPredictor is not fitted")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.module.lm.save_pretrained(str(directory / ADAPTER_DIR))
        self.tokenizer.save_pretrained(str(directory / TOKENIZER_DIR))
        heads = {k: v for k, v in trainable_state(self.module).items() if not k.startswith("lm.")}
        torch.save(heads, directory / HEADS_FILE)
        (directory / PREDICTOR_FILE).write_text(json.dumps(self.metadata(), indent=1))

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> LLMPredictor:
        predictor = cls(LLMConfig.from_dict(meta["config"]))
        predictor.classes = tuple(meta.get("classes") or ())
        predictor.stats = TargetStats(**meta["stats"]) if meta.get("stats") else None
        predictor._trained_on = frozenset(meta.get("trained_on") or ())
        predictor.history = list(meta.get("history") or [])
        return predictor

    @classmethod
    def load(cls, directory: Path) -> LLMPredictor:
        import torch
        from transformers import AutoTokenizer

        directory = Path(directory)
        meta = json.loads((directory / PREDICTOR_FILE).read_text())
        if meta.get("family") != FAMILY:
            raise ValueError(f"{directory}: family {meta.get('family')!r} is not {FAMILY!r}")
        predictor = cls.from_metadata(meta)
        predictor.tokenizer = AutoTokenizer.from_pretrained(str(directory / TOKENIZER_DIR))
        module = build_module(
            predictor.config,
            len(predictor.config.numeric_targets),
            len(predictor.classes),
            adapter_dir=directory / ADAPTER_DIR,
        )
        module.load_state_dict(torch.load(directory / HEADS_FILE, weights_only=True), strict=False)
        module.eval()
        predictor.module = module
        return predictor


# Everything callers import from ``components.models.llm.model`` (the torch module and the row
# encoding live in ``module`` and ``encoding``; these names stay importable from here).
__all__ = [
    "ADAPTER_DIR",
    "ANSWER_DIGIT_OFFSETS",
    "ANSWER_PREFIX",
    "DIGITS",
    "FAMILY",
    "HEADS",
    "HEADS_FILE",
    "LOG_TARGETS",
    "PREDICTOR_FILE",
    "TOKENIZER_DIR",
    "Encoded",
    "LLMConfig",
    "LLMPredictor",
    "TargetStats",
    "_short_kernel_name",
    "batch_loss",
    "batches",
    "build_module",
    "decode_runtimes",
    "digit_token_ids",
    "encode_frame",
    "eval_loss",
    "format_log_runtime",
    "forward_all",
    "inverse_transform",
    "launch_parameters",
    "parse_log_runtime",
    "row_prompt",
    "train_epoch",
    "trainable_state",
    "transform",
    "without_arguments",
]
