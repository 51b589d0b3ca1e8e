"""Where a collective's bytes travel: inside the GPU-to-GPU link domain, or over the scale-out network.

A system joins its GPUs in one link domain (NVLink: an HGX board's 8 GPUs; a GB200/GB300 NVL72 rack's 72) and
joins domains by a network, one NIC per GPU (ConnectX-7: 400 Gb/s = 50 GB/s per direction; ConnectX-8:
100 GB/s). A group of ``n`` GPUs is laid out in whole domains of ``g = min(n, domain)`` GPUs each.

- **Ring all-reduce** over ``n > domain`` GPUs: NCCL runs one ring per channel and spreads the channels over
  the domain's NICs, so each ring leaves a domain once and the domain's ``g`` NICs together carry every ring's
  ``2(n-1)/n`` of the message: the per-GPU ring rate is ``min(link, g x network)`` (A100 with 8 x 200 Gb/s:
  ~200 GB/s, the bus bandwidth nccl-tests reaches across DGX A100 nodes).
- **All-to-all** (expert-parallel dispatch/combine) over ``n > domain``: each GPU sends ``1/n`` of its buffer
  to every other GPU; the ``(n - g)/n`` bound for other domains leave through its own NIC, the ``(g-1)/n``
  for its domain over the link, at once: time = max of the two. No ring aggregates NICs here.

``link_rate_gbps`` gives the effective per-GPU rate of the collective's link bytes (the bytes a one-domain
collective puts on each GPU's link, ``physics.allreduce.work``): dividing those bytes by it gives the times
above. A GPU spec is duck-typed: ``link_gbps`` (None: PCIe), ``nvlink_domain_gpus`` and ``network_gbps``
(None: an 8-GPU node on a 400 Gb/s NIC, assumed and said so by ``domain_note``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

DEFAULT_DOMAIN_GPUS = 8  # a node: an HGX board, or 8 PCIe GPUs behind one host
DEFAULT_NETWORK_GBPS = 50.0  # ConnectX-7 NDR 400 Gb/s per GPU per direction
PATTERNS = ("allreduce", "alltoall")


def domain_of(spec: Any) -> tuple[int, float]:
    """(GPUs per link domain, network GB/s per GPU per direction) of ``spec``, defaults where absent."""
    domain = getattr(spec, "nvlink_domain_gpus", None) or DEFAULT_DOMAIN_GPUS
    network = getattr(spec, "network_gbps", None) or DEFAULT_NETWORK_GBPS
    return int(domain), float(network)


def domain_note(spec: Any) -> str | None:
    """What was assumed about ``spec``'s domain and network (None when the catalog gives both)."""
    defaults = (
        ("nvlink_domain_gpus", "an NVLink domain of", DEFAULT_DOMAIN_GPUS),
        ("network_gbps", "a network of GB/s per GPU", DEFAULT_NETWORK_GBPS),
    )
    missing = [f"{text} {value:g}" for field, text, value in defaults if not getattr(spec, field, None)]
    return f"{getattr(spec, 'name', spec)}: {' and '.join(missing)} assumed" if missing else None


def link_rate_gbps(spec: Any, link_gbps: float, gpus: Any, pattern: str = "allreduce") -> np.ndarray:
    """Effective per-GPU rate (GB/s) of a ``pattern`` collective's link bytes over ``gpus`` GPUs on ``spec``
    whose in-domain link runs ``link_gbps`` per direction; ``link_gbps`` itself where the group fits one
    domain. Never above ``link_gbps``: crossing the network only slows a collective."""
    if pattern not in PATTERNS:
        raise ValueError(f"collective pattern {pattern!r}: choose one of {', '.join(PATTERNS)}")
    n = np.maximum(np.asarray(gpus, dtype="float64"), 1.0)
    domain, network = domain_of(spec)
    g = np.minimum(n, float(domain))
    crosses = n > domain
    if pattern == "allreduce":
        rate = np.where(crosses, np.minimum(link_gbps, g * network), link_gbps)
    else:
        # bytes (n-1)/n of the buffer: (g-1)/n on the link, (n-g)/n on the NIC, both at once
        with np.errstate(divide="ignore", invalid="ignore"):
            time = np.maximum((g - 1.0) / n / link_gbps, (n - g) / n / network)
            rate = np.where(crosses, (n - 1.0) / n / time, link_gbps)
    return np.minimum(rate, link_gbps)
