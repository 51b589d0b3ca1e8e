"""Evaluation plots (PNG, matplotlib Agg): predicted vs measured, error CDF per GPU, error by GPU (with its
table as CSV), roofline chart.

Each function takes the evaluated frame (rows + ``pred_*`` columns, see ``harness.Evaluation``)
and writes one file; ``write_plots`` writes every plot the frame has data for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.metrics import relative_errors

MAX_DEVICES_PER_PLOT = 8  # more lines than this are unreadable; the largest devices are kept


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # headless: CI and Ray workers have no display
    import matplotlib.pyplot as plt

    return plt


def _pairs(frame: pd.DataFrame, target: str) -> pd.DataFrame:
    column = f"pred_{target}"
    if target not in frame.columns or column not in frame.columns:
        return pd.DataFrame(columns=["device_id", "true", "pred"])
    pairs = pd.DataFrame(
        {
            "device_id": frame["device_id"].astype(str),
            "true": pd.to_numeric(frame[target], errors="coerce"),
            "pred": pd.to_numeric(frame[column], errors="coerce"),
        }
    )
    return pairs[
        np.isfinite(pairs["true"]) & np.isfinite(pairs["pred"]) & (pairs["true"] > 0) & (pairs["pred"] > 0)
    ]


PerDevice = list[tuple[str, pd.DataFrame]]


def _device_plot(
    frame: pd.DataFrame,
    target: str,
    path: Path,
    size: tuple[float, float],
    draw: Callable[[Any, pd.DataFrame, PerDevice], None],
) -> Path | None:
    """One figure of ``target``: ``draw(axes, every row's pairs, [(device, rows)] of the largest devices)``,
    saved to ``path``; None without rows."""
    pairs = _pairs(frame, target)
    if pairs.empty:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=size)
    devices = pairs["device_id"].value_counts().index[:MAX_DEVICES_PER_PLOT]
    draw(ax, pairs, [(device, pairs[pairs["device_id"] == device]) for device in devices])
    return _save(fig, plt, path)


def predicted_vs_measured(frame: pd.DataFrame, target: str, path: Path) -> Path | None:
    """Log-log scatter with the y = x line and +-10% band, one colour per GPU."""

    def draw(ax: Any, pairs: pd.DataFrame, per_device: PerDevice) -> None:
        for device, rows in per_device:
            ax.scatter(rows["true"], rows["pred"], s=6, alpha=0.5, label=f"{device} ({len(rows)})")
        low, high = float(pairs[["true", "pred"]].min().min()), float(pairs[["true", "pred"]].max().max())
        line = np.geomspace(low, high, 50)
        ax.plot(line, line, "k-", lw=1)
        ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.2, label="±10%")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=f"measured {target}",
            ylabel=f"predicted {target}",
            title=f"{target}: predicted vs measured",
        )
        ax.legend(fontsize=7, loc="upper left")

    return _device_plot(frame, target, path, (6, 6), draw)


def error_cdf(frame: pd.DataFrame, target: str, path: Path) -> Path | None:
    """Cumulative share of rows under each relative error, one curve per GPU."""

    def draw(ax: Any, _pairs: pd.DataFrame, per_device: PerDevice) -> None:
        for device, rows in per_device:
            errors = np.sort(relative_errors(rows["true"], rows["pred"]))
            ax.step(errors, np.arange(1, errors.size + 1) / errors.size, where="post", label=device)
        ax.axvline(0.10, color="grey", ls="--", lw=1)
        ax.set(
            xscale="log",
            xlabel="relative error",
            ylabel="share of kernels",
            ylim=(0, 1),
            title=f"{target}: error CDF per GPU",
        )
        ax.legend(fontsize=7, loc="lower right")

    return _device_plot(frame, target, path, (6, 4), draw)


def roofline_chart(frame: pd.DataFrame, path: Path) -> Path | None:
    """Measured and predicted GFLOP/s against arithmetic intensity under the most common GPU's roofline."""
    intensity_column = "arith_intensity" if "arith_intensity" in frame.columns else "f_arith_intensity"
    if "gflops" not in frame.columns or intensity_column not in frame.columns:
        return None
    rows = frame[pd.to_numeric(frame["gflops"], errors="coerce") > 0]
    intensity = pd.to_numeric(rows[intensity_column], errors="coerce")
    if "f_arith_intensity" in rows.columns:
        intensity = intensity.fillna(pd.to_numeric(rows["f_arith_intensity"], errors="coerce"))
    rows = rows[np.isfinite(intensity) & (intensity > 0)]
    if rows.empty:
        return None
    device = rows["device_id"].astype(str).value_counts().index[0]
    rows = rows[rows["device_id"].astype(str) == device]
    x = pd.to_numeric(rows[intensity_column], errors="coerce")
    if "f_arith_intensity" in rows.columns:
        x = x.fillna(pd.to_numeric(rows["f_arith_intensity"], errors="coerce"))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(x, rows["gflops"], s=8, alpha=0.6, label="measured")
    if "pred_gflops" in rows.columns:
        ax.scatter(x, rows["pred_gflops"], s=8, alpha=0.6, marker="x", label="predicted")
    bandwidth = (
        float(pd.to_numeric(rows.get("dev_dram_gbps"), errors="coerce").median())
        if "dev_dram_gbps" in rows
        else np.nan
    )
    peak = (
        float(pd.to_numeric(rows.get("f_peak_compute_flops"), errors="coerce").max() / 1e9)
        if "f_peak_compute_flops" in rows
        else np.nan
    )
    if np.isfinite(bandwidth) and np.isfinite(peak) and bandwidth > 0 and peak > 0:
        span = np.geomspace(max(float(x.min()) / 2, 1e-3), float(x.max()) * 2, 200)
        ax.plot(
            span, np.minimum(span * bandwidth, peak), "k-", lw=1.2, label=f"roofline ({bandwidth:.0f} GB/s)"
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="GFLOP/s",
        title=f"roofline: {device}",
    )
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def error_by_gpu_table(frame: pd.DataFrame, target: str = "duration_us") -> pd.DataFrame:
    """Per GPU: rows, mean and median absolute relative error, share within 10% (worst GPU first)."""
    pairs = _pairs(frame, target)
    error = (pairs["pred"] - pairs["true"]).abs() / pairs["true"]
    table = (
        pairs.assign(error=error, within_10=error <= 0.10)
        .groupby("device_id")
        .agg(
            n=("error", "size"),
            mape=("error", "mean"),
            median_ape=("error", "median"),
            within_10=("within_10", "mean"),
        )
        .sort_values("mape", ascending=False)
    )
    return table.reset_index()


def error_by_gpu(frame: pd.DataFrame, target: str, path: Path) -> Path | None:
    """Bar chart of the mean relative error per GPU (worst first), the table beside it as CSV."""
    table = error_by_gpu_table(frame, target)
    if table.empty:
        return None
    table.to_csv(Path(path).with_suffix(".csv"), index=False)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * len(table) + 2), 4))
    ax.bar(table["device_id"], 100 * table["mape"], color="tab:red", alpha=0.7)
    ax.set_ylabel(f"{target} mean |error| (%)")
    ax.set_title(f"{target}: error by GPU ({int(table['n'].sum())} rows)")
    ax.tick_params(axis="x", rotation=45)
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(
    frame: pd.DataFrame, out_dir: Path, targets: tuple[str, ...] = ("duration_us", "achieved_gbps", "gflops")
) -> list[Path]:
    """Every plot the evaluated frame has data for; returns the files written."""
    out_dir = Path(out_dir)
    written: list[Path | None] = []
    for target in targets:
        written.append(predicted_vs_measured(frame, target, out_dir / f"pred_vs_measured_{target}.png"))
        written.append(error_cdf(frame, target, out_dir / f"error_cdf_{target}.png"))
    written.append(roofline_chart(frame, out_dir / "roofline.png"))
    by_gpu = error_by_gpu(frame, "duration_us", out_dir / "error_by_gpu_duration_us.png")
    written += [by_gpu, by_gpu.with_suffix(".csv")] if by_gpu is not None else []
    return [p for p in written if p is not None]
