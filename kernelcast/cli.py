"""The ``kernelcast`` command line.

Each subcommand lives in ``kernelcast/commands/<area>.py`` and imports heavy libraries (torch,
ray, great_expectations, peft, mlflow) only inside its function body, so ``--help`` stays fast.
"""

from __future__ import annotations

import typer

from kernelcast.commands import (
    bench,
    calibrate,
    deploy,
    devices,
    evaluate,
    features,
    ingest,
    llm,
    mlflow_ui,
    models,
    pipeline,
    predict,
    profile,
    promote,
    rank,
    serve,
    train,
    validate,
)

app = typer.Typer(
    name="kernelcast",
    help="Predict GPU kernel runtime, bandwidth, GFLOP/s, cache hit rates and roofline class "
    "from source or op + shapes and a GPU's spec.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

app.add_typer(devices.app, name="devices")
app.add_typer(features.app, name="features")
app.add_typer(bench.app, name="bench")
app.add_typer(llm.app, name="llm")
app.add_typer(models.app, name="models")
app.command("ingest")(ingest.ingest_command)
app.command("validate")(validate.validate_command)
app.command("train")(train.train_command)
app.command("evaluate")(evaluate.evaluate_command)
app.command("promote")(promote.promote_command)
app.command("predict")(predict.predict_command)
app.command("rank")(rank.rank_command)
app.command("serve")(serve.serve_command)
app.command("profile")(profile.profile_command)
app.command("calibrate")(calibrate.calibrate_command)
app.command("pipeline")(pipeline.pipeline_command)
app.command("deploy")(deploy.deploy_command)
app.command("mlflow-ui")(mlflow_ui.mlflow_ui_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
