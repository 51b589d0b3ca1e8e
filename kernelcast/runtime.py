"""Re-export of ``components.runtime`` for the CLI (environment and the one Ray start-up)."""

from components.runtime import TELEMETRY_OFF, configure_environment, ensure_ray

init_ray = ensure_ray  # the CLI's historical name

__all__ = ["TELEMETRY_OFF", "configure_environment", "ensure_ray", "init_ray"]
