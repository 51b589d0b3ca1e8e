"""The op engine reads its physics from ``components.physics.roofline`` (one definition, on the floor above the
catalog so ingest and features can use it too); this name keeps ``components.opmodel.physics`` working."""

from components.physics.roofline import *  # noqa: F401,F403
from components.physics.roofline import __all__  # noqa: F401
