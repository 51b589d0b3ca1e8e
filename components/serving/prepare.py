"""What the first question on a new champion reads, made when it becomes champion (the register stage).

A question through ``models:/<name>@champion`` reads the version's local copy under the state folder
(``models.local_copy``: fetched from the registry, its boosters flattened) and its op engine's measured
store split per group (``opmodel.store_cache``), and per serving framework (``framework_split``).
Without this, the first question on a fresh state made them: about 10 of its 13 CPU seconds (importing
MLflow, LightGBM and scikit-learn, and reading the whole store), where a later question takes 1-3;
and each process read the serving frameworks' rows whole again. ``promote`` (and
``--rollback``) prepare the champion they set, so the pipeline's state answers its first question warm.
It also saves what every deployment question reads whatever the model: the GEMM lattices of each catalog
GPU and serving engine and the measured attention site tables (``deployments.lattice_warm``: about 6 of
a first whole-catalog ``rank --llm``'s 25 CPU-s) and, with ``--warm-models``, the attention lattices of
every bundled model's options (another ~5-7 of a first 70B rank's ~21, for ~80 CPU-s at promotion).
Nothing here changes an answer: the same files would be made by that first question.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Prepared:
    """The local copy made ready, whether its op engine's store was split (None: no op engine), how many
    GEMM lattices were made or found for the first question and of how many bundled models the attention
    lattices (``warm_lattices``)."""

    folder: Path
    split: bool | None
    lattices: int = 0
    attention_models: int = 0


def prepare_version(
    name: str, version: str, tracking_uri: str | None = None, warm_models: bool = False
) -> Prepared:
    """Fetch version ``version`` of ``name`` into the state folder as a question would (once) and open its
    op engine, which splits the engine's store into the state's cache. Raises ``QueryError`` (a version
    that cannot be fetched or loaded) or ``OSError`` (the state folder cannot be written)."""
    from components.opmodel.loading import engine_for
    from components.serving.models import load_version, local_copy

    folder = local_copy(name, str(version), tracking_uri)
    predictor = load_version(f"models:/{name}/{version}", tracking_uri).predictor
    if getattr(predictor, "opmodel_dir", None) is None:
        return Prepared(folder, None)
    from components.deployments.engines.registry import ENGINES

    engine = engine_for(predictor)
    for name in ENGINES:  # each serving engine's own kernels, split beside the pooled groups
        engine.for_framework(name)
    measured = getattr(engine, "measured", None)
    lattices, models = warm_lattices(engine, warm_models)
    return Prepared(folder, measured is not None and hasattr(measured.groups, "files"), lattices, models)


def warm_lattices(engine: Any, warm_models: bool = False) -> tuple[int, int]:
    """The GEMM lattices of every catalog GPU and serving engine, the measured attention tables and, with
    ``warm_models``, the bundled models' attention lattices, saved for the first question
    (``deployments.lattice_warm``); the number of GEMM lattices made or found and of models warmed (0, 0: an
    engine that saves none). The models' lattices are opt-in (``kernelcast promote --warm-models``): ~80
    CPU-s once against ~5 CPU-s off each model's first rank, more than the pipeline's promotion should pay."""
    if getattr(engine, "lattices", None) is None:
        return 0, 0
    from components.deployments.engines.registry import ENGINES
    from components.deployments.lattice_warm import (
        catalog_models,
        warm_attention_lattices,
        warm_gemm_lattices,
        warm_site_tables,
    )
    from components.deployments.ops import engine_op_time
    from components.devices import load_catalog

    warm_site_tables([engine, *(engine.for_framework(name) for name in sorted(ENGINES))])
    op_time, specs = engine_op_time(engine), load_catalog().all()
    made = warm_gemm_lattices(op_time, specs)
    if not warm_models:
        return made, 0
    models = catalog_models()
    warm_attention_lattices(op_time, specs, models)
    return made, len(models)
