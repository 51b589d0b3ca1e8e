"""`kernelcast bench` subcommands."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

app = typer.Typer(help="Benchmarks against the field's published numbers.", no_args_is_help=True)

DEFAULT_BENCH_ROWS = 40_000  # params.yaml train.bench_max_train_rows overrides
DEFAULT_MIN_GPU_ROWS = 1_000  # params.yaml train.bench_min_gpu_rows overrides


def _families(requested: list[str] | None) -> list[str]:
    available = ["roofline", "tabular", "llm"]
    # Default: the families that fit in minutes on a CPU; the llm family (a Ray Train fine-tune per
    # split) runs when asked for by name.
    families = requested or ["roofline", "tabular"]
    unknown = [f for f in families if f not in available]
    if unknown:
        raise UserError(
            f"unknown or unavailable family {', '.join(unknown)}; available: {', '.join(available)}"
        )
    return families


def _command_line(
    family: list[str] | None,
    split: list[str] | None,
    device: list[str] | None,
    max_train_rows: int | None,
    min_gpu_rows: int | None,
    max_test_rows: int | None,
) -> str:
    """The command that reproduces a table (shown above it in the README)."""
    parts = ["kernelcast bench accuracy"]
    parts += [f"--family {f}" for f in family or []] + [f"--split {s}" for s in split or []]
    parts += [f"--device {d!r}" if " " in d else f"--device {d}" for d in device or []]
    for flag, value in (
        ("--max-train-rows", max_train_rows),
        ("--min-gpu-rows", min_gpu_rows),
        ("--max-test-rows", max_test_rows),
    ):
        if value is not None:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def _canonical_beside(features_path: Path, default: Path) -> Path:
    """``<data>/canonical`` for a table at ``<data>/features/features.parquet`` when it is there: a
    feature table from another state folder is scored with its own canonical tables."""
    beside = Path(features_path).resolve().parent.parent / "canonical"
    return beside if (beside / "measurements.parquet").is_file() else default


@app.command("accuracy")
@clean_errors
def accuracy_command(
    family: Annotated[
        list[str] | None,
        typer.Option(
            "--family", help="model family: roofline, tabular, llm (repeatable; default: roofline + tabular)"
        ),
    ] = None,
    split: Annotated[
        list[str] | None,
        typer.Option("--split", help="split (repeatable; default: the published ones + unseen-kernel/gpu)"),
    ] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="write the rows as JSON here")] = None,
    features: Annotated[
        Path | None,
        typer.Option("--features", help="feature table (default: data_dir/features/features.parquet)"),
    ] = None,
    canonical: Annotated[
        Path | None,
        typer.Option(
            "--canonical",
            help=(
                "canonical tables the feature table was built from (default: the canonical/ folder "
                "beside the "
                "feature table's folder, else data_dir/canonical); the bolet split's labels are "
                "joined from there"
            ),
        ),
    ] = None,
    max_train_rows: Annotated[
        int | None,
        typer.Option("--max-train-rows", min=100, help="subsample each train side (deterministic)"),
    ] = None,
    min_gpu_rows: Annotated[
        int | None,
        typer.Option(
            "--min-gpu-rows",
            min=1,
            help=(
                "leave-one-GPU-out: hold out every GPU with at least this many rows (default: params.yaml "
                "train.bench_min_gpu_rows, 1000)"
            ),
        ),
    ] = None,
    device: Annotated[
        list[str] | None,
        typer.Option(
            "--device",
            help=(
                "leave-one-GPU-out: hold out only these GPUs (catalog id or name; repeatable; "
                "needs --split unseen-gpu)"
            ),
        ),
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            help=(
                "write the README accuracy section here: between <!-- bench:start --> and <!-- "
                "bench:end --> of an "
                "existing file (e.g. README.md), or a new file"
            ),
        ),
    ] = None,
    max_test_rows: Annotated[
        int | None,
        typer.Option(
            "--max-test-rows",
            min=10,
            help=(
                "cap each test side (deterministic; same rows for every family). Default: none, or "
                "params.yaml train.llm.max_test_rows when the llm family runs"
            ),
        ),
    ] = None,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray/--no-ray",
            help=(
                "Ray tasks: leave-one-GPU-out folds side by side (when Ray has more than one CPU), else each "
                "target's fit"
            ),
        ),
    ] = True,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store",
            help=(
                "measured store for the op-engine splits aiconfigurator-unseen-shape / -unseen-gpu "
                "(default: the "
                "state folder's data/opmodel/store, which `make pipeline` builds)"
            ),
        ),
    ] = None,
    calibration_rows: Annotated[
        list[int] | None,
        typer.Option(
            "--calibration-rows",
            help=(
                "calibration tier: with --split unseen-gpu, give each held-out GPU K rows of the "
                "calibration suite "
                "and score its other kernels (repeatable: 0 25 100 400 gives the curve; "
                "components/evaluation/calibration.py)"
            ),
        ),
    ] = None,
) -> None:
    """Train each family on each split's train side, score the test side, compare with the papers."""
    from components.common.atomic import atomic_write
    from components.devices import load_catalog
    from components.devices.catalog import UnknownDeviceError
    from components.evaluation.bench import BENCH_SPLITS, PROGRAM_SPLITS, BenchResult, run_accuracy_bench
    from components.evaluation.bench_markdown import (
        check_markdown_target,
        markdown_table,
        readme_markdown,
        write_markdown,
    )
    from components.evaluation.folds import BENCH_MIN_DEVICES_PER_SOURCE, ray_fold_executor
    from components.evaluation.harness import read_feature_table
    from components.evaluation.published import published_figures
    from components.evaluation.splits import SPLITS, unseen_gpu_devices
    from components.models.tabular import TabularConfig
    from components.platform.config import OPMODEL_SPLITS, SERVING_SPLITS
    from components.platform.config import load_params as read_params
    from components.training.tabular import make_predictor

    def atomic_write_text(path: Path, text: str) -> None:
        atomic_write(path, lambda tmp: tmp.write_text(text))

    if calibration_rows is not None:  # checked before any fitting
        from components.evaluation.calibration import check_ks

        try:
            calibration_rows = list(check_ks(calibration_rows))
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if split != ["unseen-gpu"] or (family and family != ["tabular"]) or markdown is not None:
            raise UserError(
                "--calibration-rows runs on --split unseen-gpu alone, the tabular family, without --markdown"
            )
    families = _families(family)
    splits = split or list(BENCH_SPLITS)
    unknown = [
        s
        for s in splits
        if s not in SPLITS and s not in PROGRAM_SPLITS and s not in SERVING_SPLITS and s not in OPMODEL_SPLITS
    ]
    if unknown:
        raise UserError(
            f"unknown split {', '.join(unknown)}; choose from "
            f"{', '.join((*SPLITS, *PROGRAM_SPLITS, *SERVING_SPLITS, *OPMODEL_SPLITS))}"
        )
    opmodel_splits = [s for s in splits if s in OPMODEL_SPLITS]  # the op engine: AIConfigurator's store
    splits = [s for s in splits if s not in OPMODEL_SPLITS]
    program_splits = [s for s in splits if s in PROGRAM_SPLITS]  # whole programs: from the canonical tables
    serving_splits = [s for s in splits if s in SERVING_SPLITS]  # LLM deployments: from the datasets in place
    splits = [s for s in splits if s not in PROGRAM_SPLITS and s not in SERVING_SPLITS]
    if device and "unseen-gpu" not in splits:
        raise UserError("--device chooses leave-one-GPU-out folds: add --split unseen-gpu")
    if markdown is not None:
        try:  # before an hour of fitting, not after
            if splits or not serving_splits:
                check_markdown_target(markdown)
            if serving_splits:
                from components.deployments.bench_readme import check_serving_target

                check_serving_target(markdown)
        except ValueError as exc:
            raise UserError(f"--markdown: {exc}") from None
    settings = prepared_settings()
    params = read_params(settings.params_file)
    store_dir = None
    if opmodel_splits:  # checked before any fitting
        from components.opmodel.store import MANIFEST_NAME
        from components.opmodel.train import state_store

        store_dir = store or state_store(settings)
        if not (Path(store_dir) / MANIFEST_NAME).is_file():
            raise UserError(
                f"--store {store_dir}: no measured store there (its {MANIFEST_NAME} is missing); "
                "`make pipeline` builds one in the state folder, or pass --store DIR"
            )
    train_params = params.get("train", {}) or {}
    rows_cap = max_train_rows or int(train_params.get("bench_max_train_rows", DEFAULT_BENCH_ROWS))
    gpu_rows = min_gpu_rows or int(train_params.get("bench_min_gpu_rows", DEFAULT_MIN_GPU_ROWS))
    config = TabularConfig.from_params(params, max_train_rows=rows_cap)
    features_path = features or settings.data_dir / "features" / "features.parquet"
    canonical_dir = canonical or _canonical_beside(features_path, settings.data_dir / "canonical")
    if canonical is not None and not (canonical / "measurements.parquet").is_file():
        raise UserError(
            f"--canonical {canonical}: no measurements.parquet there (the folder `kernelcast ingest` wrote)"
        )
    table = read_feature_table(features_path, canonical_dir) if splits else None
    catalog = load_catalog()
    devices = None
    if device:
        try:
            devices = [catalog.resolve(name).id for name in device]
        except UnknownDeviceError as exc:
            raise UserError(f"--device: {exc}") from None
        held_out = set(unseen_gpu_devices(table, BENCH_MIN_DEVICES_PER_SOURCE)["device_id"])
        absent = [name for name, dev in zip(device, devices, strict=False) if dev not in held_out]
        if absent:
            raise UserError(
                f"--device {', '.join(absent)}: no rows in this feature table "
                f"(GPUs there: {', '.join(sorted(held_out)) or 'none'})"
            )

    if calibration_rows is not None:
        from components.evaluation.calibration import run_cli_bench

        command = _command_line(family, split, device, max_train_rows, min_gpu_rows, max_test_rows)
        command += "".join(f" --calibration-rows {k}" for k in calibration_rows)
        run_cli_bench(
            table,
            calibration_rows,
            params,
            config,
            rows_cap,
            gpu_rows,
            devices,
            max_test_rows,
            command,
            json_file,
            echo=typer.echo,
            log=lambda line: typer.echo(line, err=True),
        )
        return

    def factory(name: str, train, split_name: str):
        return make_predictor(name, train, split_name, config, settings, use_ray=ray)

    def fold_factory(name: str, train, split_name: str):
        return make_predictor(name, train, split_name, config, settings, use_ray=False)

    def start_ray() -> None:
        from components.platform.runtime import ensure_ray

        ensure_ray(settings)

    # Folds side by side as Ray tasks when Ray has more than one CPU to give (a cluster, or a local
    # Ray on a multi-core machine); one after the other otherwise.
    cores = settings.ray_num_cpus or os.cpu_count() or 1
    fold_executor = (
        ray_fold_executor(fold_factory, start_ray) if ray and (settings.ray_address or cores > 1) else None
    )

    llm_note = None
    if "llm" in families:
        from components.training.llm import llm_params

        llm_config, llm_run = llm_params(params)
        if max_test_rows is None:
            max_test_rows = llm_run.max_test_rows  # a 2-core CPU reads ~3 LLM prompts/s
        llm_note = (
            f"llm: {llm_config.base or 'embedded SmolLM2-135M'} + LoRA r={llm_config.lora_r}, "
            f"{llm_config.max_tokens}-token prompts, {llm_config.epochs} epochs on at most "
            f"{llm_run.max_train_rows} train rows (params.yaml train.llm), {llm_run.workers} Ray "
            "Train workers"
        )
    header = [
        f"train sides subsampled deterministically (hash of measurement_id) to at most {rows_cap} rows; "
        "hyper-parameters fixed in params.yaml, none tuned on a test side",
        *([llm_note] if llm_note else []),
    ]

    command = _command_line(family, split, device, max_train_rows, min_gpu_rows, max_test_rows)
    if store is not None and opmodel_splits:
        command += f" --store {store}"

    def save(partial) -> None:
        if json_file is not None:
            payload = {"command": command, **partial.to_json()}
            payload["notes"] = header + payload["notes"]
            atomic_write_text(json_file, json.dumps(payload, indent=2) + "\n")

    result = (
        BenchResult()
        if not splits
        else run_accuracy_bench(
            table,
            families,
            splits,
            factory,
            published_figures(lambda n: catalog.resolve(n).id),
            min_gpu_rows=gpu_rows,
            devices=devices,
            log=lambda line: typer.echo(line, err=True),
            max_test_rows=max_test_rows,
            canonical_dir=canonical_dir,
            on_progress=save,
            fold_executor=fold_executor,
        )
    )
    if program_splits:  # KernelBench leave-one-GPU-out (components/evaluation/kernelbench_bench.py)
        from components.evaluation.kernelbench_bench import extend_result

        extend_result(result, canonical_dir, settings.cache_dir, log=lambda line: typer.echo(line, err=True))
        save(result)
    if opmodel_splits:  # the op engine on AIConfigurator's tables (components/evaluation/opmodel_bench.py)
        from components.evaluation.opmodel_bench import extend_result as extend_opmodel

        extend_opmodel(
            result,
            opmodel_splits,
            store_dir,
            Path(settings.datasets_dir),
            log=lambda line: typer.echo(line, err=True),
        )
        save(result)
    if serving_splits:  # LLM deployments on measured serving runs (components/deployments/bench.py)
        from components.deployments.bench import extend_result as extend_serving

        extend_serving(
            result,
            serving_splits,
            settings.datasets_dir,
            catalog,
            log=lambda line: typer.echo(line, err=True),
        )
        save(result)
    result.notes[:0] = header
    typer.echo(markdown_table(result.rows))
    for note in result.notes:
        typer.echo(f"- {note}")
    if json_file is not None:
        atomic_write_text(json_file, json.dumps({"command": command, **result.to_json()}, indent=2) + "\n")
        typer.echo(f"wrote {json_file}")
    if markdown is not None:
        try:
            from components.deployments.bench_readme import write_readme
            from components.evaluation.opmodel_bench import split_opengine

            result, engine_rows, engine_notes = split_opengine(result)
            if engine_rows:  # the op engine's own README block; the rest as before
                from components.evaluation.opmodel_bench import write_opengine_markdown

                write_opengine_markdown(markdown, engine_rows, engine_notes, command)
            if result.rows or not engine_rows:
                write_readme(markdown, result, command, readme_markdown, write_markdown)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        typer.echo(f"wrote {markdown}")


@app.command("markdown")
@clean_errors
def markdown_command(
    from_json: Annotated[Path, typer.Option("--from", help="the JSON `bench accuracy --json` wrote")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help=(
                "write the README accuracy section here: between <!-- bench:start --> and <!-- "
                "bench:end --> of an "
                "existing file (e.g. README.md), or a new file"
            ),
        ),
    ],
) -> None:
    """Rewrite the README accuracy section from a saved `bench accuracy --json` run (no refitting)."""
    from components.evaluation.bench import BenchResult
    from components.evaluation.bench_markdown import readme_markdown, write_markdown

    if not from_json.is_file():
        raise UserError(
            f"--from {from_json}: file not found (write one with `kernelcast bench accuracy --json`)"
        )
    try:
        payload = json.loads(from_json.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"--from {from_json}: not JSON ({exc})") from None
    rows = payload.get("rows") if isinstance(payload, dict) else None
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and {"split", "family", "target", "metric", "ours"} <= set(r) for r in rows
    ):
        raise UserError(
            f"--from {from_json}: not a `bench accuracy --json` file (needs a rows list of "
            "split/family/target/metric/ours objects)"
        )
    for row in rows:  # files from before per-row scope and coverage
        row.setdefault("scope", row["target"].partition("[")[2].rstrip("]"))
        row.setdefault("coverage", None)
        row.setdefault("n_asked", row.get("n", 0))
        row.setdefault("published", None)
        row.setdefault("published_by", None)
        row.setdefault("n", 0)
    result = BenchResult(rows, [str(n) for n in payload.get("notes", [])], list(payload.get("timings", [])))
    try:
        from components.deployments.bench_readme import write_readme

        write_readme(
            out,
            result,
            str(payload.get("command") or "kernelcast bench accuracy"),
            readme_markdown,
            write_markdown,
        )
    except ValueError as exc:
        raise UserError(f"--out: {exc}") from None
    typer.echo(f"wrote {out} ({len(rows)} figures from {from_json})")


@app.command("serve")
@clean_errors
def serve_bench_command(
    model: Annotated[
        str, typer.Option(help="model to serve and time (models:/..., a predictor dir, or 'roofline')")
    ] = ("models:/kernelcast@champion"),
    rows: Annotated[
        int, typer.Option(help="op questions in the raw batched-throughput run", min=1000)
    ] = 1_000_000,
    rate: Annotated[float, typer.Option(help="requests/s from the client process", min=1)] = 100.0,
    seconds: Annotated[float, typer.Option(help="duration of the fixed-rate run (s)", min=1)] = 10.0,
    llm_model: Annotated[
        str | None,
        typer.Option(
            help="a trained llm model for the llm latency (default: the embedded base with untrained heads)"
        ),
    ] = None,
    skip_llm: Annotated[bool, typer.Option(help="leave the llm latency out")] = False,
    out: Annotated[Path, typer.Option(help="results JSON")] = Path("benchmarks/results/bench_serve.json"),
    markdown: Annotated[
        Path | None,
        typer.Option(
            help=(
                "write the speed table here, between <!-- bench-serve:start --> and <!-- bench-serve:end --> "
                "(e.g. README.md)"
            )
        ),
    ] = None,
) -> None:
    """Serving speed: per-stage rates per CPU-second (one thread), server p50/p99 at a fixed rate, a CUDA
    source query, llm; optionally the README's speed table."""
    prepared_settings()
    from components.serving.bench import run_bench, write_result
    from components.serving.bench_readme import readme_block, write_readme_block

    if markdown is not None and not markdown.is_file():
        raise UserError(f"--markdown {markdown}: file not found")
    result = run_bench(model, rows=rows, rate=rate, seconds=seconds, llm_model=llm_model, skip_llm=skip_llm)
    command = " ".join(
        [
            "kernelcast bench serve",
            *([f"--model {model}"] if model != "models:/kernelcast@champion" else []),
            f"--rows {rows}",
            f"--rate {rate:g}",
            f"--seconds {seconds:g}",
            *(["--skip-llm"] if skip_llm else []),
        ]
    )
    result["command"] = command
    typer.echo(json.dumps(result, indent=2, sort_keys=True))
    typer.echo(f"wrote {write_result(result, out)}")
    if markdown is not None:
        try:
            write_readme_block(markdown, readme_block(result, command))
        except (OSError, ValueError) as exc:
            raise UserError(f"--markdown: {exc}") from None
        typer.echo(f"wrote {markdown}")
