"""Re-export of ``components.platform.runtime`` for the CLI (environment and the one Ray start-up)."""

from components.platform.runtime import TELEMETRY_OFF, configure_environment, ensure_ray

init_ray = ensure_ray  # the CLI's historical name

__all__ = ["TELEMETRY_OFF", "configure_environment", "ensure_ray", "init_ray"]
