"""What a GPU can reach below its datasheet: its board power's tensor rate and its SMs' DRAM feed.

Two limits no op tier sees on a GPU it has no kernels of, both learned from measured LLM steps:

- **Power cap (tensor pipes).** A GPU whose board power cannot feed its tensor cores at the boost clock runs
  them at the clock its power allows: the L40 and the RTX 6000 Ada (142 Ada SMs at 300 W) reach in
  PipeWeave's prefills about the tensor rate of the L20 (92 SMs, 275 W), about half and a third of their
  datasheet peaks, while the H20 (78 quarter-rate Hopper SMs at 400 W) runs near its peak. The energy of a
  tensor FLOP is a property of the SM design (compute capability): learned per design as the lowest watts
  per sustained bf16 tensor TFLOP/s any measured GPU of that design showed (:func:`tensor_energy`), it sets
  the clock share ``min(1, tdp / (bf16 peak x energy))`` at which every tensor pipe of the GPU runs (a clock
  slows every dtype alike). A design nobody measured is not capped.
- **SM feed (DRAM).** A GPU with few SMs for its DRAM cannot keep its DRAM busy: the H20 streams 4 TB/s with
  78 SMs and its decode steps take 2.1x their bandwidth floor where the H100's take 1.4x. Learned as the most
  DRAM bytes per SM per clock any measured GPU streamed in a decode step (:func:`sm_bytes_per_clock`), it sets
  the reachable DRAM rate ``min(dram, SMs x clock x that figure)`` -- on the SM designs (compute
  capabilities) the measured steps cover only. What an SM keeps in flight per memory latency (Little's law)
  is a property of its SM and memory design, and a whole-step figure is only a lower bound of it, so an
  older design's figure says nothing of a newer one's: a design nobody measured is not capped (a Blackwell
  B200 needs 27.5 bytes per SM per clock for its 8 TB/s; the Hopper figure held it at 3.5 TB/s).
  The figure is pooled over the measured designs rather than learned per design: per design, a design's
  whole-step maximum holds its own GPUs at their own whole-step rate, and the maximum over the design's best
  share of its DRAM rate (an issue rate without the step's non-DRAM time) lets the composition lose the
  starved GPUs' non-DRAM time; both scored worse on the PipeWeave serving bench (``docs/serving-gate.md``).

:meth:`GpuLimits.bound` raises an op's time to its work at those reachable rates; a measured kernel of the GPU
is left as measured (it is what the GPU reached). Rates derived from a bounded time stay below the datasheet
peaks (the bound only lengthens times) and the time stays non-decreasing in every size (the bound is the
op's work, itself non-decreasing, times a per-GPU constant).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _design(spec: Any) -> str:
    return str(getattr(spec, "compute_capability", "") or "")


def _bf16_peak(spec: Any) -> float | None:
    peaks = getattr(spec, "peak_tflops", None)
    value = getattr(peaks, "bf16_tensor", None) if peaks is not None else None
    return float(value) if value else None


def sm_clocks(spec: Any) -> float | None:
    """SMs x boost clock in GHz (bytes per SM-clock x this = GB/s); None where the catalog lacks either."""
    sms, mhz = getattr(spec, "sms", None), getattr(spec, "boost_clock_mhz", None)
    return float(sms) * float(mhz) * 1e-3 if sms and mhz else None


@dataclass(frozen=True)
class GpuLimits:
    """Learned reachable rates per SM design: watts per sustained bf16 tensor TFLOP/s and DRAM bytes per
    SM-clock (a design without either is not limited by it), and what they were learned on."""

    watts_per_tflops: Mapping[str, float] = field(default_factory=dict)
    bytes_per_sm_clock: Mapping[str, float] = field(default_factory=dict)
    source: str = ""

    def __bool__(self) -> bool:
        return bool(self.watts_per_tflops) or bool(self.bytes_per_sm_clock)

    def tensor_slowdown(self, spec: Any) -> float:
        """Datasheet tensor rate / power-capped rate (>= 1; 1 where the design or the board power is
        unknown)."""
        share = self.tensor_share(spec)
        return 1.0 if share is None else 1.0 / share

    def tensor_share(self, spec: Any) -> float | None:
        """The share of its datasheet tensor rate ``spec`` reaches under its power cap (<= 1); None where its
        design has no learned energy or the catalog lacks its board power."""
        energy, tdp, peak = (
            self.watts_per_tflops.get(_design(spec)),
            getattr(spec, "tdp_w", None),
            _bf16_peak(spec),
        )
        if not energy or not tdp or not peak:
            return None
        return min(1.0, float(tdp) / (peak * float(energy)))

    def dram_slowdown(self, spec: Any) -> float:
        """Datasheet DRAM rate / the rate its SMs can issue (>= 1; 1 where its design has no learned feed or
        the catalog lacks its SMs or clock)."""
        feed, clocks = self.bytes_per_sm_clock.get(_design(spec)), sm_clocks(spec)
        if not feed or not clocks:
            return 1.0
        return max(1.0, float(spec.dram_gbps) / (float(feed) * clocks))

    def bound(
        self,
        times_us: np.ndarray,
        tensor_us: np.ndarray,
        memory_us: np.ndarray,
        spec: Any,
        measured: np.ndarray | bool = False,
        rest_us: np.ndarray | None = None,
    ) -> np.ndarray:
        """``times_us`` no shorter than their tensor-pipe work (``tensor_us``: speed of light at the datasheet
        peak; 0 for work off the tensor pipes) at the power-capped rate and their DRAM bytes (``memory_us``)
        at the SM-fed rate; ``measured`` rows (the GPU's own measured kernels) as they are.

        ``rest_us``: on the rows no kernel of the GPU measured (NaN elsewhere), the op's time without its
        tensor work (its DRAM and link times at the roofline's fixed efficiencies). On a GPU whose design has
        a learned energy such a row is then no slower than that or its tensor work at the power-capped rate,
        whichever is longer (and, as every row, no faster than the reachable rates): the power cap replaces
        the compute efficiency the op tier assumed (the roofline's fixed 70%, or a relative's carried by the
        ratio of datasheet peaks) -- a large GEMM's shortfall on an H100 is its clock under the power cap,
        which the 400 W H20 does not hit (the transfer tier carried the H200's prefill to the H20 26-33% too
        slow). Every term is a size-monotone time, and min / max keep that."""
        tensor = np.asarray(tensor_us, "float64")
        floor = np.maximum(
            tensor * self.tensor_slowdown(spec), np.asarray(memory_us, "float64") * self.dram_slowdown(spec)
        )
        times = np.asarray(times_us, dtype="float64")
        out = np.where(measured, times, np.maximum(times, floor))
        if rest_us is None or self.tensor_share(spec) is None:
            return out
        rest = np.asarray(rest_us, dtype="float64")
        swap = np.isfinite(rest) & (tensor > 0) & ~np.asarray(measured, bool)
        return np.where(swap, np.maximum(floor, np.minimum(times, np.where(swap, rest, 0.0))), out)

    def notes(self, spec: Any) -> list[str]:
        """One line per limit that binds on ``spec`` (what its answers state)."""
        out = []
        tensor, dram = self.tensor_slowdown(spec), self.dram_slowdown(spec)
        name = getattr(spec, "name", getattr(spec, "id", "the GPU"))
        if tensor > 1.0:
            out.append(
                f"power cap: {name}'s tensor cores reach {1 / tensor:.0%} of their datasheet rate at "
                f"{spec.tdp_w:g} W ({self.watts_per_tflops[_design(spec)]:.2f} W per sustained TFLOP/s, "
                f"the lowest of its SM design {_design(spec)} in {self.source or 'the measured steps'}); its "
                "unmeasured compute-bound ops are answered at that rate"
            )
        if dram > 1.0:
            out.append(
                f"SM feed: {name}'s {spec.sms} SMs issue at most {float(spec.dram_gbps) / dram:.0f} GB/s "
                f"of its {float(spec.dram_gbps):g} GB/s DRAM "
                f"({self.bytes_per_sm_clock[_design(spec)]:.1f} bytes per SM per clock, the most any GPU "
                f"streamed in {self.source or 'the measured steps'}, which cover its SM design "
                f"{_design(spec)}); its unmeasured ops are answered at no more than that rate"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "watts_per_tflops": {k: round(float(v), 6) for k, v in sorted(self.watts_per_tflops.items())},
            "bytes_per_sm_clock": {k: round(float(v), 6) for k, v in sorted(self.bytes_per_sm_clock.items())},
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> GpuLimits:
        if not data:
            return cls()
        watts = _per_design(data, "watts_per_tflops")
        feed = data.get("bytes_per_sm_clock") or {}
        if isinstance(feed, int | float):
            # constants written when the feed was one figure for every design (a promoted model's own file):
            # it holds the designs the same measured steps covered, those with an energy
            feed = dict.fromkeys(watts, feed)
        return cls(
            watts,
            _per_design({"bytes_per_sm_clock": feed}, "bytes_per_sm_clock"),
            str(data.get("source", "")),
        )


def _per_design(data: Mapping[str, Any], key: str) -> dict[str, float]:
    """``data[key]`` as figures per SM design (compute capability); anything else is refused by name."""
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise ValueError(
            f"gpu_limits.{key}: expected figures per SM design (compute capability), got {value!r}; "
            "refit them with `python -m components.deployments.fit_constants --limits`"
        )
    try:
        return {str(k): float(v) for k, v in value.items()}
    except (TypeError, ValueError) as exc:
        raise ValueError(f"gpu_limits.{key}: a figure per SM design is not a number: {value!r}") from exc


def tensor_energy(
    designs: np.ndarray,
    tdp_w: np.ndarray,
    bf16_tflops: np.ndarray,
    tensor_sol_us: np.ndarray,
    step_us: np.ndarray,
) -> dict[str, float]:
    """Per SM design: the lowest watts per sustained tensor TFLOP/s over measured steps (a step's sustained
    rate: its tensor ops' work over its whole measured time -- a lower bound of the rate its tensor cores ran
    at; ``tensor_sol_us``: that work at the datasheet bf16 peak ``bf16_tflops``)."""
    sustained = (
        np.asarray(bf16_tflops, "float64") * np.asarray(tensor_sol_us, "float64") / np.asarray(step_us)
    )
    watts = np.asarray(tdp_w, "float64") / sustained
    out: dict[str, float] = {}
    for design, w in zip(np.asarray(designs).astype(str), watts, strict=True):
        if design and np.isfinite(w) and w > 0:
            out[design] = min(out.get(design, np.inf), float(w))
    return out


def sm_bytes_per_clock(
    designs: np.ndarray,
    dram_gbps: np.ndarray,
    clocks: np.ndarray,
    memory_sol_us: np.ndarray,
    step_us: np.ndarray,
) -> dict[str, float]:
    """The most DRAM bytes per SM per clock streamed in measured steps (a step's bytes at the datasheet rate
    take ``memory_sol_us``; ``clocks``: SMs x GHz; a lower bound of what one SM keeps in flight), for each SM
    design (``designs``, per step) the steps cover: a design no step measured gets no figure (not capped)."""
    design = np.asarray(designs).astype(str)
    per_clock = (
        np.asarray(dram_gbps, "float64") * np.asarray(memory_sol_us, "float64") / np.asarray(step_us)
    ) / np.asarray(clocks, "float64")
    seen = np.isfinite(per_clock) & (per_clock > 0) & (design != "")
    if not seen.any():
        return {}
    most = float(per_clock[seen].max())
    return {str(d): most for d in np.unique(design[seen])}
