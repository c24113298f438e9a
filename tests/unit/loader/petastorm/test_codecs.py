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

from shardstream.errors import ShardFormatError
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
