"""Speed-of-light physics of ops on a GPU spec: the one definition of an op's work and roofline time.

It stands just above the catalog (it reads DeviceSpecs, nothing else of kernelcast), so every floor that needs
an op's FLOPs, bytes or roofline -- ingest computing a row's FLOPs, features, the op engine's tiers, deployments,
serving's plausibility bounds -- imports the same formulas.
"""
