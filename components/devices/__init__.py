"""GPU device catalog: specs as data (catalog.yaml) and name resolution for every dataset spelling."""

from components.devices.aiconfigurator_sheet import compare_with_catalog, spec_from_aiconfigurator_sheet
from components.devices.catalog import (
    DEFAULT_CATALOG_PATH,
    PRECISIONS,
    Catalog,
    CatalogError,
    DeviceSpec,
    UnknownDeviceError,
    device_feature_vector,
    load_catalog,
)
from components.devices.user_specs import (
    SpecError,
    default_user_devices_dir,
    read_spec_file,
    resolve_spec,
    spec_from_mapping,
)
from components.physics.dtypes import precision_of

__all__ = [
    "DEFAULT_CATALOG_PATH",
    "PRECISIONS",
    "Catalog",
    "CatalogError",
    "DeviceSpec",
    "SpecError",
    "UnknownDeviceError",
    "compare_with_catalog",
    "default_user_devices_dir",
    "device_feature_vector",
    "load_catalog",
    "precision_of",
    "read_spec_file",
    "resolve_spec",
    "spec_from_aiconfigurator_sheet",
    "spec_from_mapping",
]
