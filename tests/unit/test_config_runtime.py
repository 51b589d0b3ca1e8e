"""components.platform.config (settings, params.yaml reader), components.platform.runtime (the one Ray
start-up's arguments), components.common.sampling, components.common.atomic and
components.registry.loading."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from components.platform.config import (
    PROJECT_ROOT,
    ParamsError,
    Settings,
    ValidateParams,
    ingest_sources,
    load_params,
    register_thresholds,
    validate_params,
)


def _write(tmp_path: Path, params: object) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


# --------------------------------------------------------------------------- params.yaml


def test_project_params_load_and_typed_sections_read_them() -> None:
    params = load_params(PROJECT_ROOT / "params.yaml")
    assert isinstance(validate_params(params), ValidateParams)
    assert "kernelcast" in (ingest_sources(params) or [])
    thresholds = register_thresholds(params)  # {split: {max_/min_<metric>: bound}}
    assert thresholds and all(
        key.startswith(("max_", "min_")) for bounds in thresholds.values() for key in bounds
    )


def test_default_path_comes_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(
        tmp_path,
        {
            "validate": {
                "bandwidth_tolerance": 1.2,
                "flops_tolerance": 1.1,
                "arith_intensity_rel_tol": 0.05,
                "max_failure_share": 0.1,
            }
        },
    )
    monkeypatch.setenv("KERNELCAST_PARAMS_FILE", str(path))
    assert validate_params(load_params()).bandwidth_tolerance == 1.2


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"validate": {"bandwith_tolerance": 1.1}}, "validate.bandwith_tolerance"),
        ({"train": {"seed": 1, "n_estimator": 3}}, "train.n_estimator"),
        ({"ingest": {"sources": ["a"], "source": "b"}}, "ingest.source"),
        ({"features": {"roofline_eff": 1.0}}, "features.roofline_eff"),
        ({"train": {"tabular": ["lgbm"]}}, "'train.tabular:' must be a mapping"),
        ({"train": {"llm": [1, 2]}}, "'train.llm:' must be a mapping"),
        ({"register": {"runtime_mape": 0.3}}, "register.runtime_mape"),
        (
            {"register": {"splits": {"neusight": {"max_runtime_mape": "low"}}}},
            "register.splits.neusight.max_runtime_mape",
        ),
        ({"ingest": ["neusight"]}, "'ingest:' must be a mapping"),
        ({"ingest": {"sources": "neusight"}}, "ingest.sources must be a list"),
        (["not", "a", "mapping"], "expected a mapping"),
    ],
)
def test_bad_params_are_errors_naming_file_and_key(tmp_path: Path, params: object, message: str) -> None:
    path = _write(tmp_path, params)
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_nested_train_sections_are_left_to_their_readers(tmp_path: Path) -> None:
    """train.tabular / train.llm keys are checked by TabularConfig.from_params and llm_params
    (tests/model/test_tabular.py, tests/unit/test_llm_params.py), not here: config imports no
    model code, so every command (and DVC stage) need not depend on it."""
    import ast

    import components.platform.config as config

    params = {"train": {"tabular": {"n_estimator": 3}, "llm": {"lora_rank": 8}}}
    assert load_params(_write(tmp_path, params)) == params
    tree = ast.parse(Path(config.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }  # catches ``from components import models`` too
    upper = ("components.models", "components.training", "components.evaluation", "components.registry")
    assert imported and not [m for m in imported if m.startswith(upper)], sorted(imported)


def test_missing_unreadable_and_incomplete_params(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"params file not found: .*nowhere\.yaml"):
        load_params(tmp_path / "nowhere.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(broken)
    with pytest.raises(ParamsError, match="'validate:' is missing flops_tolerance, arith_intensity_rel_tol"):
        validate_params({"validate": {"bandwidth_tolerance": 1.1, "max_failure_share": 0.1}})
    assert load_params(_write(tmp_path, {})) == {}  # empty file: no sections, nothing to check


def test_settings_derive_every_folder_from_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "h"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    settings = Settings()
    for folder in (
        settings.data_dir,
        settings.mlflow_dir,
        settings.prefect_home,
        settings.cache_dir,
        settings.models_dir,
        settings.reports_dir,
    ):
        assert folder.parent == (tmp_path / "h").resolve()
    # Ray's folder too, unless its sockets would pass the AF_UNIX limit there (pytest's tmp_path is deep)
    ray_socket = f"{settings.ray_tmpdir}/session_2026-11-26_16-28-00_440441_20840/sockets/plasma_store"
    assert settings.ray_tmpdir.parent == (tmp_path / "h").resolve() or len(ray_socket) <= 107
    assert settings.tracking_uri() == f"sqlite:///{settings.mlflow_dir / 'mlflow.db'}"


# --------------------------------------------------------------------------- runtime


def test_local_ray_kwargs_pin_one_thread_and_the_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from components.platform.runtime import ray_init_kwargs

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    monkeypatch.setenv("KERNELCAST_RAY_NUM_CPUS", "2")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    kwargs = ray_init_kwargs(Settings(), "http://127.0.0.1:4200/api")
    env = kwargs["runtime_env"]["env_vars"]
    assert env["OMP_NUM_THREADS"] == "1" and env["RAY_USAGE_STATS_ENABLED"] == "0"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"  # workers' OpenMP sleeps at barriers, never spins
    assert env["OPENBLAS_THREAD_TIMEOUT"] == "4"  # and OpenBLAS's threads sleep right after a call
    assert env["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
    assert kwargs["num_cpus"] == 2 and kwargs["include_dashboard"] is False
    assert kwargs["_temp_dir"] == str(Settings().ray_tmpdir)  # <state>/ray, or a short one (AF_UNIX limit)
    assert kwargs["_system_config"] == {"worker_niceness": 0}  # not Ray's nice 15: starved under load


def test_cluster_kwargs_leave_resources_to_the_cluster_and_refuse_a_loopback_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from components.platform.runtime import ray_init_kwargs

    monkeypatch.setenv("KERNELCAST_RAY_ADDRESS", "ray://head.example:10001")
    settings = Settings()
    kwargs = ray_init_kwargs(settings, "http://prefect.example:4200/api")
    assert set(kwargs) == {"runtime_env"}
    with pytest.raises(ValueError, match="cannot reach the loopback Prefect API"):
        ray_init_kwargs(settings, "http://127.0.0.1:4200/api")
    monkeypatch.setenv("KERNELCAST_RAY_ADDRESS", "auto")  # a local cluster shares our loopback
    assert ray_init_kwargs(Settings(), "http://127.0.0.1:4200/api")["runtime_env"]


def test_configure_environment_creates_the_state_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from components.platform.runtime import configure_environment

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "state"))
    for key in ("RAY_TMPDIR", "PREFECT_HOME", "RAY_AUTH_MODE", "DO_NOT_TRACK", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    settings = Settings()
    configure_environment(settings)
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "4"
    assert settings.ray_tmpdir.is_dir() and settings.prefect_home.is_dir()
    assert os.environ["RAY_TMPDIR"] == str(settings.ray_tmpdir) and os.environ["RAY_AUTH_MODE"] == "disabled"
    assert os.environ["DO_NOT_TRACK"] == "1"
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # a user's own choice stands
    configure_environment(settings)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


# --------------------------------------------------------------------------- sampling


def _legacy_unit(value: object, salt: str) -> float:
    return int.from_bytes(hashlib.sha1(f"{salt}\x1f{value}".encode()).digest()[:8], "big") / 2**64


def test_unit_hash_is_the_published_draw_and_order_free() -> None:
    from components.common.sampling import unit_hash, unit_hash_series

    keys = [f"k{i}" for i in range(200)]
    assert unit_hash(keys, "random").tolist() == [_legacy_unit(k, "random") for k in keys]
    assert np.all((unit_hash(keys, "s") >= 0) & (unit_hash(keys, "s") < 1))
    assert not np.array_equal(unit_hash(keys, "a"), unit_hash(keys, "b"))  # salts are independent draws
    series = pd.Series(keys[::-1], index=range(100, 300))
    drawn = unit_hash_series(series, "random")
    assert drawn.index.equals(series.index) and drawn.loc[100] == _legacy_unit(keys[-1], "random")
    # the llm validation slice's historical 32-bit draw over 2**32 - 1
    legacy32 = int(hashlib.sha1(b"llm-val|k7").hexdigest()[:8], 16) / 0xFFFFFFFF
    assert unit_hash(["k7"], "llm-val", sep="|", bits=32, closed=True)[0] == legacy32
    with pytest.raises(ValueError, match="bits"):
        unit_hash(keys, "s", bits=12)


def test_subsample_and_caps_pick_the_same_rows_whatever_the_row_order() -> None:
    from components.common.sampling import balanced_sample, capped_index, subsample

    table = pd.DataFrame(
        {
            "measurement_id": [f"m{i}" for i in range(500)],
            "kernel_id": [f"k{i % 50}" for i in range(500)],
            "cls": ["a" if i % 3 else "b" for i in range(500)],
        }
    )
    first = subsample(table, 60, "s")
    shuffled = subsample(table.sample(frac=1.0, random_state=1), 60, "s")
    assert len(first) == 60 and set(first.index) == set(shuffled.index)
    assert list(first.index) == sorted(first.index)  # frame order kept
    assert subsample(table, None, "s") is table and subsample(table, 10_000, "s") is table
    capped = capped_index(table.index, table["measurement_id"], 40, "eval-cap")
    assert len(capped) == 40 and capped.is_monotonic_increasing
    expected = sorted(table.index, key=lambda i: hashlib.sha1(f"eval-cap\x1fm{i}".encode()).hexdigest())[:40]
    assert list(capped) == sorted(expected)
    balanced = balanced_sample(table, 5, "cls", "llm-sub", sep="|")
    assert balanced["cls"].value_counts().to_dict() == {"a": 5, "b": 5}


# --------------------------------------------------------------------------- atomic writes


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path: Path) -> None:
    from components.common.atomic import atomic_write, atomic_write_text

    target = tmp_path / "deep" / "out.json"
    atomic_write_text(target, '{"a": 1}')
    assert target.read_text() == '{"a": 1}' and oct(target.stat().st_mode & 0o777) == "0o644"

    def half_then_fail(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == '{"a": 1}'  # the old file survives
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]  # no temp file left


def test_atomic_write_dir_replaces_or_keeps_a_whole_folder(tmp_path: Path) -> None:
    from components.common.atomic import atomic_write_dir

    target = tmp_path / "model"

    def version(text: str):
        def write(folder: Path) -> None:
            (folder / "a.txt").write_text(text)
            (folder / "b.txt").write_text(text)

        return write

    atomic_write_dir(target, version("one"))
    atomic_write_dir(target, version("two"), replace_existing=False)  # a finished copy is kept
    assert (target / "a.txt").read_text() == "one"
    atomic_write_dir(target, version("three"))
    assert {p.name: p.read_text() for p in target.iterdir()} == {"a.txt": "three", "b.txt": "three"}

    def fail(folder: Path) -> None:
        (folder / "a.txt").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        atomic_write_dir(target, fail)
    assert (target / "a.txt").read_text() == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temp folder left


# --------------------------------------------------------------------------- model loading


def test_load_any_predictor_roofline_folder_and_clear_errors(tmp_path: Path) -> None:
    from components.models.roofline import RooflinePredictor
    from components.registry.loading import ModelLoadError, load_any_predictor

    assert isinstance(load_any_predictor("roofline"), RooflinePredictor)
    saved = tmp_path / "model"
    RooflinePredictor().save(saved)
    assert isinstance(load_any_predictor(saved), RooflinePredictor)
    assert isinstance(load_any_predictor(str(saved)), RooflinePredictor)
    with pytest.raises(ModelLoadError, match="'nowhere' is neither 'roofline'"):
        load_any_predictor("nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"no predictor\.json"):
        load_any_predictor(tmp_path / "empty")
    with pytest.raises(ModelLoadError, match="empty"):
        load_any_predictor("  ")


@pytest.mark.slow
def test_load_any_predictor_from_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real sqlite MLflow store: models:/name/N, models:/name@alias and runs:/ give the predictor."""
    from components.models.roofline import RooflinePredictor
    from components.registry.loading import ModelLoadError, load_any_predictor
    from components.registry.mlflow_registry import log_predictor, mlflow_client, register

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    saved = tmp_path / "model"
    RooflinePredictor().save(saved)
    model_uri = log_predictor(
        saved, {}, {}, {}, experiment="t", artifact_location=(tmp_path / "art").as_uri(), tracking_uri=uri
    )
    version = register(model_uri, "kc-test", uri)
    mlflow_client(uri).set_registered_model_alias("kc-test", "champion", version)
    for reference in (f"models:/kc-test/{version}", "models:/kc-test@champion", model_uri):
        assert isinstance(load_any_predictor(reference, uri), RooflinePredictor), reference
    with pytest.raises(ModelLoadError, match="cannot load models:/kc-test/99"):
        load_any_predictor("models:/kc-test/99", uri)


def test_get_settings_follows_the_environment_and_hands_out_independent_copies(monkeypatch, tmp_path) -> None:
    from components.platform.config import get_settings

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "a"))
    first = get_settings()
    assert first.state_dir == tmp_path / "a"
    first.home = tmp_path / "changed-by-a-caller"
    assert get_settings().home == tmp_path / "a"  # a caller's change does not leak into the next call
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "b"))
    assert get_settings().state_dir == tmp_path / "b"  # a changed variable is read anew


def test_ray_tmpdir_stays_within_the_socket_path_limit_for_a_deep_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh clone in a deep folder: <state>/ray/session_.../sockets/plasma_store would pass 107 bytes.
    deep = tmp_path / ("d" * 60) / "fresh-clone-20261126T155544" / ".kernelcast"
    monkeypatch.setenv("KERNELCAST_HOME", str(deep))
    tmpdir = Settings().ray_tmpdir
    socket = f"{tmpdir}/session_2026-11-26_16-28-00_440441_20840/sockets/plasma_store"
    assert not tmpdir.is_relative_to(deep) and len(socket) <= 107
    assert Settings().ray_tmpdir == tmpdir  # the same state folder keeps its folder
    monkeypatch.setenv("KERNELCAST_HOME", "/tmp/kc-h")
    assert Settings().ray_tmpdir == Path("/tmp/kc-h/ray")  # a shallow one keeps it under the state folder
