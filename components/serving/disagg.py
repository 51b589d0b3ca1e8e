"""How a disaggregated deployment's GPUs are split between prefill and decode workers: stated on every
``disagg`` answer and settable (``--prefill-gpus``/``--decode-gpus``, HTTP ``prefill_gpus``/``decode_gpus``).

A worker is one tensor x pipeline group of ``tp * pp`` GPUs (the group the composition times); by default a
disaggregated deployment has one prefill worker and one decode worker. The composition
(``components.deployments``, the serving-engine model) times one worker of each side: a split with more
workers is stated and carried in the answer, and the note says that its times are one worker's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SPLIT_FIELDS: tuple[str, ...] = ("prefill_gpus", "decode_gpus")


def take_split(params: dict[str, Any], where: str = "--") -> tuple[dict[str, Any], dict[str, int]]:
    """(params for the composition, the split): the split's GPU counts checked against the mode and the
    worker's ``tp * pp`` GPUs; DeploymentError naming the field otherwise. ``where`` spells a field
    (``--`` for the CLI's ``--prefill-gpus``, ``deployment.`` for HTTP's ``deployment.prefill_gpus``)."""
    from components.deployments.config import DeploymentError

    rest = {k: v for k, v in params.items() if k not in SPLIT_FIELDS}
    mode = str(params.get("mode") or "agg")
    worker = int(params.get("tp") or 1) * int(params.get("pp") or 1)
    split: dict[str, int] = {}
    for name in SPLIT_FIELDS:
        label = f"--{name.replace('_', '-')}" if where == "--" else f"{where}{name}"
        value = params.get(name)
        if value is None:
            split[name] = worker
            continue
        if mode != "disagg":
            raise DeploymentError(f"{label} applies to {'--mode' if where == '--' else 'mode'} disagg")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value % worker:
            raise DeploymentError(
                f"{label} {value!r}: not a multiple of the {worker} GPUs of one worker (tp x pp)"
            )
        split[name] = value
    return rest, split


def state_split(answers: Sequence[dict[str, Any]], split: dict[str, int]) -> None:
    """Add ``deployment.split`` (and a note when a side has several workers) to each disagg answer."""
    for answer in answers:
        d = answer.get("deployment", {})
        if d.get("mode") != "disagg" or "refused" in answer:
            continue
        worker = int(d["tp"]) * int(d["pp"])
        d["split"] = {
            **split,
            "prefill_workers": split["prefill_gpus"] // worker,
            "decode_workers": split["decode_gpus"] // worker,
            "gpus_per_worker": worker,
        }
        several = d["split"]["prefill_workers"] > 1 or d["split"]["decode_workers"] > 1
        answer.setdefault("notes", []).append(
            "disagg split: tokens_per_s is per GPU of one decode worker (prefill GPUs not counted)"
            + (
                "; TTFT and TPOT are one prefill and one decode worker's (the composition does not yet "
                "model requests spread over several workers of a side)"
                if several
                else ""
            )
        )


def split_line(deployment: dict[str, Any]) -> str | None:
    """``disagg split: 2 prefill GPUs (1 worker of tp 2) + 2 decode GPUs (1 worker of tp 2) = 4 GPUs``."""
    split = deployment.get("split")
    if not split:
        return None
    group = f"tp {deployment['tp']}" + (f" x pp {deployment['pp']}" if int(deployment["pp"]) > 1 else "")

    def side(name: str) -> str:
        workers = split[f"{name}_workers"]
        return (
            f"{split[f'{name}_gpus']} {name} GPUs ({workers} worker{'s' if workers > 1 else ''} of {group})"
        )

    total = split["prefill_gpus"] + split["decode_gpus"]
    return f"disagg split: {side('prefill')} + {side('decode')} = {total} GPUs"


def predict_split_deployment(
    config: Any,
    specs: Sequence[Any],
    params: dict[str, Any],
    *,
    allow_paths: bool = True,
    where: str = "--",
    carried: Any = None,
) -> list[dict[str, Any]]:
    """``components.deployments.service.predict_deployment`` with the prefill/decode split taken, checked
    and stated on each disagg answer; ``carried``: a model's op times and constants
    (``deployment_questions.ModelParts``), else the state folder's and the package's."""
    from components.deployments.service import predict_deployment

    rest, split = take_split(params, where)
    op_time, constants = (carried.op_time, carried.constants) if carried is not None else (None, None)
    answers = predict_deployment(
        config, specs, rest, op_time=op_time, allow_paths=allow_paths, constants=constants
    )
    state_split(answers, split)
    return answers
