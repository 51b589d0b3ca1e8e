"""The torch side of the LLM family: the LoRA-adapted LM with its heads, batching, loss and passes.

``build_module`` loads the frozen base LM, adds a fresh or saved LoRA adapter and the regression /
classification heads (or, for ``head="decode"``, reads the ten digit rows of the LM head).
``train_epoch``, ``eval_loss``, ``forward_all`` and ``decode_runtimes`` drive both the in-process
``LLMPredictor.fit`` and the Ray Train loop in ``components.training.llm``. torch and peft are
imported inside the functions that need them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from components.models.llm.encoding import (
    ANSWER_DIGIT_OFFSETS,
    DIGITS,
    Encoded,
    LLMConfig,
    digit_token_ids,
    parse_log_runtime,
)

if TYPE_CHECKING:
    import torch
    from torch import nn


def _module_class() -> type:
    from torch import nn

    class HeadedLM(nn.Module):
        """LoRA-adapted decoder + regression/classification heads on the masked mean of its last layer."""

        def __init__(
            self,
            peft_model: nn.Module,
            hidden: int,
            n_numeric: int,
            n_classes: int,
            digit_ids: Sequence[int] = (),
        ) -> None:
            super().__init__()
            self.lm = peft_model
            self.reg_head = nn.Linear(hidden, n_numeric) if n_numeric else None
            self.cls_head = nn.Linear(hidden, n_classes) if n_classes else None
            self.digit_ids = list(digit_ids)

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            digit_positions: torch.Tensor | None = None,
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def build_module(
    config: LLMConfig,
    n_numeric: int,
    n_classes: int,
    base_path: str | None = None,
    adapter_dir: Path | None = None,
) -> nn.Module:
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
        lora = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=list(config.target_modules),
            bias="none",
        )
        lm = get_peft_model(base, lora)
    return _module_class()(lm, int(base.config.hidden_size), n_numeric, n_classes, digit_ids)


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """Only the weights training changes (LoRA + heads): small enough to checkpoint every epoch."""
    names = {name for name, p in module.named_parameters() if p.requires_grad}
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items() if k in names}


def batches(
    data: Encoded, batch_size: int, order: Sequence[int] | None = None, pad_id: int = 0
) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """Right-padded batches (row indices, tensors) in ``order`` (default: as given)."""
    import torch

    order = list(order) if order is not None else list(range(len(data)))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(data.input_ids[i]) for i in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            seq = data.input_ids[i]
            ids[r, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[r, : len(seq)] = 1
        batch = {
            "input_ids": ids,
            "attention_mask": mask,
            "y_num": torch.from_numpy(data.y_num[rows]),
            "y_cls": torch.from_numpy(data.y_cls[rows]),
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
            loss = loss + F.cross_entropy(
                digits[known].reshape(-1, len(DIGITS)), batch["answer_digits"][known].reshape(-1)
            )
    if reg.shape[1]:
        present = torch.isfinite(batch["y_num"])
        if present.any():
            loss = loss + F.mse_loss(reg[present], batch["y_num"][present])
    if logits.shape[1]:
        labelled = batch["y_cls"] >= 0
        if labelled.any():
            loss = loss + F.cross_entropy(logits[labelled], batch["y_cls"][labelled])
    return loss


def train_epoch(
    module: nn.Module, optimizer: Any, data: Encoded, batch_size: int, seed: int, pad_id: int
) -> float:
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


def forward_all(
    module: nn.Module, data: Encoded, batch_size: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray]:
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
    return (
        np.stack([reg_out[i] for i in range(n)]) if n else np.zeros((0, 0)),
        np.stack([cls_out[i] for i in range(n)]) if n else np.zeros((0, 0)),
    )


def decode_runtimes(
    module: nn.Module, data: Encoded, batch_size: int, pad_id: int, point_id: int
) -> np.ndarray:
    """Constrained greedy decoding of ``d.dd`` after each row's answer prefix: three forwards per
    batch, each choosing among the ten digit tokens only (the point is forced). Runtimes in us."""
    import torch

    if data.answer_start is None:
        raise ValueError("decode_runtimes needs rows encoded with head='decode'")
    module.eval()
    prompts = [ids[: int(start)] for ids, start in zip(data.input_ids, data.answer_start, strict=False)]
    out = np.full(len(data), np.nan)
    order = sorted(range(len(data)), key=lambda i: (len(prompts[i]), i))
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
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
