"""Prefect flow: retrain every family of params.yaml ``train.families`` whose inputs changed.

A family's inputs (the feature table, its params.yaml keys, the split, the fitting code) are hashed
(``components.pipeline.inputs``); a family whose last finished training had the same hash is
skipped, the others are trained by ``flows.train.train_task`` -- ``train_stage``, the call behind
``kernelcast train`` -- each dispatching its own Ray jobs (tabular targets as Ray tasks, the llm
family as a Ray Train job). The stamp is written only after a family trained and registered, so a
rerun after a crash redoes exactly the families that had not finished.

    python -m flows.retrain [FAMILY ...]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow

from components.platform.config import Settings, get_settings


def family_out_dir(settings: Settings, family: str, split: str) -> Path:
    """Where the retrain flow keeps a family's current predictor (outside DVC's outputs)."""
    return settings.models_dir / "retrain" / f"{family}-{split}"


def retrain_families(
    settings: Settings,
    params: dict[str, Any],
    families: list[str],
    split: str,
    features: Path,
    force: bool,
    use_ray: bool,
    train: Callable[..., Any],
) -> dict[str, Any]:
    """The flow's body: hash each family's inputs, skip the current ones, ``train`` the others and
    stamp them. ``train`` is ``flows.train.train_task`` (its ``.fn`` in unit tests)."""
    from components.pipeline.inputs import family_inputs_hash, is_current, read_stamp, write_stamp
    from components.training.stage import TrainInputs
    from flows.train import summary

    results: dict[str, Any] = {}
    for family in families:
        out_dir = family_out_dir(settings, family, split)
        digest = family_inputs_hash(features, params, family, split)
        if not force and is_current(out_dir, digest):
            stamp = read_stamp(out_dir)
            print(f"{family}: inputs unchanged since {stamp.get('version')}; skipped")
            results[family] = {"action": "skipped", **stamp}
            continue
        print(f"{family}: inputs changed; training on {split}")
        trained = train(
            TrainInputs(features_file=features, family=family, split=split, out_dir=out_dir, use_ray=use_ray),
            settings,
            params,
        )
        info = summary(trained)
        write_stamp(
            out_dir,
            digest,
            version=info["model_uri"],
            registration_file=info["registration_file"],
            run_id=info["run_id"],
            runtime_mape=info["runtime_mape"],
        )
        results[family] = {"action": "trained", **info}
    return results


@flow(name="retrain", log_prints=True)
def retrain_flow(
    families: list[str] | None = None,
    split: str = "unseen-kernel",
    features_file: str | None = None,
    force: bool = False,
    use_ray: bool = True,
) -> dict[str, Any]:
    """Train each family (default: params.yaml ``train.families``) whose inputs changed.

    Returns ``{family: {"action": "trained"|"skipped", "registration_file", "version", ...}}``.
    """
    from components.platform.config import load_params
    from flows.train import train_task

    settings = get_settings()
    params = load_params(settings.params_file)
    chosen = families or list((params.get("train") or {}).get("families") or ["tabular"])
    features = Path(features_file) if features_file else settings.data_dir / "features" / "features.parquet"
    return retrain_families(settings, params, chosen, split, features, force, use_ray, train_task)


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    with prefect_server(get_settings()):
        print(retrain_flow(argv or None))


if __name__ == "__main__":
    main(sys.argv[1:])
