"""The ``amd-source`` split: benchmark_hub's HIP kernels on the AMD GPU, held out of training.

Leave-one-GPU-out for the AMD GPU(s) of benchmark_hub (the Radeon PRO W6600 today), on the tuning
configurations whose HIP source the static stage compiled (static.hip_table's hash-chosen sample,
``config_id`` in the feature table): train on those configurations as the other GPUs ran them, test
on the AMD GPU's rows of the same configurations. Every row of both sides carries the code's static
features, so the fold measures what they add (a table without them scores the very same rows); the
unseen-gpu split's W6600 fold, by contrast, trains on a 40k-row subsample of every source where the
1% of configurations with HIP features are ~30 rows. The bench reports it per kernel (``op=``)
beside the roofline.
"""

from __future__ import annotations

import pandas as pd

from components.evaluation.splits import Fold

SPLIT = "amd-source"
SOURCE = "benchmark_hub"


def amd_devices(table: pd.DataFrame) -> list[str]:
    """AMD GPUs with benchmark_hub rows (``dev_is_amd`` of the feature table)."""
    rows = table[table["source"].eq(SOURCE)]
    if "dev_is_amd" not in rows.columns:
        raise ValueError(
            "the feature table has no dev_is_amd column (rebuild it with `kernelcast features build`)"
        )
    return sorted(rows.loc[rows["dev_is_amd"].fillna(0) > 0, "device_id"].astype(str).unique())


def amd_source_split(table: pd.DataFrame, share: float | None = None) -> list[Fold]:
    """One fold per AMD GPU of benchmark_hub: its rows of the sampled configurations vs the NVIDIA GPUs' rows
    of the same configurations (no AMD GPU trains another: the fold is about a GPU never seen)."""
    from components.features.static.hip_table import HIP_CONFIG_SHARE, sampled_config_ids

    if "source" not in table.columns or not table["source"].eq(SOURCE).any():
        raise ValueError(f"no {SOURCE} rows in the feature table")
    if "config_id" not in table.columns:
        raise ValueError(
            "the feature table has no config_id column (rebuild it with `kernelcast features build`)"
        )
    devices = amd_devices(table)
    if not devices:
        raise ValueError(f"no AMD GPU among the {SOURCE} rows")
    hub = table[table["source"].eq(SOURCE) & table["config_id"].notna()]
    on_amd = hub[
        hub["device_id"].astype(str).isin(devices)
    ]  # drawn from the HIP rows, as the static stage draws
    kept = sampled_config_ids(
        zip(on_amd["program"].astype(str), on_amd["config_id"].astype(str), strict=True),
        HIP_CONFIG_SHARE if share is None else share,
    )
    chosen = pd.Series(
        [
            (p, c) in kept
            for p, c in zip(hub["program"].astype(str), hub["config_id"].astype(str), strict=True)
        ],
        index=hub.index,
    )
    folds = []
    for device in devices:
        on_device = hub["device_id"].astype(str).eq(device).to_numpy()
        test = hub.index[chosen.to_numpy() & on_device]
        train = hub.index[chosen.to_numpy() & ~hub["device_id"].astype(str).isin(devices).to_numpy()]
        folds.append(Fold(f"{SPLIT}:{device}", train, test))
    return folds


def kernel_scopes(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Per kernel (benchmark_hub's op: convolution_kernel, dedispersion_kernel) and per AMD GPU."""
    scopes = [(f"op={op}", rows) for op, rows in frame.groupby("op", sort=True)]
    scopes += [(f"device={d}", rows) for d, rows in frame.groupby("device_id", sort=True)]
    return scopes


__all__ = ["SPLIT", "amd_devices", "amd_source_split", "kernel_scopes"]
