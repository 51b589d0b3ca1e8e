"""The promotion gate's rules on evaluation reports (pure: no MLflow), and params.yaml ``register:``."""

from __future__ import annotations

from typing import Any

import pytest

from components.registry.gate import GatePolicy, PolicyError, judge, read_policy

REGISTER = {
    "tolerance": 0.02,
    "splits": {
        "unseen-kernel": {"max_runtime_mape": 0.35, "min_within_10": 0.30},
        "unseen-gpu": {"max_runtime_mape": 0.45},
    },
    "guarded": ["unseen-kernel/runtime_mape", "unseen-gpu/runtime_mape", "unseen-kernel/within_10"],
}


def _policy(**changes: Any) -> GatePolicy:
    return read_policy({"register": {**REGISTER, **changes}})


def _report(
    uk: dict[str, float] | None = None, gpu: dict[str, float] | None = None, **extra: Any
) -> dict[str, Any]:
    splits = {}
    if uk is not None:
        splits["unseen-kernel"] = {"status": "ok", "metrics": uk}
    if gpu is not None:
        splits["unseen-gpu"] = {"status": "ok", "metrics": gpu}
    return {"kind": "kernelcast-gate-report", "splits": splits, "complete": True, **extra}


GOOD_UK = {"runtime_mape": 0.20, "within_10": 0.50}
GOOD_GPU = {"runtime_mape": 0.30}


def test_project_params_hold_a_gate_over_the_published_splits() -> None:
    from components.platform.config import PROJECT_ROOT, load_params

    policy = read_policy(load_params(PROJECT_ROOT / "params.yaml"))
    assert {"unseen-kernel", "unseen-gpu", "neusight", "pipeweave-fp8", "bolet-roofline"} <= set(
        policy.splits
    )
    assert policy.guarded and all(key.split("/")[0] in policy.splits for key in policy.guarded)
    assert policy.evaluation.max_train_rows and policy.evaluation.max_gpu_folds  # affordable on 2 cores


def test_a_candidate_that_passes_every_rule() -> None:
    judgement = judge(_report(GOOD_UK, GOOD_GPU), _policy())
    assert judgement.passed, judgement.failures()
    assert [r.rule for r in judgement.rules][:1] == ["evaluation complete"]
    assert any(
        r.rule == "unseen-gpu/runtime_mape <= 0.45" and r.figure == 0.30 and r.passed for r in judgement.rules
    )
    assert judgement.rules[-1].note == "first champion"


def test_a_candidate_that_fails_one_threshold_names_it_with_its_figure() -> None:
    judgement = judge(_report(GOOD_UK, {"runtime_mape": 0.52}), _policy())
    assert not judgement.passed
    assert judgement.failures() == ["FAIL  unseen-gpu/runtime_mape <= 0.45: 0.52"]


@pytest.mark.parametrize(
    "report",
    [
        None,  # never evaluated
        _report(GOOD_UK),  # a split missing: partial
        {**_report(GOOD_UK, GOOD_GPU), "complete": False},
        {
            "kind": "kernelcast-gate-report",
            "complete": False,
            "splits": {
                "unseen-kernel": {"status": "ok", "metrics": GOOD_UK},
                "unseen-gpu": {
                    "status": "error",
                    "metrics": {},
                    "note": "ValueError: no GPU with at least 1000 rows",
                },
            },
        },
    ],
)
def test_a_failed_or_partial_evaluation_never_passes(report: dict[str, Any] | None) -> None:
    judgement = judge(report, _policy())
    assert not judgement.passed and not judgement.rules[0].passed


def test_no_guarded_metric_worse_than_the_champions_by_more_than_the_tolerance() -> None:
    champion = {
        "unseen-kernel/runtime_mape": 0.20,
        "unseen-gpu/runtime_mape": 0.30,
        "unseen-kernel/within_10": 0.50,
    }
    # Within tolerance on every guarded metric (0.21 vs 0.20 + 0.02): passes, even though not better.
    close = judge(
        _report({"runtime_mape": 0.21, "within_10": 0.49}, {"runtime_mape": 0.31}), _policy(), champion, "3"
    )
    assert close.passed, close.failures()
    # Better on the headline, worse by 0.05 on leave-one-GPU-out: fails on that one rule.
    worse = judge(
        _report({"runtime_mape": 0.10, "within_10": 0.60}, {"runtime_mape": 0.35}), _policy(), champion, "3"
    )
    assert worse.failures() == ["FAIL  unseen-gpu/runtime_mape <= champion v3's 0.3 + 0.02: 0.35"]
    # Higher-is-better metrics are guarded from below.
    lower = judge(_report({"runtime_mape": 0.20, "within_10": 0.45}, GOOD_GPU), _policy(), champion, "3")
    assert [r.rule for r in lower.rules if not r.passed] == [
        "unseen-kernel/within_10 >= champion v3's 0.5 - 0.02"
    ]
    # A tolerance of 0 demands no regression at all.
    strict = judge(
        _report({"runtime_mape": 0.21, "within_10": 0.50}, GOOD_GPU), _policy(tolerance=0.0), champion, "3"
    )
    assert len(strict.failures()) == 1


def test_a_champion_without_a_recorded_figure_is_not_compared_on_it() -> None:
    judgement = judge(_report(GOOD_UK, GOOD_GPU), _policy(), {"unseen-kernel/runtime_mape": 0.25}, "2")
    assert judgement.passed
    assert any("not compared" in r.note for r in judgement.rules)


@pytest.mark.parametrize(
    ("register", "fragment"),
    [
        (None, "no 'register:' section"),
        ({"max_runtime_mape": 0.35}, "unknown key register.max_runtime_mape"),
        ({"splits": {}}, "refusing to promote without a gate"),
        (
            {"splits": {"unseen-kernels": {"max_runtime_mape": 0.3}}},
            "register.splits.unseen-kernels: unknown split",
        ),
        ({"splits": {"neusight": {"runtime_mape": 0.3}}}, "register.splits.neusight.runtime_mape"),
        (
            {"splits": {"neusight": {"max_runtime_mape": "low"}}},
            "register.splits.neusight.max_runtime_mape must be a number",
        ),
        (
            {"splits": {"neusight": {"max_runtime_mape": 0.3}}, "guarded": ["unseen-gpu/runtime_mape"]},
            "register.guarded 'unseen-gpu/runtime_mape'",
        ),
        (
            {"splits": {"neusight": {"max_runtime_mape": 0.3}}, "tolerance": -1},
            "register.tolerance must be >= 0",
        ),
        (
            {"splits": {"neusight": {"max_runtime_mape": 0.3}}, "evaluation": {"max_gpu_folds": 0}},
            "register.evaluation.max_gpu_folds must be a positive integer",
        ),
        (
            {"splits": {"neusight": {"max_runtime_mape": 0.3}}, "evaluation": {"max_rows": 5}},
            "unknown key register.evaluation.max_rows",
        ),
    ],
)
def test_bad_policies_are_errors_naming_the_key(register: Any, fragment: str) -> None:
    params = {} if register is None else {"register": register}
    with pytest.raises(PolicyError, match=None) as info:
        read_policy(params)
    assert fragment in str(info.value)


def test_dataset_version_is_the_hash_dvc_records(tmp_path) -> None:
    """Lineage: ``dataset_version`` of a feature table in a DVC output folder is the ``<md5>.dir`` DVC
    itself computes for that folder (checked against dvc_data's own build); elsewhere the file's md5."""
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db.local import LocalHashFileDB
    from dvc_objects.fs.local import LocalFileSystem

    from components.registry.lineage import dataset_version, dvc_dir_hash, file_md5

    out = tmp_path / "data" / "features"
    (out / "part").mkdir(parents=True)
    (out / "features.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 40)
    (out / "part" / "extra.json").write_text('{"rows": 3}')
    fs = LocalFileSystem()
    _, _, tree = build(LocalHashFileDB(fs, str(tmp_path / "odb")), str(out), fs, "md5")
    assert dvc_dir_hash(out) == tree.hash_info.value

    (tmp_path / "dvc.yaml").write_text("stages:\n  features:\n    cmd: x\n    outs:\n      - data/features\n")
    assert dataset_version(out / "features.parquet", tmp_path) == tree.hash_info.value
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    assert dataset_version(out / "features.parquet", tmp_path) == f"md5:{file_md5(out / 'features.parquet')}"
