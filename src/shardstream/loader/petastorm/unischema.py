"""Petastorm's ``Unischema``: a dataset's fields, each a name, NumPy type, shape and codec.

A Petastorm dataset stores one (see :mod:`shardstream.loader.petastorm.metadata`); any other
Parquet dataset has one inferred from its Arrow schema, as Petastorm infers it: partition
columns first (``int64`` or text), then each column whose type NumPy holds, lists of them with
the shape ``(None,)``. A reader's rows are namedtuples of its schema's fields.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

import numpy as np

from shardstream._optional import require
from shardstream.errors import ConfigurationError, NoMatchingFieldsError, ShardFormatError
from shardstream.loader.fields import Field

__all__ = [
    "Unischema",
    "UnischemaField",
    "as_field",
    "from_field",
    "infer_unischema",
    "select_fields",
]


class UnischemaField(NamedTuple):
    """One field: its name, NumPy type, shape (``None`` for a size that varies), codec.

    The same fields as Petastorm's, so ``TransformSpec(edit_fields=[UnischemaField(...)])``
    works as it does there.

    Example:
        import numpy as np

        field = UnischemaField("image", np.uint8, (None, None, 3), None, False)
        assert field.shape == (None, None, 3)
    """

    name: str
    numpy_dtype: Any
    shape: tuple[int | None, ...]
    codec: Any = None
    nullable: bool | None = False

    def __setstate__(self, state: Any) -> None:
        """Nothing: a field pickled with an empty ``__dict__`` holds all it has in the tuple."""


class Unischema:
    """A dataset's fields in order, with Petastorm's ``fields`` and ``make_namedtuple``.

    Args:
        name: The schema's name (the namedtuples are ``<name>_view``).
        fields: Its fields, in order.

    Example:
        import numpy as np

        schema = Unischema("Hello", [UnischemaField("id", np.int32, ())])
        row = schema.make_namedtuple(id=np.int32(1))
        assert row.id == 1 and list(schema.fields) == ["id"]
    """

    def __init__(self, name: str, fields: Iterable[UnischemaField]) -> None:
        self._assign(name, fields)

    def _assign(self, name: str, fields: Iterable[UnischemaField]) -> None:
        self._name = str(name)
        self._fields: collections.OrderedDict[str, UnischemaField] = collections.OrderedDict(
            (field.name, field) for field in fields
        )

    def __getstate__(self) -> dict[str, Any]:
        # What Petastorm's own Unischema holds: the fields again as attributes (its syntax sugar),
        # so Petastorm reading a schema written here has them too.
        return {
            "_name": self._name,
            "_fields": self._fields,
            **{
                name: field
                for name, field in self._fields.items()
                if name.isidentifier() and not name.startswith("_") and not hasattr(Unischema, name)
            },
        }

    def __setstate__(self, state: Any) -> None:
        # What Petastorm's pickle holds: its name and an OrderedDict of fields (and, as
        # attributes, the fields again, which are not needed).
        if not isinstance(state, dict) or not isinstance(state.get("_fields"), Mapping):
            raise ShardFormatError(
                "the Unischema in the dataset's metadata holds no fields: it is not Petastorm's"
            )
        fields = list(state["_fields"].values())
        bad = [field for field in fields if not isinstance(field, UnischemaField)]
        if bad:
            raise ShardFormatError(
                f"the Unischema's fields include {type(bad[0]).__name__}, not UnischemaField: "
                f"the metadata is not Petastorm's"
            )
        self._assign(str(state.get("_name", "Unischema")), fields)

    @property
    def name(self) -> str:
        """The schema's name."""
        return self._name

    @property
    def fields(self) -> collections.OrderedDict[str, UnischemaField]:
        """The fields by name, in order."""
        return self._fields

    def __getattr__(self, name: str) -> UnischemaField:
        fields = self.__dict__.get("_fields", {})
        if name in fields:
            return fields[name]  # type: ignore[no-any-return]
        raise AttributeError(name)

    def __repr__(self) -> str:
        listed = "".join(f"  {field!r},\n" for field in self._fields.values())
        return f"Unischema({self._name}, [\n{listed}])"

    def as_spark_schema(self) -> Any:
        """The ``pyspark.sql.types.StructType`` Spark writes this schema's rows with.

        A field with a codec takes its codec's Spark type; one without, the Spark type of its
        NumPy scalar type, as in Petastorm.

        Raises:
            ConfigurationError: A field without a codec that is an array, or of a NumPy type
                with no Spark type.

        Example:
            rows = sc.parallelize(range(10)).map(lambda i: dict_to_spark_row(schema, row(i)))
            spark.createDataFrame(rows, schema.as_spark_schema()).write.parquet(url)
        """
        types = require("pyspark.sql.types", extra="spark", purpose="Unischema.as_spark_schema")
        return types.StructType(
            [
                types.StructField(field.name, _spark_type(field, types), bool(field.nullable))
                for field in self._fields.values()
            ]
        )

    def create_schema_view(self, fields: Sequence[Any]) -> Unischema:
        """The schema of ``fields`` (UnischemaFields or regular expressions), Petastorm's way.

        Raises:
            NoMatchingFieldsError: Nothing matches.
            ConfigurationError: A field that is not this schema's.
        """
        return self.view(select_fields(self, fields))

    def view(self, names: Sequence[str]) -> Unischema:
        """The schema of only ``names``, in this schema's order."""
        wanted = set(names)
        return Unischema(
            f"{self._name}_view", [f for f in self._fields.values() if f.name in wanted]
        )

    def make_namedtuple(self, **values: Any) -> Any:
        """A row of this schema from each field's value, by field name.

        Raises:
            ConfigurationError: A field without a value, or a value of no field.
        """
        if set(values) != set(self._fields):
            raise ConfigurationError(
                f"a row of {self._name} takes a value for each of {', '.join(self._fields)}; "
                f"got {', '.join(values)}"
            )
        return self.namedtuple_type()(*(values[name] for name in self._fields))

    def make_namedtuple_tf(self, *args: Any, **kwargs: Any) -> Any:
        """A row from positional or keyword values (Petastorm's TensorFlow helper)."""
        return self.namedtuple_type()(*args, **kwargs)

    def namedtuple_type(self) -> Any:
        """The namedtuple of this schema's rows: one per schema name and field names."""
        key = (self._name, tuple(self._fields))
        if key not in _NAMEDTUPLES:
            _NAMEDTUPLES[key] = collections.namedtuple(
                f"{self._name}_view", list(self._fields), rename=True
            )
        return _NAMEDTUPLES[key]


# One namedtuple type per schema and fields, so rows of two readers of one schema compare.
_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], Any] = {}


def _spark_type(field: UnischemaField, types: Any) -> Any:
    """The Spark type of ``field``'s column (its codec's, or its NumPy type's)."""
    if field.codec is not None:
        return field.codec.spark_dtype()
    numpy_to_spark = {
        np.int8: types.ByteType(), np.uint8: types.ShortType(), np.int16: types.ShortType(),
        np.uint16: types.IntegerType(), np.int32: types.IntegerType(),
        np.int64: types.LongType(), np.float32: types.FloatType(),
        np.float64: types.DoubleType(), np.bytes_: types.StringType(),
        np.str_: types.StringType(), np.bool_: types.BooleanType(),
    }  # fmt: skip
    found = numpy_to_spark.get(field.numpy_dtype) if field.shape == () else None
    if found is None:
        raise ConfigurationError(
            f"field {field.name!r} ({getattr(field.numpy_dtype, '__name__', field.numpy_dtype)}, "
            f"shape {field.shape}) has no codec and no Spark type of its own: give it a codec "
            f"(ScalarCodec for a scalar, NdarrayCodec for an array)"
        )
    return found


def select_fields(schema: Unischema, wanted: Sequence[Any] | None) -> list[str]:
    """The names ``schema_fields`` selects: fields, names or regular expressions (full match).

    Raises:
        NoMatchingFieldsError: Nothing matches (a ``RuntimeError``, as Petastorm raises).
        ConfigurationError: A field that is not the schema's.
    """
    if wanted is None:
        return list(schema.fields)
    if isinstance(wanted, (str, bytes)) or not isinstance(wanted, Iterable):
        raise ConfigurationError(
            f"schema_fields must be a list of field names, regular expressions or "
            f"UnischemaFields, got {wanted!r}"
        )
    chosen: set[str] = set()
    for item in wanted:
        if isinstance(item, tuple) and hasattr(item, "name"):  # a UnischemaField, any module's
            if item.name not in schema.fields:
                raise ConfigurationError(
                    f"schema_fields names the field {item.name!r}, which the dataset does not "
                    f"have; its fields are {', '.join(schema.fields)}"
                )
            chosen.add(item.name)
        elif isinstance(item, str):
            chosen.update(name for name in schema.fields if re.fullmatch(item, name))
        else:
            raise ConfigurationError(
                f"schema_fields holds {item!r}; give field names, regular expressions or "
                f"UnischemaFields"
            )
    if not chosen:
        raise NoMatchingFieldsError(  # Petastorm's opening words, which its users match
            f"No fields matching the criteria {list(wanted)!r} were found in the dataset: no "
            f"field matches schema_fields; the dataset's fields are {', '.join(schema.fields)}"
        )
    return [name for name in schema.fields if name in chosen]


def as_field(field: UnischemaField) -> Field:
    """``field`` as the loaders' :class:`~shardstream.loader.fields.Field` (its array dtype).

    Text is ``str_``, bytes and decimals are ``object`` (a batch holds them as Python objects).
    """
    kind = field.numpy_dtype
    if isinstance(kind, type) and issubclass(kind, (Decimal, np.bytes_, bytes)):
        dtype = np.dtype(object)
    elif kind is str:
        dtype = np.dtype(np.str_)
    else:
        try:
            dtype = np.dtype(kind)
        except TypeError:
            dtype = np.dtype(object)
    shape = None if field.shape is None else tuple(field.shape)
    return Field(field.name, dtype, shape, bool(field.nullable))


def from_field(field: Field) -> UnischemaField:
    """A :class:`~shardstream.loader.fields.Field` as a codec-less :class:`UnischemaField`."""
    shape = () if field.shape is None else field.shape
    return UnischemaField(field.name, field.dtype.type, shape, None, field.nullable)


def infer_unischema(arrow_schema: Any, partitions: Mapping[str, str]) -> Unischema:
    """The schema Petastorm infers for a Parquet dataset with no stored Unischema.

    Args:
        arrow_schema: The files' ``pyarrow.Schema``.
        partitions: The partition columns and their Arrow types (``'int64'``, ``'string'``),
            which come first.

    Columns of types NumPy does not hold (structs, maps, lists of lists) are left out, as
    Petastorm leaves them out.
    """
    pa = require("pyarrow", extra="arrow", purpose="Reading Parquet")
    fields = [
        UnischemaField(name, np.int64 if kind == "int64" else np.str_, (), None, False)
        for name, kind in partitions.items()
    ]
    for arrow_field in arrow_schema:
        kind = arrow_field.type
        shape: tuple[int | None, ...] = ()
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            kind, shape = kind.value_type, (None,)
        numpy_type = _numpy_type(kind, pa)
        if numpy_type is not None and arrow_field.name not in partitions:
            fields.append(
                UnischemaField(arrow_field.name, numpy_type, shape, None, arrow_field.nullable)
            )
    return Unischema("inferred_schema", fields)


def _numpy_type(kind: Any, pa: Any) -> Any:
    """The NumPy type Petastorm gives an Arrow type, or ``None`` when there is none."""
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return np.dtype(kind.to_pandas_dtype()).type
    if pa.types.is_boolean(kind):
        return np.bool_
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return np.str_
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return np.bytes_
    if pa.types.is_fixed_size_binary(kind):
        return np.bytes_
    if pa.types.is_decimal(kind):
        return Decimal
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        return np.datetime64
    return None
