"""Petastorm's column codecs: the stand-ins a Unischema pickle is loaded into, and writers.

A Petastorm dataset stores, beside its Parquet files, its Unischema pickled: each field names its
codec object, and the codec names a ``pyspark.sql.types`` type. shardstream never loads those
classes themselves (:mod:`shardstream.loader.petastorm.metadata` maps each name to a class
here), and decodes what Petastorm's codecs encoded:

* ``ScalarCodec(spark_type)``: the Spark type's value, cast to the field's NumPy type;
* ``NdarrayCodec``: the bytes of ``np.save``;
* ``CompressedNdarrayCodec``: the bytes of ``np.savez_compressed(arr=...)``;
* ``CompressedImageCodec(image_codec, quality)``: a PNG or JPEG file, decoded with Pillow. A
  colour image comes as ``(H, W, 3)`` RGB, a grey one as ``(H, W)``, as Petastorm hands them
  back (OpenCV decodes to BGR and Petastorm reverses the channels).

Arrays are loaded with ``allow_pickle=False``: an object array is refused, not unpickled.

``encode`` writes what Petastorm's ``encode`` writes, for ``dict_to_spark_row``: the same
``np.save`` and ``np.savez_compressed`` bytes, the same Python scalars, and PNG or JPEG files of
the same pixels (Pillow encodes them where Petastorm uses OpenCV, so the file bytes differ but
a PNG decodes to the very pixels either way). A value that does not fit its field (another
dtype, a shape the field's does not allow, an array where a scalar goes) raises
:class:`~shardstream.errors.SampleValueError`, a ``ValueError`` and ``TypeError`` both, as
Petastorm raises one or the other.
"""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import numpy as np

from shardstream._optional import require
from shardstream.errors import SampleValueError, ShardFormatError

__all__ = [
    "SPARK_TYPE_NAMES",
    "CompressedImageCodec",
    "CompressedNdarrayCodec",
    "NdarrayCodec",
    "ScalarCodec",
    "SparkType",
    "cast_scalar",
    "spark_type",
    "spark_type_class",
]

#: The ``pyspark.sql.types`` classes a Unischema pickle may name.
SPARK_TYPE_NAMES = frozenset(
    {
        "ArrayType", "BinaryType", "BooleanType", "ByteType", "CharType", "DateType",
        "DayTimeIntervalType", "DecimalType", "DoubleType", "FloatType", "IntegerType",
        "LongType", "MapType", "NullType", "ShortType", "StringType", "StructField",
        "StructType", "TimestampNTZType", "TimestampType", "VarcharType",
        "YearMonthIntervalType",
    }
)  # fmt: skip


class _StandIn:
    """Takes from a pickle's state only the attributes its class names, nothing else."""

    _STATE: tuple[str, ...] = ()

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots), as pickle may give
            state = state[0]
        if not isinstance(state, dict):
            raise ShardFormatError(
                f"the Unischema's {type(self).__name__} holds {type(state).__name__} state, "
                f"not a dict: the metadata is not Petastorm's"
            )
        for key in self._STATE:
            if key in state:
                setattr(self, key, state[key])

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        state = ", ".join(f"{key.lstrip('_')}={value!r}" for key, value in vars(self).items())
        return f"{type(self).__name__}({state})"


class SparkType(_StandIn):
    """A ``pyspark.sql.types`` type named in a Unischema, with its attributes.

    Attributes:
        type_name: The class name (``'IntegerType'``, ``'DecimalType'``...).
        state: Its attributes (``{'precision': 10, 'scale': 2}``...).

    Example:
        >>> spark_type("DecimalType", {"precision": 10, "scale": 2}).state["scale"]
        2
    """

    type_name = "DataType"
    state: dict[str, Any]

    def __new__(cls, *args: Any) -> SparkType:
        """A type without attributes (a pickle makes it so, then sets those it holds)."""
        made = super().__new__(cls)
        made.state = {}
        return made

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise ShardFormatError(f"the Unischema's {self.type_name} holds no attribute dict")
        self.state = {key: value for key, value in state.items() if isinstance(key, str)}

    def __reduce__(self) -> tuple[Any, ...]:
        return spark_type, (self.type_name, dict(self.state))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SparkType)
            and self.type_name == other.type_name
            and self.state == other.state
        )

    def __hash__(self) -> int:
        return hash(self.type_name)

    def __repr__(self) -> str:
        return f"{self.type_name}({', '.join(f'{k}={v!r}' for k, v in self.state.items())})"


_SPARK_CLASSES: dict[str, type[SparkType]] = {
    name: type(name, (SparkType,), {"type_name": name, "__module__": __name__})
    for name in sorted(SPARK_TYPE_NAMES)
}


def spark_type_class(name: str) -> type[SparkType]:
    """The stand-in class of ``pyspark.sql.types.<name>`` (one of :data:`SPARK_TYPE_NAMES`)."""
    return _SPARK_CLASSES[name]


def spark_type(name: str, state: dict[str, Any] | None = None) -> SparkType:
    """A stand-in of ``pyspark.sql.types.<name>`` with the attributes ``state``."""
    made = spark_type_class(name)()
    made.state = dict(state or {})
    return made


def cast_scalar(numpy_dtype: Any, value: Any) -> Any:
    """``value`` as a field of NumPy type ``numpy_dtype`` holds it (Petastorm's ``decode_row``).

    NumPy scalar types and ``Decimal`` cast it; any other type leaves it as it is.

    Example:
        >>> cast_scalar(np.int32, 7), cast_scalar(np.str_, "a")
        (np.int32(7), np.str_('a'))
    """
    if isinstance(numpy_dtype, np.dtype):
        numpy_dtype = numpy_dtype.type
    if isinstance(numpy_dtype, type) and issubclass(numpy_dtype, (np.generic, Decimal)):
        return numpy_dtype(value)
    return value


class ScalarCodec(_StandIn):
    """A scalar stored as its Spark type; decoded to the field's NumPy type.

    Example:
        codec = ScalarCodec(spark_type("IntegerType"))
    """

    _STATE = ("_spark_type",)

    def __init__(self, spark_type: Any = None) -> None:
        self._spark_type = spark_type

    def encode(self, field: Any, value: Any) -> Any:
        """``value`` as the Python scalar Spark stores for the codec's type.

        Raises:
            SampleValueError: An array or sequence, a field with a shape, or a non-text value
                for ``StringType``.
        """
        if hasattr(value, "__len__") and not isinstance(value, str) and np.shape(value) != ():
            raise SampleValueError(
                f"field {field.name!r}: ScalarCodec takes a scalar, got {type(value).__name__}"
            )
        if field.shape:
            raise SampleValueError(
                f"field {field.name!r}: a ScalarCodec field's shape must be (), not {field.shape}"
            )
        kind = _type_name(self._spark_type)
        if kind in ("ByteType", "ShortType", "IntegerType", "LongType"):
            return int(value)
        if kind in ("FloatType", "DoubleType"):
            return float(value)
        if kind == "BooleanType":
            return bool(value)
        if kind == "StringType":
            if not isinstance(value, str):
                raise SampleValueError(
                    f"field {field.name!r}: StringType takes text, got {type(value).__name__}"
                )
            return str(value)
        return value

    def decode(self, field: Any, value: Any) -> Any:
        """``value`` as the field's NumPy type."""
        return cast_scalar(field.numpy_dtype, value)

    def spark_dtype(self) -> Any:
        """The Spark type it stores (a ``pyspark.sql.types`` one, or its ``SparkType`` stand-in)."""
        return self._spark_type

    def __str__(self) -> str:
        return f"ScalarCodec({_type_name(self._spark_type)}())"


class NdarrayCodec(_StandIn):
    """An array stored as the bytes of ``np.save``.

    Example:
        array = NdarrayCodec().decode(field, stored_bytes)
    """

    def encode(self, field: Any, value: Any) -> bytearray:
        """The bytes of ``np.save(value)``, once ``value`` fits the field.

        Raises:
            SampleValueError: Not an array of the field's type and shape.
        """
        memfile = io.BytesIO()
        np.save(memfile, _checked_array(field, value))
        return bytearray(memfile.getvalue())

    def decode(self, field: Any, value: Any) -> Any:
        """The array ``np.save`` wrote into ``value``."""
        return np.load(io.BytesIO(value), allow_pickle=False)

    def spark_dtype(self) -> Any:
        """``BinaryType()``."""
        return _binary_type()

    def __str__(self) -> str:
        return "NdarrayCodec()"


class CompressedNdarrayCodec(_StandIn):
    """An array stored as the bytes of ``np.savez_compressed(arr=...)``.

    Example:
        array = CompressedNdarrayCodec().decode(field, stored_bytes)
    """

    def encode(self, field: Any, value: Any) -> bytearray:
        """The bytes of ``np.savez_compressed(arr=value)``, once ``value`` fits the field.

        Raises:
            SampleValueError: Not an array of the field's type and shape.
        """
        memfile = io.BytesIO()
        np.savez_compressed(memfile, arr=_checked_array(field, value))
        return bytearray(memfile.getvalue())

    def decode(self, field: Any, value: Any) -> Any:
        """The array ``arr`` of the ``.npz`` bytes ``value``."""
        with np.load(io.BytesIO(value), allow_pickle=False) as archive:
            return archive["arr"]

    def spark_dtype(self) -> Any:
        """``BinaryType()``."""
        return _binary_type()

    def __str__(self) -> str:
        return "CompressedNdarrayCodec()"


class CompressedImageCodec(_StandIn):
    """An image stored as a PNG or JPEG file; decoded with Pillow to RGB (or grey) pixels.

    Args:
        image_codec: ``'png'`` or ``'jpeg'`` (how it was written; any format Pillow reads
            decodes).
        quality: The JPEG quality it was written with.

    Example:
        pixels = CompressedImageCodec("png").decode(field, stored_bytes)  # (H, W, 3) uint8
    """

    _STATE = ("_image_codec", "_quality")

    def __init__(self, image_codec: str = "png", quality: int = 80) -> None:
        self._image_codec = "." + image_codec
        self._quality = quality

    @property
    def image_codec(self) -> str:
        """``'png'`` or ``'jpeg'``."""
        return self._image_codec.lstrip(".")

    def encode(self, field: Any, value: Any) -> bytearray:
        """The image file of the pixels ``value``: ``(H, W)`` grey or ``(H, W, 3)`` RGB.

        Raises:
            SampleValueError: Not an array of the field's type and shape, or not an image's.
        """
        pixels = _checked_array(field, value, exact_dtype=True)
        if pixels.ndim != 2 and (pixels.ndim != 3 or pixels.shape[2] != 3):
            raise SampleValueError(
                f"field {field.name!r}: an image is (H, W) or (H, W, 3), got {pixels.shape}"
            )
        image_module = require("PIL.Image", extra="images", purpose="Encoding Petastorm images")
        memfile = io.BytesIO()
        kind = "JPEG" if self.image_codec in ("jpeg", "jpg") else self.image_codec.upper()
        options = {"quality": self._quality} if kind == "JPEG" else {}
        image_module.fromarray(pixels).save(memfile, format=kind, **options)
        return bytearray(memfile.getvalue())

    def spark_dtype(self) -> Any:
        """``BinaryType()``."""
        return _binary_type()

    def __str__(self) -> str:
        return f"CompressedImageCodec('{self.image_codec}', {self._quality})"

    def decode(self, field: Any, value: Any) -> Any:
        """The pixels of the image file ``value``: ``(H, W, 3)`` RGB or ``(H, W)`` grey.

        Raises:
            ShardFormatError: An image with an alpha channel or other bands, which Petastorm
                refuses too.
        """
        image_module = require("PIL.Image", extra="images", purpose="Decoding Petastorm images")
        with image_module.open(io.BytesIO(value)) as image:
            if image.mode == "P":
                image = image.convert("RGB")
            elif image.mode == "1":
                image = image.convert("L")
            if image.mode not in ("L", "RGB", "I;16", "I;16B", "I"):
                raise ShardFormatError(
                    f"field {getattr(field, 'name', '?')!r}: a {image.mode} image; Petastorm's "
                    f"image codec holds (H, W) grey or (H, W, 3) colour images only"
                )
            return np.array(image)


def _type_name(spark_type: Any) -> str:
    """The ``pyspark.sql.types`` class name of a Spark type or of its stand-in."""
    if isinstance(spark_type, SparkType):
        return spark_type.type_name
    return type(spark_type).__name__


def _binary_type() -> Any:
    types = require("pyspark.sql.types", extra="spark", purpose="Petastorm's codecs")
    return types.BinaryType()


def _checked_array(field: Any, value: Any, *, exact_dtype: bool = False) -> Any:
    """``value``, an array of the field's NumPy type and shape (``None`` matching any size).

    Raises:
        SampleValueError: It is not, as Petastorm's codecs refuse it.
    """
    if not isinstance(value, np.ndarray):
        raise SampleValueError(
            f"field {field.name!r}: expected an ndarray of {field.numpy_dtype}, got "
            f"{type(value).__name__}"
        )
    wanted = np.dtype(field.numpy_dtype) if exact_dtype else field.numpy_dtype
    if (value.dtype if exact_dtype else value.dtype.type) != wanted:
        raise SampleValueError(
            f"field {field.name!r}: expected an ndarray of {field.numpy_dtype}, got {value.dtype}"
        )
    shape = tuple(field.shape)
    if len(shape) != value.ndim or any(
        want and got and want != got for want, got in zip(shape, value.shape, strict=True)
    ):
        raise SampleValueError(
            f"field {field.name!r}: expected the shape {shape} (None: any size), got {value.shape}"
        )
    return value
