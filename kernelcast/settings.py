"""Re-export of ``components.platform.config`` for the CLI.

Settings live in components/, the bottom layer.
"""

from components.platform.config import DEFAULT_DATASETS_DIR, PROJECT_ROOT, Settings, get_settings

__all__ = ["DEFAULT_DATASETS_DIR", "PROJECT_ROOT", "Settings", "get_settings"]
