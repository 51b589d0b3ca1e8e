"""How the LLM family turns rows into model inputs: its config, prompts from rows, token ids and targets.

``LLMConfig`` holds the model's hyper-parameters; ``row_prompt`` writes one kernel-on-GPU row as a
prompt (``components.models.llm.prompt`` does the source-side work); ``encode_frame`` tokenizes a
frame with its standardized numeric targets, class ids and, for the ``decode`` head, the answer
digits ``d.dd`` of log10(runtime in us). Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from components.models.llm.prompt import PromptError, build_prompt

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
        return Encoded(
            [self.input_ids[i] for i in rows],
            self.y_num[rows],
            self.y_cls[rows],
            [],
            None if self.answer_start is None else self.answer_start[rows],
            None if self.answer_digits is None else self.answer_digits[rows],
        )


@dataclass
class TargetStats:
    """Per numeric target: mean and std of its (log-)transformed training values."""

    mean: dict[str, float]
    std: dict[str, float]

    @classmethod
    def fit(cls, frame: pd.DataFrame, targets: Sequence[str]) -> TargetStats:
        mean, std = {}, {}
        for target in targets:
            values = (
                transform(target, frame[target].to_numpy(dtype="float64"))
                if target in frame
                else np.array([])
            )
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
    from components.features.dims import json_object  # the project's one lenient JSON-object reader

    return {k: v for k, v in json_object(params_json).items() if k not in _NON_LAUNCH_PARAMS}


def row_prompt(
    row: pd.Series,
    catalog: Any,
    config: LLMConfig,
    tokenizer: Any,
    *,
    scenario: str = "fine-tune",
    profile_columns: Sequence[str] = (),
    question: bool = False,
) -> str:
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
    launch: dict[str, Any] = {
        c: int(row[c])
        for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
        if c in row and _present(row[c])
    }
    shapes = op_shapes.get("shapes") or {}
    for key, value in launch_parameters(row.get("params_json")).items():
        if shapes.get(key) != value:  # the shapes are in the Operation line already
            # A library kernel's argument list is long and says nothing its template does not.
            launch[key] = (
                without_arguments(value) if key == "kernel_name" and isinstance(value, str) else value
            )
    profile = {c: float(row[c]) if _present(row.get(c)) else None for c in profile_columns} or None
    device = catalog.get(str(row["device_id"]))
    name = _short_kernel_name(row) or str(row.get("kernel_id", "<unnamed>"))

    def build(budget: int) -> str:
        return build_prompt(
            source,
            op_shapes if source is None else None,
            launch,
            device,
            scenario,
            budget,
            tokenizer,
            kernel_name=name,
            profile_metrics=profile,
            question=question,
        ).text

    # Mangled names, long signatures and many launch parameters can outgrow a small budget on their
    # own; such a row gets a larger one (callers cut token ids to max_tokens, dropping the tail).
    for scale in (1, 2, 4, 8):
        try:
            return build(scale * config.max_tokens)
        except PromptError as exc:
            if "leaves no room" not in str(exc) or scale == 8:
                raise
    raise AssertionError("unreachable")


def encode_frame(
    frame: pd.DataFrame,
    tokenizer: Any,
    config: LLMConfig,
    classes: Sequence[str],
    stats: TargetStats | None,
    catalog: Any | None = None,
) -> Encoded:
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
    durations = (
        frame["duration_us"].to_numpy(dtype="float64")
        if "duration_us" in frame
        else np.full(len(frame), np.nan)
    )
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
        raise ValueError(
            "head='decode' needs single-token digits; this tokenizer splits them: use head='regression'"
        )
    return [i[0] for i in ids]
