from __future__ import annotations

import pytest

from shardstream.errors import ConfigurationError
from shardstream.units import format_bytes, parse_bytes

UNITS = ["b", "kb", "mb", "gb", "tb", "pb", "eb", "zb", "yb"]


@pytest.mark.parametrize("value", [0, 1, 4096, 2**40])
def test_ints_pass_through(value: int):
    assert parse_bytes(value) == value


@pytest.mark.parametrize(("power", "unit"), list(enumerate(UNITS)))
def test_units_are_binary(power: int, unit: str):
    assert parse_bytes(f"3{unit}") == 3 * 1024**power
    assert parse_bytes(f"3{unit.upper()}") == 3 * 1024**power


def test_64mb():
    assert parse_bytes("64mb") == 64 * 1024 * 1024


@pytest.mark.parametrize(("text", "expected"), [("1.5kb", 1536), ("0.5mb", 512 * 1024), ("7", 7)])
def test_fractions_and_bare_digits(text: str, expected: int):
    assert parse_bytes(text) == expected


def test_whitespace_and_case_are_ignored():
    assert parse_bytes("  10 KB ") == 10 * 1024


@pytest.mark.parametrize("value", ["", "abc", "10 parsecs", "-5", "5 k", "mb", "1,000"])
def test_bad_strings_are_refused_naming_the_value(value: str):
    with pytest.raises(ConfigurationError, match="size_limit="):
        parse_bytes(value, what="size_limit")


def test_negative_int_is_refused():
    with pytest.raises(ConfigurationError, match=r"size_limit must not be negative, got -1"):
        parse_bytes(-1, what="size_limit")


@pytest.mark.parametrize("value", [True, 1.5, None, b"64mb"])
def test_other_types_are_refused(value: object):
    with pytest.raises(ConfigurationError, match="cache_limit must be a byte count"):
        parse_bytes(value, what="cache_limit")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (64 << 20, "64.0 MiB"),
        (3 << 40, "3.0 TiB"),
        (5 << 50, "5.0 PiB"),
    ],
)
def test_format_bytes(size: int, text: str):
    assert format_bytes(size) == text
