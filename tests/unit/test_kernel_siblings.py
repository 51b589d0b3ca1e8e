"""The tabular model's kernel siblings (components/models/kernel_siblings.py) on real catalog GPUs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from components.models.kernel_siblings import KernelSiblings, apply


def _train() -> tuple[pd.DataFrame, np.ndarray]:
    rows = pd.DataFrame(
        {
            "kernel_id": ["k1", "k1", "k1", "k2", "k3"],
            "device_id": ["a100-pcie-40gb", "a100-pcie-40gb", "v100-pcie-32gb", "v100-pcie-32gb", "h100-sxm"],
            "family": ["linear", "linear", "linear", "linear", "softmax"],
            "duration_us": [90.0, 110.0, 300.0, 40.0, 7.0],
        }
    )
    return rows, np.array([50.0, 50.0, 150.0, 20.0, 5.0])


def test_a_kernel_of_the_gpus_generation_is_carried_by_the_base_ratio():
    siblings = KernelSiblings.fit(*_train())
    asked = pd.DataFrame(
        {
            "kernel_id": ["k1", "k2", "k1"],
            "device_id": ["a100-pcie-80gb", "a100-pcie-80gb", "a100-pcie-40gb"],
            "family": ["linear", "linear", "linear"],
        }
    )
    carried, source = siblings.carry(asked, np.array([40.0, 40.0, 50.0]))
    assert carried[0] == pytest.approx(100.0 * 40.0 / 50.0)  # the median of A100-40GB's repeats, carried
    assert source[0] == "a100-pcie-40gb"
    assert np.isnan(carried[1])  # only a Volta GPU measured k2: another generation answers nothing
    assert np.isnan(carried[2])  # a GPU the model saw keeps the model's answer


def test_apply_replaces_only_carried_rows_and_never_beats_the_roofline(tmp_path):
    siblings = KernelSiblings.fit(*_train())
    siblings.save(tmp_path)
    loaded = KernelSiblings.load(tmp_path)
    assert loaded is not None and len(loaded.table) == len(siblings.table)
    asked = pd.DataFrame(
        {"kernel_id": ["k3", "k9"], "device_id": ["h200", "h200"], "family": ["softmax"] * 2}
    )
    model = np.array([20.0, 30.0])
    # H200's base for k3 is tiny: the carried 7 x 1 / 5 = 1.4 us is lifted to its roofline (base - floor)
    out, hit = apply(loaded, asked, model, np.array([1.0, 4.0]), np.array([0.5, 0.5]))
    assert hit.tolist() == [True, False]
    assert out[0] == pytest.approx(max(7.0 * 1.0 / 5.0, 0.5))
    assert out[1] == 30.0
    assert KernelSiblings.load(tmp_path / "none") is None


def test_a_far_gpu_of_the_generation_carries_nothing():
    # H20 is Hopper too, but a quarter-rate part (spec distance ~5 from H800): its GEMMs carry at 31-49%
    train = pd.DataFrame(
        {"kernel_id": ["k4"], "device_id": ["h20"], "family": ["gemm"], "duration_us": [50.0]}
    )
    siblings = KernelSiblings.fit(train, np.array([10.0]))
    asked = pd.DataFrame({"kernel_id": ["k4"], "device_id": ["h800"], "family": ["gemm"]})
    carried, _ = siblings.carry(asked, np.array([2.0]))
    assert np.isnan(carried[0])
