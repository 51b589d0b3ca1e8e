"""LLMPredictor: LoRA on a causal LM + small heads on the mean-pooled last hidden state.

Two ways to read a runtime out of the LM, chosen by ``LLMConfig.head`` (and by measurement; see
the issue note): ``regression`` (default) puts a linear head on the pooled last hidden state, one
forward per kernel, MSE on standardized log targets; ``decode`` is constrained numeric decoding:
the LM writes log10(runtime in us) as ``d.dd`` after a fixed answer prefix, each digit chosen
among the ten digit tokens only (trained with cross-entropy over those ten), three forwards per
kernel. The classification head replaces the answer-word choice for the fine-tuned scenario
(zero/few-shot scoring lives in ``scenarios``).

The same pieces (``build_module``, ``encode_frame``, ``train_epoch``, ``eval_loss``) drive the
in-process ``fit`` here and the distributed Ray Train loop in ``components.training.llm``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from components.models.base import CLASS_TARGET, NUMERIC_TARGETS
from components.models.llm.prompt import PromptError, build_prompt

if TYPE_CHECKING:
    import torch
    from torch import nn

FAMILY = "llm"
PREDICTOR_FILE = "predictor.json"
ADAPTER_DIR = "adapter"
TOKENIZER_DIR = "tokenizer"
HEADS_FILE = "heads.pt"
# Spread over orders of magnitude: regress their natural log; hit rates are already in [0, 1].
LOG_TARGETS: frozenset[str] = frozenset({"duration_us", "achieved_gbps", "gflops", "arith_intensity"})
_LOG_FLOOR = 1e-12
HEADS: tuple[str, ...] = ("regression", "decode")
# Constrained decoding writes log10(duration_us) as "d.dd": 0.00 (1 us) .. 9.99 (~2.7 h).
ANSWER_PREFIX = "\nAnswer: log10 of the runtime in microseconds = "
DIGITS: tuple[str, ...] = tuple("0123456789")
ANSWER_DIGIT_OFFSETS: tuple[int, ...] = (0, 2, 3)  # digit tokens of "d.dd" (offset 1 is the point)


def format_log_runtime(duration_us: float) -> str | None:
    """``"d.dd"`` = log10 of the runtime in us, clamped to [0, 9.99]; None when not measured."""
    if not (isinstance(duration_us, int | float) and math.isfinite(duration_us) and duration_us > 0):
        return None
    return f"{min(max(math.log10(duration_us), 0.0), 9.99):.2f}"


def parse_log_runtime(digits: Sequence[int]) -> float:
    """Runtime in us from the three decoded digits of ``d.dd``."""
    return float(10 ** (digits[0] + digits[1] / 10 + digits[2] / 100))


@dataclass
class LLMConfig:
    base: str | None = None  # None = embedded SmolLM2-135M; else an HF path/id
    max_tokens: int = 256
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lr: float = 1e-3
    epochs: int = 2
    batch_size: int = 8
    seed: int = 0
    class_column: str = "roofline_class"  # bolet scenarios use roofline_class_published
    numeric_targets: tuple[str, ...] = ("duration_us",)
    predict_class: bool = True
    head: str = "regression"  # regression | decode (constrained numeric decoding of duration_us)

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"LLMConfig.head {self.head!r}: choose one of {', '.join(HEADS)}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LLMConfig:
        data = dict(data)
        for key in ("target_modules", "numeric_targets"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)


@dataclass
class Encoded:
    """Token ids per row plus standardized numeric targets (NaN = missing) and class ids (-1 = missing)."""

    input_ids: list[list[int]]
    y_num: np.ndarray  # (n, n_numeric) float32
    y_cls: np.ndarray  # (n,) int64
    notes: list[str] = field(default_factory=list)
    # head="decode" only: where the answer starts in input_ids, and its three digits (-1 = unknown;
    # rows with known digits carry the answer tokens, for teacher forcing).
    answer_start: np.ndarray | None = None  # (n,) int64
    answer_digits: np.ndarray | None = None  # (n, 3) int64

    def __len__(self) -> int:
        return len(self.input_ids)

    def subset(self, rows: Sequence[int]) -> Encoded:
        rows = list(rows)
        return Encoded([self.input_ids[i] for i in rows], self.y_num[rows], self.y_cls[rows], [],
                       None if self.answer_start is None else self.answer_start[rows],
                       None if self.answer_digits is None else self.answer_digits[rows])


@dataclass
class TargetStats:
    """Per numeric target: mean and std of its (log-)transformed training values."""

    mean: dict[str, float]
    std: dict[str, float]

    @classmethod
    def fit(cls, frame: pd.DataFrame, targets: Sequence[str]) -> TargetStats:
        mean, std = {}, {}
        for target in targets:
            values = transform(target, frame[target].to_numpy(dtype="float64")) if target in frame else np.array([])
            values = values[np.isfinite(values)]
            mean[target] = float(values.mean()) if values.size else 0.0
            std[target] = float(values.std()) if values.size > 1 and values.std() > 0 else 1.0
        return cls(mean, std)


def transform(target: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype="float64")
    if target in LOG_TARGETS:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(values > 0, np.log(np.maximum(values, _LOG_FLOOR)), np.nan)
    return values


def inverse_transform(target: str, values: np.ndarray) -> np.ndarray:
    return np.exp(values) if target in LOG_TARGETS else values


# --------------------------------------------------------------------------- prompts from rows


def _short_kernel_name(row: pd.Series) -> str | None:
    """Identifier of the kernel (``ns::foo<T>(int, ...)`` -> ``foo``) to find its body in the source."""
    for column in ("name", "op"):
        value = row.get(column)
        if isinstance(value, str) and value:
            head = value.split("(", 1)[0].split("<", 1)[0].strip()
            words = head.split("::")[-1].split()  # "void at::native::" ends in nothing: no name there
            if words and re.fullmatch(r"[A-Za-z_]\w*", words[-1]):
                return words[-1]
    return None


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value is not pd.NA


# Provenance in params_json that says nothing about the launch (or repeats the signature).
_NON_LAUNCH_PARAMS: frozenset[str] = frozenset({"signature", "problem_set", "launch", "level"})


def without_arguments(signature: str) -> str:
    """``void ns::k<128, 5>(int, float const*)`` -> ``void ns::k<128, 5>``: the trailing argument
    list goes (long, and says nothing the template does not); ``(anonymous namespace)`` stays."""
    text = signature.rstrip()
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i].rstrip() or text
    return text


def launch_parameters(params_json: Any) -> dict[str, Any]:
    """Per-measurement parameters (shapes, tuning configuration, program arguments) from
    ``params_json``; unreadable JSON gives none rather than failing the whole batch."""
    from components.features.analytical import _loads  # the project's one lenient JSON-object reader

    return {k: v for k, v in _loads(params_json).items() if k not in _NON_LAUNCH_PARAMS}


def row_prompt(row: pd.Series, catalog: Any, config: LLMConfig, tokenizer: Any, *,
               scenario: str = "fine-tune", profile_columns: Sequence[str] = (), question: bool = False) -> str:
    """Prompt text for one feature-table row (source_text if present, else op/family/shape_json)."""
    source = row.get("source_text")
    source = source if isinstance(source, str | bytes) and len(source) else None
    op_shapes: dict[str, Any] = {}
    for column in ("family", "op", "dtype"):
        if _present(row.get(column)):
            op_shapes[column] = row.get(column)
    if isinstance(row.get("shape_json"), str) and row.get("shape_json"):
        op_shapes["shapes"] = json.loads(row["shape_json"])
    if source is None and "shapes" not in op_shapes and isinstance(row.get("name"), str) and row.get("name"):
        op_shapes["signature"] = row["name"]  # neither source nor shapes: the signature is all there is
    launch: dict[str, Any] = {c: int(row[c]) for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
                              if c in row and _present(row[c])}
    shapes = op_shapes.get("shapes") or {}
    for key, value in launch_parameters(row.get("params_json")).items():
        if shapes.get(key) != value:  # the shapes are in the Operation line already
            # A library kernel's argument list is long and says nothing its template does not.
            launch[key] = without_arguments(value) if key == "kernel_name" and isinstance(value, str) else value
    profile = {c: float(row[c]) if _present(row.get(c)) else None for c in profile_columns} or None
    device = catalog.get(str(row["device_id"]))
    name = _short_kernel_name(row) or str(row.get("kernel_id", "<unnamed>"))
    def build(budget: int) -> str:
        return build_prompt(source, op_shapes if source is None else None, launch, device, scenario, budget,
                            tokenizer, kernel_name=name, profile_metrics=profile, question=question).text

    # Mangled names, long signatures and many launch parameters can outgrow a small budget on their
    # own; such a row gets a larger one (callers cut token ids to max_tokens, dropping the tail).
    for scale in (1, 2, 4, 8):
        try:
            return build(scale * config.max_tokens)
        except PromptError as exc:
            if "leaves no room" not in str(exc) or scale == 8:
                raise
    raise AssertionError("unreachable")


def encode_frame(frame: pd.DataFrame, tokenizer: Any, config: LLMConfig, classes: Sequence[str],
                 stats: TargetStats | None, catalog: Any | None = None) -> Encoded:
    """Tokenize every row's prompt and attach standardized targets."""
    if catalog is None:
        from components.devices import load_catalog

        catalog = load_catalog()
    ids: list[list[int]] = []
    notes: list[str] = []
    for _, row in frame.iterrows():
        try:
            text = row_prompt(row, catalog, config, tokenizer)
        except PromptError as exc:
            raise PromptError(f"row {row.get('measurement_id', row.name)}: {exc}") from exc
        ids.append(tokenizer.encode(text, add_special_tokens=True)[: config.max_tokens])
    y_num = np.full((len(frame), len(config.numeric_targets)), np.nan, dtype="float32")
    if stats is not None:
        for j, target in enumerate(config.numeric_targets):
            if target in frame:
                values = transform(target, frame[target].to_numpy(dtype="float64"))
                y_num[:, j] = (values - stats.mean[target]) / stats.std[target]
    index = {label: i for i, label in enumerate(classes)}
    labels = frame[config.class_column] if config.class_column in frame else pd.Series([None] * len(frame))
    y_cls = np.array([index.get(v, -1) if isinstance(v, str) else -1 for v in labels], dtype="int64")
    if config.head != "decode":
        return Encoded(ids, y_num, y_cls, notes)
    prefix = tokenizer.encode(ANSWER_PREFIX, add_special_tokens=False)
    durations = frame["duration_us"].to_numpy(dtype="float64") if "duration_us" in frame else np.full(len(frame), np.nan)
    starts, digits = np.zeros(len(ids), dtype="int64"), np.full((len(ids), 3), -1, dtype="int64")
    for i, duration in enumerate(durations):
        ids[i] = ids[i] + prefix
        starts[i] = len(ids[i])
        answer = format_log_runtime(float(duration))
        if answer is not None:  # teacher forcing: the answer follows the prefix
            ids[i] = ids[i] + tokenizer.encode(answer, add_special_tokens=False)
            digits[i] = [int(answer[k]) for k in ANSWER_DIGIT_OFFSETS]
    return Encoded(ids, y_num, y_cls, notes, starts, digits)


def digit_token_ids(tokenizer: Any) -> list[int]:
    """Token ids of "0".."9"; decoding needs each digit to be one token (true of SmolLM2/Llama/Qwen)."""
    ids = [tokenizer.encode(d, add_special_tokens=False) for d in DIGITS]
    if any(len(i) != 1 for i in ids):
        raise ValueError("head='decode' needs single-token digits; this tokenizer splits them: use head='regression'")
    return [i[0] for i in ids]


# --------------------------------------------------------------------------- torch module


def _module_class() -> type:
    from torch import nn

    class HeadedLM(nn.Module):
        """LoRA-adapted decoder + regression/classification heads on the masked mean of its last layer."""

        def __init__(self, peft_model: nn.Module, hidden: int, n_numeric: int, n_classes: int,
                     digit_ids: Sequence[int] = ()) -> None:
            super().__init__()
            self.lm = peft_model
            self.reg_head = nn.Linear(hidden, n_numeric) if n_numeric else None
            self.cls_head = nn.Linear(hidden, n_classes) if n_classes else None
            self.digit_ids = list(digit_ids)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    digit_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """(regression outputs, class logits, digit logits at ``digit_positions`` (B, P, 10))."""
            import torch

            # The decoder alone: the LM head's vocabulary projection (49k x seq) is never needed;
            # decoding projects only the asked positions onto the ten digit rows of the LM head.
            base = self.lm.get_base_model()
            hidden = base.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            empty = pooled.new_zeros((pooled.shape[0], 0))
            reg = self.reg_head(pooled) if self.reg_head is not None else empty
            logits = self.cls_head(pooled) if self.cls_head is not None else empty
            digits = pooled.new_zeros((pooled.shape[0], 0, len(DIGITS)))
            if digit_positions is not None and self.digit_ids:
                rows = torch.arange(hidden.shape[0]).unsqueeze(1)
                picked = hidden[rows, digit_positions.clamp(min=0, max=hidden.shape[1] - 1)]  # (B, P, H)
                weight = base.get_output_embeddings().weight[self.digit_ids]  # (10, H)
                digits = picked @ weight.T
            return reg, logits, digits

    return HeadedLM


def build_module(config: LLMConfig, n_numeric: int, n_classes: int, base_path: str | None = None,
                 adapter_dir: Path | None = None) -> nn.Module:
    """Base LM (frozen) + fresh or saved LoRA adapter + heads; only LoRA and heads train."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    from components.models.llm.loader import load_base_model

    torch.manual_seed(config.seed)
    base, tokenizer = load_base_model(base_path if base_path is not None else config.base)
    digit_ids: list[int] = []
    if config.head == "decode":
        n_numeric, digit_ids = 0, digit_token_ids(tokenizer)  # the LM head writes the runtime
    if adapter_dir is not None:
        lm = PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)
    else:
        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          target_modules=list(config.target_modules), bias="none")
        lm = get_peft_model(base, lora)
    return _module_class()(lm, int(base.config.hidden_size), n_numeric, n_classes, digit_ids)


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """Only the weights training changes (LoRA + heads): small enough to checkpoint every epoch."""
    names = {name for name, p in module.named_parameters() if p.requires_grad}
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items() if k in names}


def batches(data: Encoded, batch_size: int, order: Sequence[int] | None = None,
            pad_id: int = 0) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """Right-padded batches (row indices, tensors) in ``order`` (default: as given)."""
    import torch

    order = list(order) if order is not None else list(range(len(data)))
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = max(len(data.input_ids[i]) for i in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            seq = data.input_ids[i]
            ids[r, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[r, : len(seq)] = 1
        batch = {
            "input_ids": ids, "attention_mask": mask,
            "y_num": torch.from_numpy(data.y_num[rows]), "y_cls": torch.from_numpy(data.y_cls[rows]),
        }
        if data.answer_start is not None and data.answer_digits is not None:
            # Logits at position p predict token p+1: digit k of the answer is read one before it.
            offsets = torch.tensor(ANSWER_DIGIT_OFFSETS, dtype=torch.long) - 1
            batch["digit_positions"] = torch.from_numpy(data.answer_start[rows]).unsqueeze(1) + offsets
            batch["answer_digits"] = torch.from_numpy(data.answer_digits[rows])
        yield rows, batch


def batch_loss(module: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """MSE over present numeric targets + cross-entropy over labelled rows."""
    import torch
    import torch.nn.functional as F

    reg, logits, digits = module(batch["input_ids"], batch["attention_mask"], batch.get("digit_positions"))
    # keeps every head in the graph (DDP needs all grads)
    loss = reg.sum() * 0.0 + logits.sum() * 0.0 + digits.sum() * 0.0
    if digits.shape[1]:
        known = batch["answer_digits"][:, 0] >= 0
        if known.any():
            loss = loss + F.cross_entropy(digits[known].reshape(-1, len(DIGITS)),
                                          batch["answer_digits"][known].reshape(-1))
    if reg.shape[1]:
        present = torch.isfinite(batch["y_num"])
        if present.any():
            loss = loss + F.mse_loss(reg[present], batch["y_num"][present])
    if logits.shape[1]:
        labelled = batch["y_cls"] >= 0
        if labelled.any():
            loss = loss + F.cross_entropy(logits[labelled], batch["y_cls"][labelled])
    return loss


def train_epoch(module: nn.Module, optimizer: Any, data: Encoded, batch_size: int, seed: int,
                pad_id: int) -> float:
    """One pass in a seeded shuffled order; mean batch loss."""
    module.train()
    order = np.random.default_rng(seed).permutation(len(data)).tolist()
    losses = []
    for _, batch in batches(data, batch_size, order, pad_id):
        optimizer.zero_grad()
        loss = batch_loss(module, batch)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return float(np.mean(losses)) if losses else math.nan


def eval_loss(module: nn.Module, data: Encoded, batch_size: int, pad_id: int) -> float:
    import torch

    module.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for rows, batch in batches(data, batch_size, None, pad_id):
            total += float(batch_loss(module, batch)) * len(rows)
            count += len(rows)
    return total / count if count else math.nan


def forward_all(module: nn.Module, data: Encoded, batch_size: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(regression outputs, class logits) for every row, in row order; length-sorted batches."""
    import torch

    module.eval()
    order = sorted(range(len(data)), key=lambda i: (len(data.input_ids[i]), i))
    reg_out: dict[int, np.ndarray] = {}
    cls_out: dict[int, np.ndarray] = {}
    with torch.no_grad():
        for rows, batch in batches(data, batch_size, order, pad_id):
            reg, logits, _ = module(batch["input_ids"], batch["attention_mask"])
            for r, i in enumerate(rows):
                reg_out[i], cls_out[i] = reg[r].numpy(), logits[r].numpy()
    n = len(data)
    return (np.stack([reg_out[i] for i in range(n)]) if n else np.zeros((0, 0)),
            np.stack([cls_out[i] for i in range(n)]) if n else np.zeros((0, 0)))


def decode_runtimes(module: nn.Module, data: Encoded, batch_size: int, pad_id: int, point_id: int) -> np.ndarray:
    """Constrained greedy decoding of ``d.dd`` after each row's answer prefix: three forwards per
    batch, each choosing among the ten digit tokens only (the point is forced). Runtimes in us."""
    import torch

    if data.answer_start is None:
        raise ValueError("decode_runtimes needs rows encoded with head='decode'")
    module.eval()
    prompts = [ids[: int(start)] for ids, start in zip(data.input_ids, data.answer_start)]
    out = np.full(len(data), np.nan)
    order = sorted(range(len(data)), key=lambda i: (len(prompts[i]), i))
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            seqs = [list(prompts[i]) for i in rows]
            chosen: list[list[int]] = [[] for _ in rows]
            for step in range(len(ANSWER_DIGIT_OFFSETS)):
                width = max(len(q) for q in seqs)
                ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, q in enumerate(seqs):
                    ids[r, : len(q)] = torch.tensor(q, dtype=torch.long)
                    mask[r, : len(q)] = 1
                last = torch.tensor([[len(q) - 1] for q in seqs], dtype=torch.long)
                _, _, digits = module(ids, mask, last)
                picks = digits[:, 0].argmax(dim=-1).tolist()
                for r, d in enumerate(picks):
                    chosen[r].append(d)
                    seqs[r] += [module.digit_ids[d]] + ([point_id] if step == 0 else [])
            for r, i in enumerate(rows):
                out[i] = parse_log_runtime(chosen[r])
    return out


# --------------------------------------------------------------------------- predictor


class LLMPredictor:
    """Predictor protocol, family ``llm``. ``fit`` trains in-process; ``train_llm`` uses Ray Train."""

    family = FAMILY
    # Canonical columns the prompts read that the feature table does not carry (source, shapes,
    # launch geometry, per-measurement parameters such as NeuSight's B/M/N/K or a Kernel Tuner
    # configuration); the evaluation harness joins them for the rows it scores.
    kernel_columns: tuple[str, ...] = ("source_text", "shape_json", "name")
    measurement_columns: tuple[str, ...] = (
        "params_json", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    )

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
            raise ValueError("head='decode' writes duration_us only: set numeric_targets [duration_us] "
                             "and predict_class false")
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
            loss = train_epoch(self.module, optimizer, train_data, self.config.batch_size,
                               self.config.seed + epoch, self.pad_id)
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
            out["pred_duration_us"] = decode_runtimes(self.module, data, self.config.batch_size, self.pad_id, point)
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
        module = build_module(predictor.config, len(predictor.config.numeric_targets), len(predictor.classes),
                              adapter_dir=directory / ADAPTER_DIR)
        module.load_state_dict(torch.load(directory / HEADS_FILE, weights_only=True), strict=False)
        module.eval()
        predictor.module = module
        return predictor
