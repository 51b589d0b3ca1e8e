"""The train stage: fit a model family on a split's train side, score its test side, log one MLflow
run, register a version and write ``registration.json`` for the register stage.

``train_stage`` is the one function behind ``kernelcast train``, the DVC ``train`` stage and the
train task of ``flows/train.py``. Families: ``tabular`` (LightGBM/MLP targets as Ray tasks),
``roofline`` (no fit; registered so it can be gated and served like the others) and ``llm`` (LoRA
fine-tune with Ray Train; the scores land on the run Ray Train opened).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

    import pandas as pd

    from components.evaluation.splits import Fold
    from components.platform.config import Settings

TRAINABLE_FAMILIES: tuple[str, ...] = ("tabular", "roofline", "llm")
TABULAR_MODELS: tuple[str, ...] = ("lgbm", "mlp")
EXPERIMENT = "kernelcast"


@dataclass(frozen=True)
class TrainInputs:
    features_file: Path
    family: str = "tabular"
    model: str = "lgbm"  # tabular learner
    split: str = "unseen-kernel"
    fold: str | None = None  # fold of a multi-fold split (unseen-gpu: a device id); None = the first
    out_dir: Path | None = None  # default: models_dir/<family>-<split>-<time> (llm: models_dir/llm/<run id>)
    register: bool = True
    max_train_rows: int | None = None
    max_test_rows: int | None = None  # llm default: params.yaml train.llm.max_test_rows
    measured_features: bool = False  # m_* measured-counter features (not for from-source tasks)
    use_ray: bool = True


@dataclass(frozen=True)
class TrainResult:
    family: str
    model: str  # tabular learner, "classic" for the roofline, the base model for the llm
    split: str
    fold: str
    predictor_dir: Path
    registration_file: Path
    run_id: str
    model_name: str
    version: str | None
    report: dict[str, Any]  # the test side's evaluation JSON
    metrics: dict[str, float]
    seconds: float
    n_train: int  # rows of the fold's train side
    n_test_available: int
    max_test_rows: int | None

    @property
    def model_uri(self) -> str | None:
        return None if self.version is None else f"models:/{self.model_name}/{self.version}"


def check_inputs(inputs: TrainInputs) -> None:
    """A ValueError naming the input that is wrong (family, learner or split)."""
    from components.evaluation.splits import SPLITS

    if inputs.family not in TRAINABLE_FAMILIES:
        raise ValueError(f"--family must be one of {', '.join(TRAINABLE_FAMILIES)}, not {inputs.family!r}")
    if inputs.family == "tabular" and inputs.model not in TABULAR_MODELS:
        raise ValueError(f"--model must be one of {', '.join(TABULAR_MODELS)}, not {inputs.model!r}")
    if inputs.split not in SPLITS:
        raise ValueError(f"unknown split {inputs.split!r}; choose one of {', '.join(SPLITS)}")


def pick_fold(folds: list[Fold], fold: str | None) -> Fold:
    if fold is None:
        return folds[0]
    for candidate in folds:
        if candidate.name in (fold, f"{candidate.name.split(':')[0]}:{fold}"):
            return candidate
    raise ValueError(f"no fold {fold!r}; folds: {', '.join(f.name for f in folds)}")


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def _provenance(features_file: Path, split: str) -> dict[str, str]:
    from components.platform.config import PROJECT_ROOT
    from components.registry.lineage import dataset_version, file_md5
    from components.registry.tracking import git_commit

    return {
        "split": split,
        "dataset_md5": file_md5(features_file),
        "git_commit": git_commit(PROJECT_ROOT),
        "dataset_version": dataset_version(features_file, PROJECT_ROOT),
    }


def train_stage(
    inputs: TrainInputs,
    settings: Settings,
    params: dict[str, Any],
    progress: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train, score, log, register; write ``<predictor dir>/registration.json``. ``progress`` gets one
    line before the fit starts (what is trained on how many rows)."""
    from components.evaluation.harness import read_feature_table, split_folds

    check_inputs(inputs)
    table = read_feature_table(inputs.features_file, settings.data_dir / "canonical")
    chosen = pick_fold(split_folds(table, inputs.split), inputs.fold)
    say = progress or (lambda _line: None)
    job = _Job(inputs, table, chosen, settings, params, say)
    return _train_llm(job) if inputs.family == "llm" else _train_classic(job)


@dataclass(frozen=True)
class _Job:
    """One training run's inputs: the request, the feature table and its chosen fold, settings, params."""

    inputs: TrainInputs
    table: pd.DataFrame
    chosen: Fold
    settings: Settings
    params: dict[str, Any]
    say: Callable[[str], None]

    def unpacked(
        self,
    ) -> tuple[TrainInputs, pd.DataFrame, Fold, Settings, dict[str, Any], Callable[[str], None]]:
        return self.inputs, self.table, self.chosen, self.settings, self.params, self.say


def _train_classic(job: _Job) -> TrainResult:
    inputs, table, chosen, settings, params, say = job.unpacked()
    from components.evaluation.harness import capped_rows, evaluate_predictor, flat_metrics
    from components.evaluation.plots import write_plots
    from components.models.tabular_config import TabularConfig
    from components.registry.runs import Registration, experiment_id, log_training_run, write_registration
    from components.registry.tracking import component_run, log_dataset, stage_run
    from components.training.tabular import make_predictor
    from components.training.tracking import log_deployment_constants, log_op_engine, log_program_model

    family, split = inputs.family, inputs.split
    config = TabularConfig.from_params(
        params,
        model=inputs.model,
        use_measured=inputs.measured_features,
        max_train_rows=inputs.max_train_rows,
    )
    learner = config.model if family == "tabular" else "classic"
    run_params = {
        "family": family,
        "model": learner,
        "split": split,
        "fold": chosen.name,
        "features_file": str(inputs.features_file),
        **{f"cfg_{k}": v for k, v in vars(config).items()},
    }
    stamp = _stamp()
    out_dir = Path(inputs.out_dir or settings.models_dir / f"{family}-{split}-{stamp}")
    # Modern op questions (tensor GEMMs, attention, MoE, all-reduce): the op engine, saved in out_dir/opmodel
    # so the registered champion carries it (components/opmodel). It reads neither the feature table nor the
    # predictor, so it fits in a process of its own beside the tabular fit and the test side's scoring.
    # The run is open while the models fit (the UI shows it running); each component nests under it.
    # The KernelBench modules of the train side are traced into the trace cache in a process of their own too
    # (the traces are sandboxed children; it waits on them), so the program model finds them cached; that
    # process then fits the program model's roofline basis (it reads no predictor) while this one fits the
    # predictor's basis: at the stage's end, where one core idled.
    from components.programs.kernelbench_model import TIMING_SOURCES

    sides = table.loc[chosen.train, ["source", "measurement_id"]]
    kernelbench = sides[sides["source"].isin(TIMING_SOURCES)]  # KernelBench's files and kernelcast's runs
    with (
        _beside(_fit_engine, settings, out_dir / "opmodel") as engine_job,
        _beside_in_turn((_trace_side, kernelbench, settings), (_roofline_side, kernelbench, settings)) as (
            traces_job,
            roofline_job,
        ),
        stage_run(
            "train",
            settings,
            params=run_params,
            tags={**_provenance(inputs.features_file, split), "family": family, "kind": "train"},
            run_name=f"train-{family}-{split}",
        ),
    ):
        log_dataset(inputs.features_file, "training", name="features")
        say(f"training {family} ({config.model}) on {chosen.name}: {len(chosen.train)} train rows")
        with component_run(family, params={"model": learner, "split": split, "fold": chosen.name}):
            predictor, seconds = make_predictor(
                family, table.loc[chosen.train], split, config, settings, use_ray=inputs.use_ray
            )
            _log_metrics({"train_seconds": seconds, "n_train": float(len(predictor.trained_on))})
        predictor.save(out_dir)
        rows = capped_rows(chosen.test, table, inputs.max_test_rows)
        evaluation = evaluate_predictor(predictor, table, split, model=str(out_dir), rows=rows)
        from components.programs.kernelbench_model import fit_after_training

        for line in traces_job.result():  # traced beside the fits and the scoring
            say(line)
        with component_run("op-engine"):
            engine_dir, engine_seconds = _finish_engine(engine_job, say)
            _log_metrics({"fit_seconds": engine_seconds})
            log_op_engine(engine_dir)
        # Whole-program questions: the program model on this predictor's op times (the op engine's,
        # trained just above, for GEMMs and attention: the basis module answers use), fitted on the
        # train side's KernelBench timings, saved in out_dir and models/programs/ (components/programs).
        with component_run("program-model"):
            fitted = fit_after_training(
                predictor, table.loc[chosen.train], settings, out_dir, say, roofline=False
            )
            roofline_paths, lines = roofline_job.result()
            for line in lines:
                say(line)
            log_program_model([*roofline_paths, *fitted])
        with component_run("deployment-engine"):
            log_deployment_constants(engine_dir is not None)
        plots = write_plots(evaluation.frame, settings.reports_dir / f"train-{family}-{split}-{stamp}")
        metrics = {
            **flat_metrics(evaluation.report),
            "train_seconds": seconds,
            "n_train": float(len(predictor.trained_on)),
        }
        uri = settings.tracking_uri()
        run = log_training_run(
            out_dir,
            tracking_uri=uri,
            experiment=experiment_id(EXPERIMENT, uri, settings.artifact_root()),
            registered_model=settings.registered_model,
            params=run_params,
            metrics=metrics,
            tags=_provenance(inputs.features_file, split),
            artifacts=plots,
            register=inputs.register,
            family=family,
        )
    registration = write_registration(
        Registration(settings.registered_model, run.version, run.run_id, str(out_dir), split, family), out_dir
    )
    return TrainResult(
        family=family,
        model=learner,
        split=split,
        fold=chosen.name,
        predictor_dir=out_dir,
        registration_file=registration,
        run_id=run.run_id,
        model_name=settings.registered_model,
        version=run.version,
        report=evaluation.report,
        metrics=metrics,
        seconds=seconds,
        n_train=len(chosen.train),
        n_test_available=len(chosen.test),
        max_test_rows=inputs.max_test_rows,
    )


def _fit_engine(settings: Settings, out_dir: Path) -> tuple[Path | None, list[str], float]:
    """(engine folder or None, its progress lines, seconds): ``train_engine`` in the side process."""
    import time

    from components.opmodel.train import train_engine

    lines: list[str] = []
    started = time.perf_counter()
    engine_dir = train_engine(settings, out_dir, lines.append)
    return engine_dir, lines, time.perf_counter() - started


def _trace_side(train_rows: pd.DataFrame, settings: Settings) -> list[str]:
    """The train side's KernelBench modules traced into the trace cache (``trace_train_side``); its lines."""
    from components.programs.kernelbench_model import trace_train_side

    lines: list[str] = []
    trace_train_side(train_rows, settings, lines.append)
    return lines


def _roofline_side(train_rows: pd.DataFrame, settings: Settings) -> tuple[list[Path], list[str]]:
    """The program model's roofline basis (``fit_roofline_basis``) on the traces cached just before: its files
    and lines."""
    from components.programs.kernelbench_model import fit_roofline_basis

    lines: list[str] = []
    return fit_roofline_basis(train_rows, settings, lines.append), lines


@contextmanager
def _beside(function: Callable[..., Any], *args: Any) -> Iterator[Future]:
    """``function(*args)`` in a spawned process (CPU-bound Python holds the GIL) while the block runs; stopped
    if the block fails (nothing waits minutes for work whose training run failed)."""
    with _beside_in_turn((function, *args)) as (job,):
        yield job


@contextmanager
def _beside_in_turn(*calls: tuple[Any, ...]) -> Iterator[tuple[Future, ...]]:
    """Each ``(function, *args)`` of ``calls`` in turn in one spawned process, as ``_beside`` runs one: a
    later call may read what an earlier one left (a cache); each has its own future."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield tuple(pool.submit(call[0], *call[1:]) for call in calls)
    except BaseException:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _finish_engine(job: Future, say: Callable[[str], None]) -> tuple[Path | None, float]:
    """Wait for the op engine's fit; its progress lines are said now (the fit's errors raise here)."""
    engine_dir, lines, seconds = job.result()
    for line in lines:
        say(line)
    return engine_dir, seconds


def _log_metrics(metrics: dict[str, float]) -> None:
    import mlflow

    if mlflow.active_run() is not None:
        mlflow.log_metrics(metrics)


def _train_llm(job: _Job) -> TrainResult:
    """LoRA fine-tune on the fold's train side (Ray Train), score its test side, and record the
    scores on the training run, so ``promote`` gates the LLM version like any other."""
    inputs, table, chosen, settings, params, say = job.unpacked()
    import shutil

    from components.evaluation.harness import capped_rows, evaluate_predictor, flat_metrics
    from components.evaluation.plots import write_plots
    from components.registry.runs import Registration, complete_training_run, write_registration
    from components.training.llm import fit_on_side, llm_params

    split = inputs.split
    config, run = llm_params(params)
    run = replace(
        run,
        max_train_rows=inputs.max_train_rows or run.max_train_rows,
        max_test_rows=inputs.max_test_rows or run.max_test_rows,
    )
    say(
        f"training llm ({config.base or 'embedded SmolLM2-135M'}, LoRA r={config.lora_r}) on {chosen.name}: "
        f"{len(chosen.train)} train rows, at most {run.max_train_rows} used; {run.workers} Ray Train workers"
    )
    predictor, trained_dir = fit_on_side(
        table.loc[chosen.train],
        split,
        settings,
        config=config,
        run=run,
        register_as=settings.registered_model if inputs.register else "",
        run_name=f"train-llm-{split}",
    )
    out_dir = Path(trained_dir)
    if inputs.out_dir is not None:
        shutil.copytree(trained_dir, inputs.out_dir, dirs_exist_ok=True)
        out_dir = Path(inputs.out_dir)
    rows = capped_rows(chosen.test, table, run.max_test_rows)
    evaluation = evaluate_predictor(
        predictor, table, split, model=str(out_dir), rows=rows, canonical_dir=settings.data_dir / "canonical"
    )
    plots = write_plots(evaluation.frame, settings.reports_dir / f"train-llm-{split}-{_stamp()}")

    run_id = Path(trained_dir).name  # train_llm saves under models_dir/llm/<mlflow run id>
    steps = [h["s_per_step"] for h in predictor.history if "s_per_step" in h]
    metrics = {
        **flat_metrics(evaluation.report),
        "n_train": float(len(predictor.trained_on)),
        "n_test_available": float(len(chosen.test)),
    }
    if steps:
        metrics["s_per_step"] = float(sum(steps) / len(steps))
    tags = {**_provenance(inputs.features_file, split), "fold": chosen.name, "kind": "train"}
    version = complete_training_run(
        run_id,
        tracking_uri=settings.tracking_uri(),
        registered_model=settings.registered_model if inputs.register else None,
        metrics=metrics,
        tags=tags,
        artifacts=plots,
    )
    registration = write_registration(
        Registration(settings.registered_model, version, run_id, str(out_dir), split, "llm"), out_dir
    )
    return TrainResult(
        family="llm",
        model=str(config.base or "embedded"),
        split=split,
        fold=chosen.name,
        predictor_dir=out_dir,
        registration_file=registration,
        run_id=run_id,
        model_name=settings.registered_model,
        version=version,
        report=evaluation.report,
        metrics=metrics,
        seconds=float("nan"),
        n_train=len(chosen.train),
        n_test_available=len(chosen.test),
        max_test_rows=run.max_test_rows,
    )
