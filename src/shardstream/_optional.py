"""Lazy imports of optional dependencies, with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from shardstream.errors import MissingDependencyError

__all__ = ["require"]


def require(module: str, *, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise an error saying which shardstream extra provides it.

    Args:
        module: The dotted module name to import, e.g. ``"PIL.Image"``.
        extra: The extra of shardstream that installs it, e.g. ``"images"``.
        purpose: What the module is needed for, shown in the error.

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: The module is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{purpose} needs the Python module {module!r}, which is not installed. "
            f"Install it with: pip install 'shardstream[{extra}]'"
        ) from exc
