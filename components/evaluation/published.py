"""The published figures the accuracy bench puts beside its own, on the scope each paper measured.

NeuSight per op family, PipeWeave over the held-out GPUs and per GPU, Bolet's roofline class
accuracy; ``components.evaluation.bench.rows_for`` looks them up by (split, scope, target, metric).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from components.models.base import CLASS_TARGET


@dataclass(frozen=True)
class Published:
    split: str
    scope: str  # "" = the whole test side; "family=bmm"; "device=<catalog id>"
    target: str
    metric: str
    value: float
    by: str


NEUSIGHT_BY = (
    "NeuSight ASPLOS'25, unseen GPUs (H100/L4); per-op latency summed over model traces "
    "(per kernel its error is larger: retrained BMM ~40%, linear ~23%, elementwise ~13%)"
)
PIPEWEAVE_BY = "PipeWeave 2026 repo metadata: FP8 GEMM mean relative error on held-out GPUs"
PIPEWEAVE_GPU_BY = "PipeWeave shipped FP8-GEMM MLP re-run here (DESIGN.md)"
BOLET_BY = "Bolet et al. HPDC AI4Sys'25: best zero-shot LLM, 340 balanced kernels"


def published_figures(device_id: Callable[[str], str]) -> list[Published]:
    """The field's numbers, on the scope each paper measured (device names resolved by the catalog)."""
    return [
        Published("neusight", "family=bmm", "duration_us", "mape", 0.138, NEUSIGHT_BY),
        Published("neusight", "family=linear", "duration_us", "mape", 0.139, NEUSIGHT_BY),
        Published("neusight", "family=elementwise", "duration_us", "mape", 0.193, NEUSIGHT_BY),
        Published("pipeweave-fp8", "", "duration_us", "mape", 0.039, PIPEWEAVE_BY),
        Published(
            "pipeweave-fp8",
            f"device={device_id('NVIDIA H100')}",
            "duration_us",
            "mape",
            0.042,
            PIPEWEAVE_GPU_BY,
        ),
        Published(
            "pipeweave-fp8",
            f"device={device_id('NVIDIA H200')}",
            "duration_us",
            "mape",
            0.052,
            PIPEWEAVE_GPU_BY,
        ),
        Published("bolet-roofline", "", CLASS_TARGET, "accuracy", 0.64, BOLET_BY),
    ]
