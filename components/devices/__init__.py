"""GPU device catalog: specs as data (catalog.yaml) and name resolution for every dataset spelling."""

from components.devices.aiconfigurator_sheet import compare_with_catalog, spec_from_aiconfigurator_sheet
from components.devices.catalog import (
    DEFAULT_CATALOG_PATH,
    PRECISIONS,
    Catalog,
    CatalogError,
    DeviceSpec,
    UnknownDeviceError,
    canonical_dtype,
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

__all__ = [
    "DEFAULT_CATALOG_PATH",
    "PRECISIONS",
    "Catalog",
    "CatalogError",
    "DeviceSpec",
    "SpecError",
    "UnknownDeviceError",
    "canonical_dtype",
    "compare_with_catalog",
    "default_user_devices_dir",
    "device_feature_vector",
    "load_catalog",
    "read_spec_file",
    "resolve_spec",
    "spec_from_aiconfigurator_sheet",
    "spec_from_mapping",
]
