"""kernelcast: predict GPU kernel performance from source or op + shapes and a GPU's spec."""

__version__ = "0.1.0"
