from __future__ import annotations

import io
import json
import pickle
import re
import struct
import sys
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from PIL import Image

from shardstream.errors import (
    ConfigurationError,
    MissingDependencyError,
    SampleEncodingError,
    UnknownEncodingError,
)
from shardstream.format.encodings import (
    Encoding,
    encoding_names,
    get_encoding,
    images,
    register_encoding,
)
from shardstream.format.encodings.ndarray import DTYPE_CODES

NUMERIC = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
]
INTEGER = [name for name in NUMERIC if not name.startswith("float")]
FLOAT = [name for name in NUMERIC if name.startswith("float")]

# The dtype codes of the dynamic-dtype ndarray layout, as the format document lists them.
DOC_DTYPE_CODES = {
    "uint8": 8,
    "int8": 9,
    "uint16": 16,
    "int16": 17,
    "float16": 18,
    "uint32": 32,
    "int32": 33,
    "float32": 34,
    "uint64": 64,
    "int64": 65,
    "float64": 66,
}

BUILTIN_NAMES = [
    "bytes",
    "str",
    "int",
    *NUMERIC,
    "str_int",
    "str_float",
    "str_decimal",
    "ndarray",
    "pil",
    "jpeg",
    "png",
    "list[pil]",
    "list[jpeg]",
    "list[png]",
    "jpeg_array",
    "jpegarray",
    "json",
    "pkl",
]


def roundtrip(spec: str, value: Any) -> Any:
    encoding = get_encoding(spec)
    data = encoding.encode(value)
    if encoding.size is not None:
        assert len(data) == encoding.size
    return encoding.decode(data)


def image(mode: str = "RGB", size: tuple[int, int] = (5, 3), seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)


def png_bytes(img: Image.Image) -> bytes:
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def jpeg_bytes(img: Image.Image) -> bytes:
    out = io.BytesIO()
    img.save(out, format="JPEG")
    return out.getvalue()


# --- registry ------------------------------------------------------------------------------


def test_every_documented_encoding_is_registered():
    names = encoding_names()
    assert set(BUILTIN_NAMES) <= set(names)
    assert list(names) == sorted(names)


def test_encoding_names_is_read_only():
    names = encoding_names()
    with pytest.raises(TypeError):
        names["mine"] = lambda name, arg: None  # type: ignore[index]
    assert "mine" not in encoding_names()


@pytest.mark.parametrize("spec", ["int", "str", "ndarray:uint8:2,3", "list[png]", "pkl"])
def test_get_encoding_caches_and_keeps_the_full_name(spec: str):
    encoding = get_encoding(spec)
    assert isinstance(encoding, Encoding)
    assert encoding.name == spec
    assert get_encoding(spec) is encoding
    assert repr(spec) in repr(encoding)


def test_unknown_encoding_names_it_and_lists_the_registered_ones():
    with pytest.raises(UnknownEncodingError, match=r"unknown column encoding 'nope'.*int"):
        get_encoding("nope")


@pytest.mark.parametrize("spec", [5, None, ["int"], b"int"])
def test_non_string_encoding_is_unknown(spec: Any):
    with pytest.raises(UnknownEncodingError, match="must be a string"):
        get_encoding(spec)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("int:5", "takes no ':' argument"),
        ("str:x", "takes no ':' argument"),
        ("ndarray:bogus", "dtype 'bogus'"),
        ("ndarray:bool", "dtype 'bool'"),
        ("ndarray:float32:2,x", "not a list of integers"),
        ("ndarray:float32:0", "must be >= 1"),
        ("ndarray:float32:2,-1", "must be >= 1"),
        ("ndarray:float32:2:3", "write ndarray"),
        ("ndarray::2", "write ndarray"),
    ],
)
def test_invalid_arguments_are_unknown_encodings(spec: str, reason: str):
    with pytest.raises(
        UnknownEncodingError, match=rf"invalid column encoding {spec!r}: .*{reason}"
    ):
        get_encoding(spec)


class Upper(Encoding):
    """A custom encoding: text stored upper-cased."""

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise self.reject(value, "str")
        return value.upper().encode()

    def decode(self, data: Any) -> str:
        return bytes(data).decode()


class Lower(Upper):
    def encode(self, value: Any) -> bytes:
        return value.lower().encode()  # type: ignore[no-any-return]


@pytest.mark.usefixtures("isolated_registry")
def test_register_custom_encoding_with_argument():
    received = []

    def factory(name: str, argument: str | None) -> Encoding:
        received.append((name, argument))
        return Upper(name)

    register_encoding("upper", factory)
    assert "upper" in encoding_names()
    encoding = get_encoding("upper:loud")
    assert encoding.encode("abc") == b"ABC"
    assert encoding.name == "upper:loud"
    get_encoding("upper")
    assert received == [("upper:loud", "loud"), ("upper", None)]
    with pytest.raises(SampleEncodingError, match=r"encoding 'upper' expects str, got int"):
        get_encoding("upper").encode(3)


@pytest.mark.usefixtures("isolated_registry")
def test_register_refuses_a_taken_name_without_clobber():
    with pytest.raises(ConfigurationError, match=r"'str' is already registered.*clobber=True"):
        register_encoding("str", lambda name, arg: Upper(name))
    assert get_encoding("str").encode("abc") == b"abc"


@pytest.mark.usefixtures("isolated_registry")
def test_register_with_clobber_replaces_and_drops_cached_instances():
    register_encoding("case", lambda name, arg: Upper(name))
    first = get_encoding("case")
    assert first.encode("aB") == b"AB"
    register_encoding("case", lambda name, arg: Lower(name), clobber=True)
    second = get_encoding("case")
    assert second is not first
    assert second.encode("aB") == b"ab"


@pytest.mark.parametrize("name", ["", "a:b"])
def test_register_refuses_bad_names(name: str):
    with pytest.raises(ConfigurationError, match=f"encoding name {name!r}"):
        register_encoding(name, lambda full, arg: Upper(full))


@pytest.mark.usefixtures("isolated_registry")
def test_factory_errors_become_unknown_encoding():
    def factory(name: str, argument: str | None) -> Encoding:
        raise TypeError(f"bad argument {argument}")

    register_encoding("picky", factory)
    with pytest.raises(
        UnknownEncodingError, match="invalid column encoding 'picky:7': bad argument 7"
    ):
        get_encoding("picky:7")


# --- bytes, str, int -------------------------------------------------------------------------


@pytest.mark.parametrize("value", [b"", b"\x00\xff", bytearray(b"abc"), memoryview(b"xyz")])
def test_bytes_accepts_bytes_like(value: Any):
    decoded = roundtrip("bytes", value)
    assert type(decoded) is bytes
    assert decoded == bytes(value)


@pytest.mark.parametrize("value", ["text", 5, None, [1]])
def test_bytes_rejects_other_types(value: Any):
    with pytest.raises(SampleEncodingError, match=rf"'bytes' expects .*got {type(value).__name__}"):
        get_encoding("bytes").encode(value)


@pytest.mark.parametrize("value", ["", "hello", "héllo wörld", "日本語", "emoji 🎉", "nul\x00"])
def test_str_is_utf8(value: str):
    assert get_encoding("str").encode(value) == value.encode("utf-8")
    assert roundtrip("str", value) == value


@pytest.mark.parametrize("value", [b"abc", bytearray(b"abc")])
def test_str_rejects_bytes_with_a_hint(value: Any):
    with pytest.raises(SampleEncodingError, match=r"'str' expects str.*use the 'bytes' encoding"):
        get_encoding("str").encode(value)


@pytest.mark.parametrize("value", [5, 1.5, None, ["a"]])
def test_str_rejects_non_text(value: Any):
    with pytest.raises(SampleEncodingError, match=rf"got {type(value).__name__}"):
        get_encoding("str").encode(value)


@pytest.mark.parametrize("value", [0, 1, -1, 2**63 - 1, -(2**63), 123456789])
def test_int_is_little_endian_int64(value: int):
    encoding = get_encoding("int")
    assert encoding.size == 8
    assert encoding.encode(value) == struct.pack("<q", value)
    decoded = encoding.decode(encoding.encode(value))
    assert type(decoded) is int
    assert decoded == value


@pytest.mark.parametrize(
    "value", [np.int8(-5), np.uint8(200), np.int32(-70000), np.int64(2**62), np.uint64(2**63 - 1)]
)
def test_int_accepts_numpy_integers(value: np.integer[Any]):
    assert get_encoding("int").encode(value) == struct.pack("<q", int(value))
    assert roundtrip("int", value) == int(value)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, np.uint64(2**64 - 1)])
def test_int_out_of_range(value: Any):
    with pytest.raises(SampleEncodingError, match=rf"{int(value)} is out of range; use 'str_int'"):
        get_encoding("int").encode(value)


@pytest.mark.parametrize("value", [b"\x01" * 8, "5", 1.0, None, np.float64(2.0)])
def test_int_rejects_non_integers(value: Any):
    with pytest.raises(
        SampleEncodingError, match=rf"'int' expects int.*got {type(value).__name__}"
    ):
        get_encoding("int").encode(value)


# --- numeric scalars -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NUMERIC)
def test_numeric_scalar_layout(name: str):
    encoding = get_encoding(name)
    dtype = np.dtype(name).newbyteorder("<")
    assert encoding.size == dtype.itemsize
    data = encoding.encode(7)
    assert data == np.array(7, dtype).tobytes()
    decoded = encoding.decode(data)
    assert isinstance(decoded, np.generic)
    assert decoded.dtype == np.dtype(name)
    assert decoded == 7


@pytest.mark.parametrize("name", INTEGER)
def test_integer_scalar_bounds(name: str):
    info = np.iinfo(name)
    low, high = int(info.min), int(info.max)
    assert roundtrip(name, low) == low
    assert roundtrip(name, high) == high
    assert roundtrip(name, np.array(high)) == high  # a 0-d array is a scalar
    for outside in (low - 1, high + 1):
        with pytest.raises(SampleEncodingError, match=rf"'{name}' holds {low}..{high}; {outside}"):
            get_encoding(name).encode(outside)


@pytest.mark.parametrize("name", INTEGER)
def test_integer_scalar_accepts_integral_floats_only(name: str):
    assert roundtrip(name, 3.0) == 3
    with pytest.raises(SampleEncodingError, match=rf"'{name}' expects int.*got float: 3.5"):
        get_encoding(name).encode(3.5)


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("value", [b"\x01", "1", None, [1]])
def test_numeric_scalar_rejects_non_numbers(name: str, value: Any):
    with pytest.raises(
        SampleEncodingError, match=rf"'{name}' expects .*got {type(value).__name__}"
    ):
        get_encoding(name).encode(value)


@pytest.mark.parametrize("name", FLOAT)
def test_float_scalars_keep_special_values(name: str):
    info = np.finfo(name)
    assert roundtrip(name, float(info.max)) == info.max
    assert roundtrip(name, float(info.tiny)) == info.tiny
    assert roundtrip(name, float("inf")) == np.inf
    assert roundtrip(name, -float("inf")) == -np.inf
    assert np.isnan(roundtrip(name, float("nan")))
    assert roundtrip(name, np.float32(0.25)) == 0.25


@pytest.mark.parametrize(
    ("name", "too_big"),
    [
        ("float16", float(np.finfo(np.float16).max) * 4),
        ("float16", -(10**10)),
        ("float32", float(np.finfo(np.float32).max) * 4),
        ("float32", np.float64(-1e300)),
        ("float64", 10**400),
    ],
)
def test_float_scalar_overflow_is_refused(name: str, too_big: Any):
    with pytest.raises(SampleEncodingError, match=rf"'{name}'.*{re.escape(repr(too_big))} is out"):
        get_encoding(name).encode(too_big)


# --- numbers as text ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 2**64, -(10**40) + 7, np.int64(-3), np.uint64(2**64 - 1)])
def test_str_int_stores_decimal_text(value: Any):
    assert get_encoding("str_int").encode(value) == str(int(value)).encode("ascii")
    assert roundtrip("str_int", value) == int(value)


@pytest.mark.parametrize("value", [1.5, "12", b"12", None])
def test_str_int_rejects_non_integers(value: Any):
    with pytest.raises(
        SampleEncodingError, match=rf"'str_int' expects .*got {type(value).__name__}"
    ):
        get_encoding("str_int").encode(value)


@pytest.mark.parametrize("value", [0.1, -2.5e-300, 1e300, 3, float("inf"), np.float32(0.1)])
def test_str_float_round_trips(value: Any):
    decoded = roundtrip("str_float", value)
    assert type(decoded) is float
    assert decoded == float(value)


def test_str_float_text_and_nan():
    assert get_encoding("str_float").encode(0.1) == repr(0.1).encode()
    assert np.isnan(roundtrip("str_float", float("nan")))


@pytest.mark.parametrize("value", ["1.5", b"1.5", True, None, Decimal("1.5")])
def test_str_float_rejects_non_floats(value: Any):
    with pytest.raises(
        SampleEncodingError, match=rf"'str_float' expects float, got {type(value).__name__}"
    ):
        get_encoding("str_float").encode(value)


@pytest.mark.parametrize("text", ["0", "-1.50", "3.14159265358979323846264338327950288", "1E+7"])
def test_str_decimal_keeps_the_exact_text(text: str):
    value = Decimal(text)
    assert get_encoding("str_decimal").encode(value) == str(value).encode()
    decoded = roundtrip("str_decimal", value)
    assert decoded == value
    assert str(decoded) == str(value)


@pytest.mark.parametrize("value", [1.5, "1.5", 2])
def test_str_decimal_rejects_non_decimals(value: Any):
    with pytest.raises(
        SampleEncodingError,
        match=rf"'str_decimal' expects decimal.Decimal, got {type(value).__name__}",
    ):
        get_encoding("str_decimal").encode(value)


def test_str_decimal_decode_of_garbage():
    with pytest.raises(SampleEncodingError, match="not a decimal number: b'abc'"):
        get_encoding("str_decimal").decode(b"abc")


# --- json and pkl ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [{"a": [1, 2.5, None, True]}, [], "text", 3, None, {"é": "ü"}])
def test_json_round_trips(value: Any):
    data = get_encoding("json").encode(value)
    assert json.loads(data.decode("utf-8")) == value
    assert roundtrip("json", value) == value


def test_json_turns_arrays_into_lists():
    assert roundtrip("json", np.arange(4).reshape(2, 2)) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("value", [object(), {1, 2}, b"bytes"])
def test_json_rejects_unserialisable_values(value: Any):
    with pytest.raises(SampleEncodingError, match="encoding 'json' cannot serialise the value"):
        get_encoding("json").encode(value)


def test_pkl_round_trips_and_is_unsafe():
    value = {"set": {1, 2}, "tuple": (1, "a"), "decimal": Decimal("1.1")}
    encoding = get_encoding("pkl")
    assert encoding.unsafe is True
    assert pickle.loads(encoding.encode(value)) == value
    assert roundtrip("pkl", value) == value


def test_only_pkl_is_unsafe():
    for name in BUILTIN_NAMES:
        assert get_encoding(name).unsafe is (name == "pkl")


def test_pkl_rejects_unpicklable_values():
    with pytest.raises(SampleEncodingError, match="encoding 'pkl' cannot pickle the value"):
        get_encoding("pkl").encode(lambda: None)


# --- ndarray -----------------------------------------------------------------------------------


def test_dtype_codes_match_the_format_document():
    assert dict(DTYPE_CODES) == DOC_DTYPE_CODES


@pytest.mark.parametrize(("dtype", "code"), sorted(DOC_DTYPE_CODES.items()))
def test_dynamic_ndarray_layout(dtype: str, code: int):
    value = np.arange(6, dtype=dtype).reshape(2, 3)
    data = get_encoding("ndarray").encode(value)
    assert data[0] == code
    assert data[1] == (2 << 2) | 0
    assert data[2:4] == bytes([2, 3])
    assert data[4:] == value.astype(value.dtype.newbyteorder("<")).tobytes()
    decoded = get_encoding("ndarray").decode(data)
    assert decoded.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(decoded, value)


@pytest.mark.parametrize(
    ("shape", "width", "shape_dtype"),
    [((255,), 0, "<u1"), ((256,), 1, "<u2"), ((2, 65535), 1, "<u2"), ((1, 65536), 2, "<u4")],
)
def test_dynamic_shape_uses_the_smallest_width(
    shape: tuple[int, ...], width: int, shape_dtype: str
):
    value = np.zeros(shape, np.uint8)
    data = get_encoding("ndarray:uint8").encode(value)
    assert data[0] == (len(shape) << 2) | width
    end = 1 + len(shape) * np.dtype(shape_dtype).itemsize
    assert data[1:end] == np.array(shape, shape_dtype).tobytes()
    assert len(data) == end + value.size
    assert roundtrip("ndarray:uint8", value).shape == shape


def test_dynamic_shape_width_3_decodes():
    # Dimensions of 2**32 or more are stored as uint64 (width 3); too big to encode in a test.
    values = np.array([1.5, -2.0], "<f8")
    data = bytes([(1 << 2) | 3]) + struct.pack("<Q", 2) + values.tobytes()
    np.testing.assert_array_equal(get_encoding("ndarray:float64").decode(data), values)


def test_static_dtype_and_shape_is_just_the_values():
    encoding = get_encoding("ndarray:float32:2,3")
    assert encoding.size == 2 * 3 * 4
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert encoding.encode(value) == value.astype("<f4").tobytes()
    np.testing.assert_array_equal(encoding.decode(encoding.encode(value)), value)


def test_static_shape_without_dtype_is_not_allowed():
    assert get_encoding("ndarray:int16").size is None
    assert get_encoding("ndarray").size is None


@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=">i4").reshape(3, 4),  # big-endian
        np.arange(12, dtype=np.int16).reshape(3, 4).T,  # not C-contiguous
        np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
        np.arange(20, dtype=np.uint16)[::3],
        np.ones((1, 1, 1, 1, 2), np.float16),
    ],
)
def test_ndarray_round_trips_any_memory_layout(value: np.ndarray[Any, Any]):
    decoded = roundtrip("ndarray", value)
    assert decoded.dtype.name == value.dtype.name
    assert decoded.shape == value.shape
    np.testing.assert_array_equal(decoded, value)


def test_decoded_ndarray_is_a_read_only_view():
    decoded = roundtrip("ndarray", np.arange(3))
    assert not decoded.flags.writeable


@pytest.mark.parametrize(
    ("spec", "value", "message"),
    [
        ("ndarray", [1, 2], "expects numpy.ndarray, got list"),
        ("ndarray", b"\x00", "expects numpy.ndarray, got bytes"),
        ("ndarray", np.array([True]), "dtype bool is not storable"),
        ("ndarray", np.array([1 + 2j]), "dtype complex128 is not storable"),
        ("ndarray", np.array(["a"]), "dtype <U1 is not storable"),
        ("ndarray", np.zeros((0,), np.uint8), r"got shape \(0,\)"),
        ("ndarray", np.array(5), r"got shape \(\)"),
        ("ndarray:float32", np.zeros(2, np.float64), "expects dtype float32, got float64"),
        ("ndarray:float32:2", np.zeros(3, np.float32), r"expects shape \(2,\), got \(3,\)"),
        ("ndarray:uint8:2,2", np.zeros(4, np.uint8), r"expects shape \(2, 2\), got \(4,\)"),
    ],
)
def test_ndarray_rejects(spec: str, value: Any, message: str):
    with pytest.raises(SampleEncodingError, match=rf"encoding '{spec}'.*{message}"):
        get_encoding(spec).encode(value)


def test_ndarray_refuses_too_many_dimensions():
    value = np.zeros((1,) * 64, np.uint8)
    with pytest.raises(SampleEncodingError, match="at most 63 dimensions, got 64"):
        get_encoding("ndarray").encode(value)


def test_ndarray_decode_of_unknown_dtype_code():
    with pytest.raises(SampleEncodingError, match="unknown dtype code 7"):
        get_encoding("ndarray").decode(bytes([7, 1 << 2, 1, 0]))


# --- images ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_pil_layout(mode: str):
    img = image(mode, (4, 3))
    data = get_encoding("pil").encode(img)
    mode_bytes = mode.encode()
    header = struct.pack("<3I", 4, 3, len(mode_bytes)) + mode_bytes
    assert data == header + img.tobytes()
    decoded = get_encoding("pil").decode(data)
    assert decoded.mode == mode
    assert decoded.size == (4, 3)
    assert decoded.tobytes() == img.tobytes()


@pytest.mark.parametrize("spec", ["pil", "png", "jpeg", "list[pil]", "list[png]"])
@pytest.mark.parametrize("value", [np.zeros((2, 2), np.uint8), "image.png", 3])
def test_image_encodings_reject_non_images(spec: str, value: Any):
    with pytest.raises(SampleEncodingError, match=re.escape(f"encoding '{spec}' expects")):
        get_encoding(spec).encode(value)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_png_is_lossless(mode: str):
    img = image(mode)
    data = get_encoding("png").encode(img)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    decoded = get_encoding("png").decode(data)
    assert decoded.format == "PNG"
    assert decoded.mode == mode
    assert decoded.tobytes() == img.tobytes()


def test_png_stores_png_bytes_as_they_are():
    data = png_bytes(image())
    assert get_encoding("png").encode(data) == data
    assert get_encoding("png").encode(bytearray(data)) == data


def test_png_rejects_bytes_of_another_format():
    with pytest.raises(SampleEncodingError, match=r"'png' got bytes that are not a PNG file"):
        get_encoding("png").encode(jpeg_bytes(image()))


def test_jpeg_round_trips_size_and_mode():
    img = image("RGB", (16, 8))
    data = get_encoding("jpeg").encode(img)
    assert data.startswith(b"\xff\xd8\xff")
    decoded = get_encoding("jpeg").decode(data)
    assert decoded.format == "JPEG"
    assert (decoded.mode, decoded.size) == ("RGB", (16, 8))


def test_jpeg_reuses_the_file_an_image_was_opened_from(tmp_path):
    path = tmp_path / "photo.jpg"
    image("RGB", (8, 8)).save(path, format="JPEG", quality=30)
    with Image.open(path) as opened:
        assert get_encoding("jpeg").encode(opened) == path.read_bytes()


def test_jpeg_of_an_unsavable_mode():
    with pytest.raises(SampleEncodingError, match="'jpeg' could not save a RGBA image as JPEG"):
        get_encoding("jpeg").encode(image("RGBA"))


@pytest.mark.parametrize("spec", ["list[pil]", "list[png]", "list[jpeg]"])
def test_image_list_layout(spec: str):
    images_in = [image("RGB", (3, 2), seed) for seed in range(3)]
    encoding = get_encoding(spec)
    inner = get_encoding(spec[len("list[") : -1])
    payloads = [inner.encode(img) for img in images_in]
    data = encoding.encode(images_in)
    assert data == struct.pack("<5I", 0, 3, *map(len, payloads)) + b"".join(payloads)
    decoded = encoding.decode(data)
    assert [img.size for img in decoded] == [(3, 2)] * 3
    if spec != "list[jpeg]":
        assert [img.tobytes() for img in decoded] == [img.tobytes() for img in images_in]


def test_image_list_accepts_tuples_and_empty_lists():
    encoding = get_encoding("list[png]")
    assert encoding.encode([]) == struct.pack("<2I", 0, 0)
    assert encoding.decode(encoding.encode([])) == []
    assert len(encoding.decode(encoding.encode((image(), image())))) == 2


def test_image_list_rejects_a_single_image():
    with pytest.raises(
        SampleEncodingError, match=r"'list\[png\]' expects a list of values for 'png'"
    ):
        get_encoding("list[png]").encode(image())


def test_image_list_decode_checks_the_sizes():
    data = get_encoding("list[png]").encode([image()]) + b"extra"
    with pytest.raises(SampleEncodingError, match="sizes add up to"):
        get_encoding("list[png]").decode(data)


@pytest.mark.parametrize("spec", ["jpeg_array", "jpegarray"])
def test_jpeg_array_layout(spec: str):
    files = [jpeg_bytes(image("RGB", (4 + i, 4))) for i in range(2)]
    data = get_encoding(spec).encode(files)
    assert data == struct.pack("<3I", 2, *map(len, files)) + b"".join(files)
    decoded = get_encoding(spec).decode(data)
    assert [img.size for img in decoded] == [(4, 4), (5, 4)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "a non-empty list of JPEG file bytes, got list"),
        (b"\xff\xd8\xff", "a non-empty list of JPEG file bytes, got bytes"),
        ([b"not a jpeg"], "bytes of a JPEG file as each list item, got bytes"),
        (["x.jpg"], "bytes of a JPEG file as each list item, got str"),
    ],
)
def test_jpeg_array_rejects(value: Any, message: str):
    with pytest.raises(SampleEncodingError, match=rf"'jpeg_array' expects {message}"):
        get_encoding("jpeg_array").encode(value)


def test_images_without_pillow_name_the_extra(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    images._pil.cache_clear()
    try:
        with pytest.raises(MissingDependencyError, match=r"pip install 'shardstream\[images\]'"):
            get_encoding("png").encode(object())
    finally:
        images._pil.cache_clear()
    monkeypatch.undo()
    assert get_encoding("png").encode(image()).startswith(b"\x89PNG")


# --- hostile input (found by tests/property/test_fuzz_reader.py) -----------------------------


def test_ndarray_static_size_of_a_huge_shape_is_exact():
    # np.prod wraps at 2**64: this shape used to claim a fixed size of 0 bytes.
    assert get_encoding("ndarray:uint8:4294967296,4294967296").size == 2**64
    assert get_encoding("ndarray:uint16:3,6148914691236517206").size == 2 * 3 * 6148914691236517206


@pytest.mark.parametrize(
    ("width", "height"),
    [(60000, 60000), (2**31 - 1, 2**31 - 1), (2**32 - 1, 2**32 - 1), (2**32 - 1, 0)],
)
def test_pil_decode_refuses_a_size_its_pixels_cannot_fill(width: int, height: int):
    # Pillow would first allocate the whole image (14 GB for 60000 x 60000), or fail with a
    # MemoryError or OverflowError.
    data = struct.pack("<3I", width, height, 3) + b"RGB" + b"x" * 10
    with pytest.raises(SampleEncodingError, match=rf"a {width}x{height} image cannot fit in 10"):
        get_encoding("pil").decode(data)


def test_pil_decode_of_a_one_bit_image():  # the tightest mode: 8 pixels per byte
    img = Image.frombytes("1", (9, 3), bytes([0xFF, 0x80, 0, 0, 0xAA, 0]))
    decoded = get_encoding("pil").decode(get_encoding("pil").encode(img))
    assert decoded.tobytes() == img.tobytes()


@pytest.mark.parametrize("spec", ["jpeg", "png", "list[png]", "jpeg_array"])
def test_image_file_decode_of_garbage_is_a_sample_encoding_error(spec: str):
    data = {
        "jpeg": b"not an image",
        "png": b"\x89PNG\r\n\x1a\n but then garbage",
        "list[png]": struct.pack("<4I", 0, 2, 3, 3) + b"abcdef",
        "jpeg_array": struct.pack("<2I", 1, 4) + b"\xff\xd8\xff\x00",
    }[spec]
    with pytest.raises(SampleEncodingError, match="cannot identify image file"):
        get_encoding(spec).decode(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",  # EOFError
        b"not a pickle",  # UnpicklingError
        pickle.dumps({"a": 1})[:-3],  # truncated
        b"\x80\x05\x95\xff\xff\xff\xff\xff\xff\xff\x7f.",  # a frame of 2**63 bytes
        b"\x80\x04\x8c\x02osX\x09\x00\x00\x00no_such_x\x93.",  # a global that does not exist
    ],
)
def test_pkl_decode_of_garbage_is_a_sample_encoding_error(data: bytes):
    with pytest.raises(SampleEncodingError, match="encoding 'pkl' cannot unpickle the value"):
        get_encoding("pkl").decode(data)


# --- the builtin classes mosaicml-streaming raises ----------------------------------------------

# (column encoding, value, what the reference's MDSWriter raised for it): learned by running it,
# and checked against it again in tests/interop/test_reference_api.py.
REFERENCE_RAISES: list[tuple[str, Any, type[BaseException]]] = [
    ("bytes", "x", AttributeError),
    ("bytes", None, AttributeError),
    ("str", 1, AttributeError),
    ("int", "1", AttributeError),
    ("int", 1.5, AttributeError),
    ("int", 2**70, OverflowError),
    ("int8", None, TypeError),
    ("uint8", 300, OverflowError),
    ("int32", 2**40, OverflowError),
    ("str_int", "1", AttributeError),
    ("str_float", "1.0", AttributeError),
    ("str_decimal", 1.5, AttributeError),
    ("json", {1, 2}, TypeError),
    ("pkl", lambda x: x, pickle.PicklingError),
    ("ndarray", [1, 2], AttributeError),
    ("ndarray", np.zeros(2, np.complex64), ValueError),
    ("ndarray", np.zeros(0), ValueError),
    ("ndarray", np.array(5), ValueError),
    ("ndarray:uint8", np.zeros(2, np.int32), ValueError),
    ("ndarray:uint8:2,2", np.zeros(3, np.uint8), ValueError),
    ("pil", "x", AttributeError),
    ("jpeg", None, AttributeError),
    ("jpeg", Image.new("RGBA", (2, 2)), OSError),
    ("png", np.zeros((2, 2)), AttributeError),
    ("list[pil]", Image.new("RGB", (2, 2)), AttributeError),
    ("list[jpeg]", [b"x"], AttributeError),
    ("jpeg_array", None, TypeError),
]


@pytest.mark.parametrize(("spec", "value", "builtin"), REFERENCE_RAISES)
def test_a_bad_value_is_also_what_the_reference_raises(
    spec: str, value: Any, builtin: type[BaseException]
):
    with pytest.raises(SampleEncodingError) as info:
        get_encoding(spec).encode(value)
    assert isinstance(info.value, builtin)
    assert isinstance(info.value, TypeError)  # still the class it always was
