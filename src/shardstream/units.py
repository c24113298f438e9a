"""Human-readable byte sizes such as ``'64mb'``, parsed to integers."""

from __future__ import annotations

import re

from shardstream.errors import ConfigurationError

__all__ = ["format_bytes", "parse_bytes"]

# Binary units, as the reference reads them: 'kb' is 1024 bytes.
_UNITS = {"b": 0, "kb": 1, "mb": 2, "gb": 3, "tb": 4, "pb": 5, "eb": 6, "zb": 7, "yb": 8}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_bytes(value: int | str, *, what: str = "size") -> int:
    """Return ``value`` as a number of bytes.

    Args:
        value: An int, a string of digits, or a number with a binary unit: ``'100b'``,
            ``'64kb'``, ``'1.5gb'`` (``kb`` is 1024 bytes, ``mb`` 1024**2, up to ``yb``).
        what: The argument's name, used in the error message.

    Returns:
        The size in bytes.

    Raises:
        ConfigurationError: The value is negative, not a number, or has an unknown unit.

    Example:
        >>> parse_bytes("64mb")
        67108864
    """
    if isinstance(value, bool):
        raise ConfigurationError(
            f"{what} must be a byte count or a string like '64mb', got {value!r}"
        )
    if isinstance(value, int):
        if value < 0:
            raise ConfigurationError(f"{what} must not be negative, got {value}")
        return value
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{what} must be a byte count or a string like '64mb', got {value!r}"
        )
    match = _PATTERN.match(value.lower())
    if match is None or (match.group(2) or "b") not in _UNITS:
        raise ConfigurationError(
            f"{what}={value!r} is not a size: write a byte count or a number with one of the "
            f"units {', '.join(_UNITS)} (binary: 1kb = 1024 bytes), e.g. '64mb'"
        )
    number, unit = match.group(1), match.group(2) or "b"
    scaled = float(number) * 1024 ** _UNITS[unit]
    if not scaled.is_integer() and "." in number:
        scaled = int(scaled)
    return int(scaled)


def format_bytes(size: int) -> str:
    """``size`` in bytes, readably, in the binary units :func:`parse_bytes` reads back.

    Example:
        >>> format_bytes(67108864)
        '64.0 MiB'
    """
    if abs(size) < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} PiB"
