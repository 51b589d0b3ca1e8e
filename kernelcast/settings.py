"""Re-export of ``components.config`` for the CLI (settings live in components/, the bottom layer)."""

from components.config import DEFAULT_DATASETS_DIR, PROJECT_ROOT, Settings, get_settings

__all__ = ["DEFAULT_DATASETS_DIR", "PROJECT_ROOT", "Settings", "get_settings"]
