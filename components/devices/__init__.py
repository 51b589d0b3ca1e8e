"""GPU device catalog: specs as data (catalog.yaml) and name resolution for every dataset spelling."""

from components.devices.catalog import (
    DEFAULT_CATALOG_PATH,
    PRECISIONS,
    Catalog,
    CatalogError,
    DeviceSpec,
    PeakTflops,
    UnknownDeviceError,
    device_feature_vector,
    load_catalog,
    normalize_name,
)

__all__ = [
    "DEFAULT_CATALOG_PATH",
    "PRECISIONS",
    "Catalog",
    "CatalogError",
    "DeviceSpec",
    "PeakTflops",
    "UnknownDeviceError",
    "device_feature_vector",
    "load_catalog",
    "normalize_name",
]
