"""The physics' one error, in a module of its own: the dtype table (read by the CLI's help) needs it without
numpy, which the work records (``base.py``) import."""

from __future__ import annotations


class PhysicsError(ValueError):
    """An op the physics cannot cost (unknown family or dtype, missing dimension); the message names it."""
