"""Interop datasets, defined once and built identically in both virtual environments.

This module is imported by the test suite (shardstream's venv) and by ``ref_worker.py`` (the
reference's venv), so it may use only numpy, Pillow and the standard library.
"""

from __future__ import annotations

import io
import pickle
from decimal import Decimal
from typing import Any

import numpy as np

ALL_ENCODINGS = {
    "bytes": "bytes",
    "str": "str",
    "int": "int",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "str_int": "str_int",
    "str_float": "str_float",
    "str_decimal": "str_decimal",
    "nd_dynamic": "ndarray",
    "nd_dtype": "ndarray:float32",
    "nd_static": "ndarray:int16:2,3",
    "pil": "pil",
    "jpeg": "jpeg",
    "png": "png",
    "list_pil": "list[pil]",
    "list_jpeg": "list[jpeg]",
    "list_png": "list[png]",
    "jpeg_array": "jpeg_array",
    "jpegarray": "jpegarray",
    "json": "json",
    "pkl": "pkl",
}
# JPEG is lossy: these columns read back as images of the right size and mode, not the pixels.
LOSSY_COLUMNS = frozenset({"jpeg", "list_jpeg", "jpeg_array", "jpegarray"})
_DTYPES = ["uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32",
           "uint64", "int64", "float64"]  # fmt: skip


def _image(rng: np.random.Generator, mode: str = "RGB") -> Any:
    from PIL import Image

    height, width = int(rng.integers(1, 24)), int(rng.integers(1, 24))
    channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
    pixels = rng.integers(0, 256, (height, width, channels), np.uint8)
    return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)


def _jpeg_bytes(rng: np.random.Generator) -> bytes:
    out = io.BytesIO()
    _image(rng).save(out, format="JPEG")
    return out.getvalue()


def _all_encodings(i: int, rng: np.random.Generator) -> dict[str, Any]:
    dtype = _DTYPES[i % len(_DTYPES)]
    shape = tuple(int(d) for d in rng.integers(1, 5, int(rng.integers(1, 4))))
    if i % 7 == 3:
        shape = (300,)  # a dimension that needs a uint16 shape
    return {
        "bytes": rng.bytes(int(rng.integers(0, 50))),
        "str": "sample-" + "é✓" * i,
        "int": int(rng.integers(-(2**62), 2**62)),
        "int8": np.int8(rng.integers(-128, 128)),
        "int16": np.int16(rng.integers(-(2**15), 2**15)),
        "int32": np.int32(rng.integers(-(2**31), 2**31)),
        "int64": np.int64(rng.integers(-(2**62), 2**62)),
        "uint8": np.uint8(rng.integers(0, 256)),
        "uint16": np.uint16(rng.integers(0, 2**16)),
        "uint32": np.uint32(rng.integers(0, 2**32)),
        "uint64": np.uint64(rng.integers(0, 2**63)),
        "float16": np.float16(rng.normal()),
        "float32": np.float32(rng.normal()),
        "float64": np.float64(rng.normal()),
        "str_int": 10**40 + i,
        "str_float": float(rng.normal()),
        "str_decimal": Decimal(i) / Decimal(8),
        "nd_dynamic": (rng.normal(size=shape) * 100).astype(dtype),
        "nd_dtype": rng.normal(size=shape).astype(np.float32),
        "nd_static": rng.integers(-100, 100, (2, 3)).astype(np.int16),
        "pil": _image(rng, ("RGB", "L", "RGBA")[i % 3]),
        "jpeg": _image(rng),
        "png": _image(rng, ("RGB", "L", "RGBA")[i % 3]),
        "list_pil": [_image(rng) for _ in range(i % 3)],
        "list_jpeg": [_image(rng) for _ in range(1 + i % 2)],
        "list_png": [_image(rng) for _ in range(i % 3)],
        "jpeg_array": [_jpeg_bytes(rng) for _ in range(1 + i % 2)],
        "jpegarray": [_jpeg_bytes(rng)],
        "json": {"i": i, "tags": ["a", "b"][: i % 3], "nested": {"x": None, "y": 1.5}},
        "pkl": {"i": i, "tuple": (1, "two"), "set": frozenset({i})},
    }


def _simple(i: int, rng: np.random.Generator) -> dict[str, Any]:
    return {
        "id": i,
        "text": f"row {i} " + "x" * int(rng.integers(0, 200)),
        "vec": rng.normal(size=int(rng.integers(1, 40))).astype(np.float32),
    }


def _fixed(i: int, rng: np.random.Generator) -> dict[str, Any]:
    return {"id": i, "payload": rng.integers(0, 256, 100).astype(np.uint8)}


def _sized(i: int, rng: np.random.Generator, sizes: list[int]) -> dict[str, Any]:
    return {"id": i, "blob": rng.bytes(sizes[i % len(sizes)])}


def _table(i: int, rng: np.random.Generator) -> dict[str, Any]:
    return {"id": i, "name": f"name-{i}-" + "z" * int(rng.integers(0, 20)), "score": i / 4}


# Text and numbers that test quoting, escaping and number formatting in the text formats; no
# value holds ',', '|', a tab or a line break (the text formats cannot hold their delimiters).
_TEXTS = ["", "plain", 'quote " backslash \\ slash /', "é✓ ünïcode", "emoji 😀", "ctrl \x01\x7f",
          "single ' quote", '{"json": [1 2]}', "  spaces  ", "ß" * 50]  # fmt: skip
_FLOATS = [0.0, -0.0, 1e-300, 1e22, 1 / 3, float("inf"), -1.5, 2.5e-8, 123456789.125]


def _text(i: int, rng: np.random.Generator) -> dict[str, Any]:
    return {
        "id": (-1) ** i * 7 ** (i % 23),
        "text": _TEXTS[i % len(_TEXTS)] + ("z" * int(rng.integers(0, 30)) if i % 3 else ""),
        "score": _FLOATS[i % len(_FLOATS)],
    }


COLUMNS = {
    "all_encodings": ALL_ENCODINGS,
    "simple": {"id": "int", "text": "str", "vec": "ndarray"},
    "fixed": {"id": "int", "payload": "ndarray:uint8:100"},
    "sized": {"id": "int", "blob": "bytes"},
    "table": {"id": "int", "name": "str", "score": "float"},
    "text": {"id": "int", "text": "str", "score": "float"},
}


def make_samples(case: dict[str, Any]) -> list[dict[str, Any]]:
    """Build a case's samples from its seed; the same on every numpy >= 1.22."""
    rng = np.random.default_rng(case.get("seed", 0))
    kind = case["generator"]
    samples = []
    for i in range(case["count"]):
        if kind == "all_encodings":
            samples.append(_all_encodings(i, rng))
        elif kind == "simple":
            samples.append(_simple(i, rng))
        elif kind == "fixed":
            samples.append(_fixed(i, rng))
        elif kind == "sized":
            samples.append(_sized(i, rng, case["sizes"]))
        elif kind == "table":
            samples.append(_table(i, rng))
        elif kind == "text":
            samples.append(_text(i, rng))
        else:
            raise ValueError(kind)
    return samples


def normalize(value: Any) -> Any:
    """A plain, comparable form of a decoded value (arrays, numpy scalars and images included)."""
    if isinstance(value, dict):
        return {key: normalize(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize(item) for item in value]
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, tuple(value.shape), value.tobytes())
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.tobytes())
    if hasattr(value, "mode") and hasattr(value, "tobytes") and hasattr(value, "size"):
        return ("image", value.mode, tuple(value.size), value.tobytes())
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def dump(samples: list[dict[str, Any]], path: str) -> None:
    """Write normalized samples for the other side to compare (test data only, trusted)."""
    with open(path, "wb") as handle:
        pickle.dump([normalize(sample) for sample in samples], handle)
