"""The package version, read by the build backend."""

__all__ = ["__version__"]

__version__ = "0.1.0"
