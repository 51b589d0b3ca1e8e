"""LLM predictor on the real embedded SmolLM2 weights: Ray Train (2 workers), reload, constrained choice.

Slow: it loads a 135M model and trains LoRA for a few steps on 2 CPU cores (~2-3 min in all).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernelcast.settings import Settings

pytestmark = pytest.mark.slow
N_PER_CLASS = 8  # 16 gpuFLOPBench kernels
MAX_TOKENS = 160


@pytest.fixture(scope="module")
def kernels(llm_settings: Settings) -> pd.DataFrame:
    """16 real gpuFLOPBench kernels with source (8 per class) from the bolet-roofline train side."""
    from components.training.llm_scenarios import balanced_subsample, bolet_sides, load_bolet_table

    train, _ = bolet_sides(load_bolet_table(llm_settings))
    train = train[train["source_text"].notna()]
    return balanced_subsample(train, N_PER_CLASS)


@pytest.fixture(scope="module")
def ray_session(llm_settings: Settings):
    import ray

    from components.platform.runtime import ensure_ray

    started = not ray.is_initialized()
    ensure_ray(llm_settings)
    yield
    if started:
        ray.shutdown()  # only the Ray this test started; never `ray stop`


def test_ray_train_two_workers_loss_decreases_and_reload_is_identical(
    llm_settings: Settings, kernels: pd.DataFrame, ray_session: None, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    from components.models import load_predictor, register_loader
    from components.models.llm.model import LLMConfig, LLMPredictor
    from components.training.llm import train_llm

    assert len(kernels) == 2 * N_PER_CLASS
    config = LLMConfig(
        class_column="roofline_class_published", numeric_targets=("duration_us",), lr=3e-3, seed=0
    )
    val = kernels.iloc[::4]  # 4 kernels; a slice of the train side, never a test split
    out_dir = train_llm(
        kernels,
        val,
        llm_settings,
        workers=2,
        epochs=2,  # two losses to compare; the resume below reruns epoch 1 from epoch 0's checkpoint
        max_tokens=MAX_TOKENS,
        batch_size=4,
        config=config,
        patience=3,
    )

    predictor = LLMPredictor.load(out_dir)
    losses = [h["train_loss"] for h in predictor.history]
    assert len(losses) >= 2 and losses[-1] < losses[0], f"train loss did not decrease: {losses}"
    assert predictor.targets == ("duration_us", "roofline_class")
    assert predictor.trained_on == frozenset(kernels["measurement_id"])

    first = predictor.predict(kernels)
    assert list(first.columns[:2]) == ["pred_duration_us", "pred_roofline_class"]
    assert first.index.equals(kernels.index) and np.isfinite(first["pred_duration_us"]).all()
    assert set(first["pred_roofline_class"]) <= {"bandwidth", "compute"}

    copy_dir = tmp_path / "copy"
    shutil.copytree(out_dir, copy_dir)
    register_loader("llm", "components.models.llm.model:LLMPredictor")
    again = load_predictor(copy_dir).predict(kernels)
    pd.testing.assert_frame_equal(first, again, check_exact=True)

    # Resume from the epoch-0 checkpoint: only epoch 1 runs again, epoch 0's record is carried over.
    epoch0 = _checkpoint_of_epoch(llm_settings, out_dir.name, 0)
    resumed_dir = train_llm(
        kernels,
        val,
        llm_settings,
        workers=2,
        epochs=2,
        max_tokens=MAX_TOKENS,
        batch_size=4,
        config=LLMConfig(**{**config.__dict__}),
        patience=3,
        resume_from=epoch0,
        register_as="",
    )
    resumed = LLMPredictor.load(resumed_dir).history
    assert [h["epoch"] for h in resumed] == [0.0, 1.0] and resumed[0] == predictor.history[0]

    client = MlflowClient(tracking_uri=llm_settings.tracking_uri())
    versions = client.search_model_versions(f"name='{llm_settings.registered_model}'")
    assert versions and versions[0].tags.get("family") == "llm"
    run = client.get_run(versions[0].run_id)
    assert run.data.tags["family"] == "llm" and "val_loss" in run.data.metrics


def _checkpoint_of_epoch(settings: Settings, run_id: str, epoch: int) -> Path:
    import torch

    from components.training.llm import STATE_FILE

    for state_path in sorted((settings.state_dir / "ray-results" / f"llm-{run_id[:12]}").rglob(STATE_FILE)):
        if torch.load(state_path, weights_only=False)["epoch"] == epoch:
            return state_path.parent
    raise AssertionError(f"no checkpoint of epoch {epoch} for run {run_id}")


def test_constrained_choice_scores_both_answers(llm_settings: Settings, kernels: pd.DataFrame) -> None:
    from components.devices import load_catalog
    from components.models.llm.loader import load_base_model
    from components.training.llm_scenarios import SYSTEM, LocalChoiceScorer, run_prompt_scenario

    model, tokenizer = load_base_model(None)
    scorer = LocalChoiceScorer(model, tokenizer, [{"role": "system", "content": SYSTEM}])
    result = run_prompt_scenario(kernels.head(2), "zero-shot", scorer, load_catalog(), tokenizer, 256)
    assert result.n == 2 and 0.0 <= result.accuracy <= 1.0
    scores = scorer.score("Kernel: k\nQuestion: Bandwidth or Compute?")
    assert set(scores) == {"bandwidth", "compute"} and all(np.isfinite(v) and v < 0 for v in scores.values())


def test_decode_head_teacher_forces_digits_and_decodes_runtimes(
    llm_settings: Settings, kernels: pd.DataFrame
) -> None:
    """Constrained numeric decoding: the digit positions read the token before each answer digit;
    a short in-process fit lowers the loss; predictions are 10**d.dd runtimes, never the truth read back."""
    from components.models.llm.model import (
        ANSWER_DIGIT_OFFSETS,
        LLMConfig,
        LLMPredictor,
        batches,
        digit_token_ids,
        format_log_runtime,
    )

    rows = kernels.head(8)
    config = LLMConfig(
        head="decode",
        numeric_targets=("duration_us",),
        predict_class=False,
        max_tokens=96,
        epochs=3,
        batch_size=4,
        lr=3e-3,
        seed=0,
    )
    predictor = LLMPredictor(config)
    predictor.prepare(rows)
    data = predictor.encode(rows)
    digit_ids = digit_token_ids(predictor.tokenizer)
    _, batch = next(batches(data, 4, None, predictor.pad_id))
    for r in range(4):
        answer = format_log_runtime(float(rows["duration_us"].iloc[r]))
        wanted = [digit_ids[int(answer[k])] for k in ANSWER_DIGIT_OFFSETS]
        got = [int(batch["input_ids"][r, p + 1]) for p in batch["digit_positions"][r]]
        assert got == wanted and batch["answer_digits"][r].tolist() == [
            int(answer[k]) for k in ANSWER_DIGIT_OFFSETS
        ]

    predictor.module = None
    predictor.fit(rows)
    losses = [h["train_loss"] for h in predictor.history]
    assert losses[-1] < losses[0], f"decode loss did not decrease: {losses}"
    predicted = predictor.predict(rows)["pred_duration_us"].to_numpy()
    assert np.isfinite(predicted).all() and ((predicted >= 1.0) & (predicted <= 10**9.99)).all()
    exponents = np.log10(predicted)
    assert np.allclose(exponents * 100, np.round(exponents * 100), atol=1e-6)  # exactly d.dd
