"""Moved to ``components.models.cuda_estimate`` (the static roofline estimate of a CUDA kernel); this
name stays for callers above models that import it from here."""

from components.models.cuda_estimate import KernelEstimate, estimate_kernel, launch_dims  # noqa: F401
