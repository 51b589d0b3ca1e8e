"""Disk caches kept within a budget (``components.common.cache_budget``): the oldest-written files go first,
down to 3/4 of the budget, at most once per process and folder; store splits keep the newest few; a cache
under its budget is left untouched. Real files in a temp folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from components.common import cache_budget
from components.deployments import step_cache


def _file(folder: Path, name: str, size: int, mtime: int) -> Path:
    path = folder / name
    path.write_bytes(b"x" * size)
    os.utime(path, ns=(mtime, mtime))
    return path


def test_oldest_files_go_first_down_to_three_quarters(tmp_path):
    files = [_file(tmp_path, f"{i}.npy", 100, 1_000_000_000 * (i + 1)) for i in range(10)]  # 1,000 bytes
    other = _file(tmp_path, "keep.txt", 5_000, 1)  # another pattern: not this cache's, never counted
    removed = cache_budget.trim_files(tmp_path, max_bytes=800)
    left = sorted(p.name for p in tmp_path.glob("*.npy"))
    assert removed == 4 and left == [f"{i}.npy" for i in range(4, 10)]  # 600 bytes <= 3/4 of 800
    assert all(not p.exists() for p in files[:4]) and other.exists()


def test_trimmed_once_per_process_and_not_under_budget(tmp_path):
    for i in range(4):
        _file(tmp_path, f"{i}.npy", 100, i + 1)
    assert cache_budget.trim_files(tmp_path, max_bytes=400) == 0  # at the budget: nothing goes
    for i in range(4, 8):
        _file(tmp_path, f"{i}.npy", 100, i + 1)
    assert cache_budget.trim_files(tmp_path, max_bytes=400) == 0  # this process trimmed it already
    assert len(list(tmp_path.glob("*.npy"))) == 8


def test_store_splits_keep_the_newest(tmp_path):
    for i, name in enumerate(["a-gemm-with-x", "b-gemm-with-x", "c-gemm-with-x", "d-other"]):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, ns=(i + 1, i + 1))
    (tmp_path / ".e-gemm-with-x.tmp").mkdir()  # another writer's folder in progress
    assert cache_budget.trim_folders(tmp_path, "-gemm-with-x", keep=2) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".e-gemm-with-x.tmp",
        "b-gemm-with-x",
        "c-gemm-with-x",
        "d-other",
    ]


def test_step_cache_write_trims_its_folder(tmp_path, monkeypatch):
    """A step-model write over the budget removes the oldest models, never the one just written."""
    from components.deployments.stepmodel import StepModel

    monkeypatch.setattr(step_cache, "BUDGET_BYTES", 3_000)
    for i in range(6):
        _file(tmp_path, f"old{i}.npy", 1_000, i + 1)
    model = StepModel(
        tokens=np.array([1.0, 2.0]),
        linear_dec=np.array([1.0, 2.0]),
        linear_pre=np.array([1.0, 2.0]),
        head=np.array([1.0]),
        seqs=np.array([1.0]),
        ctx=np.array([1.0]),
        attn_dec=np.array([[1.0]]),
        attn_pre=np.array([[1.0], [2.0]]),
        pp_hop_us=0.0,
        layers=1,
        allreduces=0.0,
        dp=1,
    )
    step_cache.store(tmp_path, "new.npy", model)
    assert (tmp_path / "new.npy").is_file() and step_cache.load(tmp_path, "new.npy", StepModel) is not None
    assert sum(p.stat().st_size for p in tmp_path.glob("*.npy")) <= 3_000 * 3 // 4
