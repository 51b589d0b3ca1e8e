"""The measured store split per (family, GPU, dtype) under the cache (``components.opmodel.store_cache``): a
question on one GPU reads only that GPU's rows, the answers are those of the engine that reads the whole
store (measured and transfer tiers alike), the split and the tables built from it are written once and
reused, and a rewritten store gets a new split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.unit.test_opmodel_transfer import SIZES, _model, synthetic_gemm

GPUS = ("a100-sxm4-80gb", "h100-sxm", "h200")


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def _store(catalog, folder: Path, gamma: float = 0.0) -> pd.DataFrame:
    from components.opmodel.store import save_store

    bf16 = synthetic_gemm(catalog, gamma, GPUS)
    gemm = pd.concat([bf16, bf16.assign(dtype="fp8", latency_us=bf16["latency_us"] * 0.6)], ignore_index=True)
    gemm = gemm.assign(latency_min_us=gemm["latency_us"], latency_max_us=gemm["latency_us"]).sort_values(
        ["device_id", "dtype", "M", "N", "K"], kind="mergesort"
    )
    save_store({"gemm": gemm.reset_index(drop=True)}, folder)
    return gemm


def _answers(engine, spec, shape: dict) -> tuple:
    times = engine.predict("gemm", "bf16", shape, spec)
    return times.duration_us, times.lo, times.hi, list(times.tier), list(times.support)


def _assert_same(a: tuple, b: tuple) -> None:
    for x, y in zip(a[:3], b[:3], strict=True):
        np.testing.assert_array_equal(x, y)
    assert a[3:] == b[3:]


def test_a_one_gpu_question_reads_only_that_gpus_rows_and_answers_as_the_whole_store(
    catalog, tmp_path: Path
) -> None:
    from components.opmodel.engine import OpEngine

    gemm = _store(catalog, tmp_path / "store")
    split = OpEngine.from_store(tmp_path / "store", None, _model(), cache_dir=tmp_path / "cache")
    whole = OpEngine.from_store(tmp_path / "store", None, _model())
    assert split.measured.groups.loaded_rows == 0  # opening the engine reads no rows
    assert split.measured.devices() == whole.measured.devices() == set(GPUS)
    shape = {"M": SIZES, "N": 3000.0, "K": 4096.0}  # between measured sites: interpolated
    h100 = catalog.get("h100-sxm")
    assert set(split.raw_predict("gemm", "bf16", shape, h100).tier) == {"measured"}
    own = int(((gemm["device_id"] == "h100-sxm") & (gemm["dtype"] == "bf16")).sum())
    assert split.measured.groups.loaded_rows == own < len(gemm)
    # the monotone envelope also asks smaller shapes, off the measured sites: the relatives answer those, so
    # the bf16 rows of every GPU are read then -- and no fp8 row
    _assert_same(_answers(split, h100, shape), _answers(whole, h100, shape))
    bf16 = int((gemm["dtype"] == "bf16").sum())
    assert split.measured.groups.loaded_rows == bf16 < len(gemm)
    # a GPU not in the store answers from its relatives alike
    l40s = catalog.get("l40s")
    _assert_same(_answers(split, l40s, shape), _answers(whole, l40s, shape))
    assert split.measured.groups.loaded_rows == bf16


def _split_folders(cache: Path) -> list[str]:
    """The store splits in ``cache`` (the envelope's saved lattices live beside them: ``lattice_cache``)."""
    from components.opmodel.lattice_cache import LATTICES_DIR

    return sorted(p.name for p in cache.iterdir() if p.name != LATTICES_DIR)


def test_the_split_is_written_once_and_a_rewritten_store_gets_a_new_one(catalog, tmp_path: Path) -> None:
    from components.opmodel.engine import OpEngine

    _store(catalog, tmp_path / "store")
    cache = tmp_path / "cache"
    first = OpEngine.from_store(tmp_path / "store", None, _model(), cache_dir=cache)
    (folder,) = cache.iterdir()
    stamp = (folder / "index.json").stat().st_mtime_ns
    h100, shape = catalog.get("h100-sxm"), {"M": SIZES, "N": 4096.0, "K": 4096.0}
    expected = _answers(first, h100, shape)
    assert first.measured.groups.loaded_rows > 0 and any((folder / "tables").iterdir())
    again = OpEngine.from_store(tmp_path / "store", None, _model(), cache_dir=cache)
    assert _split_folders(cache) == [folder.name]
    assert (folder / "index.json").stat().st_mtime_ns == stamp
    # the tables the first engine built were saved: the second answers alike without reading a row
    _assert_same(_answers(again, h100, shape), expected)
    assert again.measured.groups.loaded_rows == 0
    assert again.measured.table("gemm", "h100-sxm", "bf16", None).spec is h100
    _store(catalog, tmp_path / "store", gamma=0.5)  # new measurements: slower on the slower GPUs
    renewed = OpEngine.from_store(tmp_path / "store", None, _model(), cache_dir=cache)
    assert len(_split_folders(cache)) == 2
    whole = OpEngine.from_store(tmp_path / "store", None, _model())
    a100 = catalog.get("a100-sxm4-80gb")
    _assert_same(_answers(renewed, a100, shape), _answers(whole, a100, shape))
    assert not np.array_equal(_answers(renewed, a100, shape)[0], _answers(first, a100, shape)[0])


def test_a_question_answered_from_saved_tables_loads_no_pandas(catalog, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from components.opmodel.engine import OpEngine
    from components.platform.config import PROJECT_ROOT

    _store(catalog, tmp_path / "store")
    shape = {"M": [1, 64, 4096], "N": 3000, "K": 4096}
    warm = OpEngine.from_store(tmp_path / "store", cache_dir=tmp_path / "cache")
    expected = warm.predict("gemm", "bf16", shape, catalog.get("h100-sxm")).duration_us.tolist()
    code = (
        "import json, sys\nfrom components.devices.catalog import load_catalog\n"
        "from components.opmodel.engine import OpEngine\n"
        f"engine = OpEngine.from_store({str(tmp_path / 'store')!r}, cache_dir={str(tmp_path / 'cache')!r})\n"
        f"times = engine.predict('gemm', 'bf16', {shape!r}, load_catalog().get('h100-sxm'))\n"
        "print(json.dumps({'pandas': 'pandas' in sys.modules, 'us': times.duration_us.tolist(), "
        "'rows': engine.measured.groups.loaded_rows}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"pandas": False, "us": expected, "rows": 0}


def test_a_split_removed_under_its_reader_is_written_again(catalog, tmp_path: Path) -> None:
    """Another process's cache trim (``cache_budget.trim_folders``: a bench splits each fold's store) may
    remove a split a reader still reads group by group: the next group it reads writes the split again from
    its store (the same files), the same rows as before the loss."""
    import shutil

    from components.opmodel.store_cache import open_split

    _store(catalog, tmp_path / "store")
    cache = tmp_path / "cache"
    measured, _, _ = open_split(tmp_path / "store", cache, ("gemm",), ())
    first, *rest = list(measured)
    expected = {key: measured[key].copy() for key in rest}
    measured = open_split(tmp_path / "store", cache, ("gemm",), ())[0]
    assert len(measured[first]) > 0  # one group read, the others not yet
    (folder,) = _split_folders(cache)
    shutil.rmtree(cache / folder)
    for key in rest:
        pd.testing.assert_frame_equal(measured[key], expected[key])
    assert (cache / folder / "index.json").is_file()
