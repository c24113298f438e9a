"""Petastorm's codecs decode what Petastorm encoded: arrays, images and Spark scalars."""

from __future__ import annotations

import io
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from shardstream.errors import SampleValueError, ShardFormatError
from shardstream.loader.petastorm.codecs import (
    CompressedImageCodec,
    CompressedNdarrayCodec,
    NdarrayCodec,
    ScalarCodec,
    cast_scalar,
    spark_type,
)
from shardstream.loader.petastorm.unischema import UnischemaField

FIELD = UnischemaField("x", np.float32, (None,), None, False)
arrays = hnp.arrays(
    hnp.scalar_dtypes().filter(lambda d: d.kind in "biufc"),
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)


@given(arrays)
def test_ndarrays_decode_as_np_save_wrote_them(array: np.ndarray):
    saved = io.BytesIO()
    np.save(saved, array)
    decoded = NdarrayCodec().decode(FIELD, saved.getvalue())
    assert decoded.dtype == array.dtype
    np.testing.assert_array_equal(decoded, array)


@given(arrays)
def test_compressed_ndarrays_decode_as_savez_compressed_wrote_them(array: np.ndarray):
    saved = io.BytesIO()
    np.savez_compressed(saved, arr=array)
    decoded = CompressedNdarrayCodec().decode(FIELD, saved.getvalue())
    assert decoded.dtype == array.dtype
    np.testing.assert_array_equal(decoded, array)


def test_an_object_array_is_refused_not_unpickled():
    saved = io.BytesIO()
    np.save(saved, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):
        NdarrayCodec().decode(FIELD, saved.getvalue())


def encode(pixels: np.ndarray, kind: str = "PNG", **options: object) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=kind, **options)
    return out.getvalue()


def test_a_colour_png_decodes_to_rgb_as_petastorm_hands_it_back():
    # Petastorm swaps RGB to BGR before OpenCV writes (and back after it reads), so the file
    # holds plain RGB: red must stay in channel 0.
    pixels = np.zeros((4, 5, 3), np.uint8)
    pixels[..., 0] = 255
    pixels[1, 2] = (1, 2, 3)
    decoded = CompressedImageCodec("png").decode(FIELD, encode(pixels))
    assert decoded.shape == (4, 5, 3)
    assert decoded.dtype == np.uint8
    np.testing.assert_array_equal(decoded, pixels)


def test_grey_palette_and_sixteen_bit_pngs_decode():
    grey = np.arange(35, dtype=np.uint8).reshape(5, 7)
    np.testing.assert_array_equal(CompressedImageCodec().decode(FIELD, encode(grey)), grey)
    deep = (np.arange(12, dtype=np.uint16) * 5000).reshape(3, 4)
    decoded = CompressedImageCodec().decode(FIELD, encode(deep))
    assert decoded.dtype.kind == "u"
    assert decoded.dtype.itemsize == 2
    np.testing.assert_array_equal(decoded, deep)
    palette = Image.fromarray(np.full((2, 2, 3), 200, np.uint8)).convert("P")
    out = io.BytesIO()
    palette.save(out, format="PNG")
    assert CompressedImageCodec().decode(FIELD, out.getvalue()).shape == (2, 2, 3)


def test_a_jpeg_decodes_close_to_what_was_written():
    pixels = np.tile(np.linspace(0, 255, 16, dtype=np.uint8), (16, 1))[..., None].repeat(3, 2)
    decoded = CompressedImageCodec("jpeg", 95).decode(FIELD, encode(pixels, "JPEG", quality=95))
    assert decoded.shape == pixels.shape
    assert np.abs(decoded.astype(int) - pixels).max() <= 8


def test_an_image_with_alpha_is_refused_as_petastorm_refuses_it():
    with pytest.raises(ShardFormatError, match="RGBA image"):
        CompressedImageCodec().decode(FIELD, encode(np.zeros((2, 2, 4), np.uint8)))


def test_scalars_are_cast_to_the_fields_numpy_type():
    codec = ScalarCodec(spark_type("IntegerType"))
    field = UnischemaField("i", np.int32, (), codec)
    assert type(codec.decode(field, 7)) is np.int32
    assert cast_scalar(np.dtype("float32"), 1.5) == np.float32(1.5)
    assert cast_scalar(Decimal, "1.25") == Decimal("1.25")
    assert cast_scalar(np.str_, "a") == "a"
    assert type(cast_scalar(np.str_, "a")) is np.str_
    assert cast_scalar(list, (1,)) == (1,)  # not a NumPy type: as it is
    assert spark_type("DecimalType", {"scale": 2}) == spark_type("DecimalType", {"scale": 2})
    assert repr(spark_type("DecimalType", {"scale": 2})) == "DecimalType(scale=2)"


@given(st.sampled_from(["IntegerType", "StringType", "ArrayType"]))
def test_spark_types_pickle_by_name(name: str):
    import pickle

    made = spark_type(name, {"a": 1})
    assert pickle.loads(pickle.dumps(made)) == made


def field_of(array: np.ndarray, name: str = "x") -> UnischemaField:
    return UnischemaField(name, array.dtype.type, array.shape, None, False)


@given(arrays)
def test_ndarray_encode_writes_np_saves_bytes_and_decodes_back(array: np.ndarray):
    saved = io.BytesIO()
    np.save(saved, array)
    encoded = NdarrayCodec().encode(field_of(array), array)
    assert bytes(encoded) == saved.getvalue()  # Petastorm's bytes, exactly
    np.testing.assert_array_equal(NdarrayCodec().decode(FIELD, encoded), array)


@given(arrays)
def test_compressed_ndarray_encode_is_an_npz_with_arr(array: np.ndarray):
    encoded = CompressedNdarrayCodec().encode(field_of(array), array)
    with np.load(io.BytesIO(encoded), allow_pickle=False) as archive:
        assert archive.files == ["arr"]
        np.testing.assert_array_equal(archive["arr"], array)


@pytest.mark.parametrize("shape", [(5, 7, 3), (5, 7)])
def test_png_images_encode_to_the_same_pixels(shape: tuple[int, ...]):
    pixels = np.random.default_rng(3).integers(0, 256, shape, dtype=np.uint8)
    field = UnischemaField("image", np.uint8, (None, None, 3)[: len(shape)], None, False)
    codec = CompressedImageCodec("png")
    encoded = codec.encode(field, pixels)
    assert bytes(encoded[:8]) == b"\x89PNG\r\n\x1a\n"
    np.testing.assert_array_equal(codec.decode(field, encoded), pixels)
    assert str(codec) == "CompressedImageCodec('png', 80)"


def test_jpeg_images_encode_at_the_quality_given():
    gradient = np.add.outer(np.arange(16), np.arange(16)).astype(np.uint8) * 8
    pixels = np.stack([gradient, gradient.T, 255 - gradient], axis=-1)
    field = UnischemaField("image", np.uint8, (16, 16, 3), None, False)
    low, high = (CompressedImageCodec("jpeg", q).encode(field, pixels) for q in (10, 95))
    assert bytes(low[:2]) == b"\xff\xd8"
    assert len(low) < len(high)
    decoded = CompressedImageCodec("jpeg").decode(field, high)
    assert np.abs(decoded.astype(int) - pixels).mean() < 4


@pytest.mark.parametrize(
    ("codec", "value", "field"),
    [
        (NdarrayCodec(), np.zeros(3, np.float64), UnischemaField("x", np.float32, (3,))),
        (NdarrayCodec(), np.zeros(3, np.float32), UnischemaField("x", np.float32, (4,))),
        (NdarrayCodec(), [1.0, 2.0], UnischemaField("x", np.float32, (None,))),
        (CompressedNdarrayCodec(), np.zeros((2, 2), np.int8), UnischemaField("x", np.int8, (2,))),
        (CompressedImageCodec(), np.zeros((4, 4, 4), np.uint8),
         UnischemaField("x", np.uint8, (4, 4, 4))),
        (CompressedImageCodec(), np.zeros((4, 4), np.int16), UnischemaField("x", np.uint8, (4, 4))),
        (ScalarCodec(spark_type("IntegerType")), np.arange(2), UnischemaField("x", np.int32, ())),
        (ScalarCodec(spark_type("IntegerType")), 1, UnischemaField("x", np.int32, (1,))),
        (ScalarCodec(spark_type("StringType")), 7, UnischemaField("x", np.str_, ())),
    ],
)  # fmt: skip
def test_values_that_do_not_fit_the_field_are_refused_naming_it(codec, value, field):
    with pytest.raises(SampleValueError, match="field 'x'") as caught:
        codec.encode(field, value)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, TypeError)


def test_scalars_encode_as_sparks_python_values():
    field = UnischemaField("x", np.int32, ())
    for name, value, expected in [
        ("IntegerType", np.int32(7), 7), ("LongType", np.int64(2**40), 2**40),
        ("DoubleType", np.float32(0.5), 0.5), ("BooleanType", np.bool_(True), True),
        ("StringType", np.str_("a"), "a"), ("DecimalType", Decimal("1.5"), Decimal("1.5")),
    ]:  # fmt: skip
        encoded = ScalarCodec(spark_type(name)).encode(field, value)
        assert encoded == expected
        assert type(encoded) is type(expected)
    from pyspark.sql.types import ShortType

    real = ScalarCodec(ShortType())  # a real pyspark type, as users write schemas
    assert real.encode(field, np.int32(3)) == 3
    assert real.spark_dtype() == ShortType()
    assert str(real) == "ScalarCodec(ShortType())"
