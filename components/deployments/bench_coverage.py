"""Coverage of the serving systems no file of ours measured: AIConfigurator's silicon runs asked again on
another of its systems (the withheld ones: B200, GB200, B300, GB300), answered by the gate's own path.

``relabelled`` copies the measured H100/H200 runs with ``system`` set to another AIConfigurator system name
(its catalog GPU through ``devices.aiconfigurator_device_id``, as the silicon reader maps it), a new id, and
no measurement. ``coverage`` answers them exactly as ``kernelcast bench accuracy --split llm-serving-silicon``
answers a held-out GPU's runs (``bench_engines.silicon_answers``: each run's engine simulated, constants
fitted on the measured runs of the other GPUs) and returns what was answered and every refusal's reason.
Answers only: there is nothing to score them against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.deployments.data import silicon_device_ids
from components.deployments.ops import OpTimeFn

WITHHELD_SYSTEMS: tuple[str, ...] = ("b200_sxm", "gb200_sxm", "b300_sxm", "gb300_sxm")
MEASURED = ("silicon_ttft_ms", "silicon_tpot_ms")


@dataclass(frozen=True)
class Coverage:
    """The asked runs answered (id, system, backend, engine, ttft_pred_ms, tpot_pred_ms, ...) and refused
    (id, system, backend, reason)."""

    answered: pd.DataFrame
    refused: pd.DataFrame
    asked: pd.DataFrame

    def counts(self) -> pd.DataFrame:
        """Per system: runs asked, answered, share answered."""
        asked = self.asked.groupby("system").size().rename("asked")
        done = self.answered.groupby("system").size().rename("answered")
        out = pd.concat([asked, done], axis=1).fillna(0).astype(int)
        return out.assign(share=out["answered"] / out["asked"].clip(lower=1))

    def reasons(self) -> pd.DataFrame:
        """Refusals grouped: (system, reason) -> runs."""
        if self.refused.empty:
            return pd.DataFrame(columns=["system", "reason", "runs"])
        return self.refused.groupby(["system", "reason"]).size().rename("runs").reset_index()


def relabelled(runs: pd.DataFrame, systems: Sequence[str]) -> pd.DataFrame:
    """``runs`` asked again on each of ``systems``: ``system`` and ``device_id`` set, ``id`` prefixed with
    the system, the measurements blanked (nothing measured them there)."""
    frames = []
    for system in systems:
        copy = runs.copy()
        copy["source_id"] = copy["id"]
        copy["id"] = system + ":" + copy["id"].astype(str)
        copy["system"] = system
        copy["device_id"] = silicon_device_ids(copy["system"])
        for column in MEASURED:
            copy[column] = np.nan
        frames.append(copy)
    return pd.concat(frames, ignore_index=True) if frames else runs.iloc[:0].copy()


def coverage(
    runs: pd.DataFrame,
    systems: Sequence[str],
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None,
    log: Callable[[str], None] = lambda _: None,
) -> Coverage:
    """``runs`` (measured) asked on ``systems`` and answered by the silicon bench's path; the measured runs
    go along as the training side of every fold (they fit the constants; their own answers are dropped)."""
    from components.deployments.bench_engines import silicon_answers

    asked = relabelled(runs, systems)
    answered, refused, _, _ = silicon_answers(
        pd.concat([runs, asked], ignore_index=True), catalog, datasets_dir, op_time, log
    )
    system_of = asked.set_index("id")["system"]
    answered = answered[answered["id"].isin(system_of.index)].reset_index(drop=True)
    refused = refused[refused["id"].isin(system_of.index)].reset_index(drop=True)
    refused = refused.assign(system=refused["id"].map(system_of))
    return Coverage(answered, refused, asked)
