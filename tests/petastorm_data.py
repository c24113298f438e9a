"""Petastorm-style datasets for the reader tests, written as Petastorm writes them.

Petastorm does not import beside Spark 4's pyarrow, so its classes are stood in for here by
classes of the same names, fields and encodings, registered (while pickling) as the modules
``petastorm.unischema`` and ``petastorm.codecs``: the pickle of a schema is byte for byte what
Petastorm's ``materialize_dataset`` stores under ``dataset-toolkit.unischema.v1`` in
``_common_metadata``. The codecs encode as Petastorm's: ``np.save`` bytes, ``np.savez_compressed``
bytes (``arr=``), PNG files (an RGB image written as OpenCV writes Petastorm's BGR-swapped
pixels: a plain RGB PNG) and Spark scalars.
"""

from __future__ import annotations

import collections
import contextlib
import io
import pickle
import sys
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

UNISCHEMA_KEY = b"dataset-toolkit.unischema.v1"


class UnischemaField(NamedTuple):
    name: str
    numpy_dtype: Any
    shape: tuple[int | None, ...]
    codec: Any = None
    nullable: bool = False


class Unischema:
    def __init__(self, name: str, fields: Sequence[UnischemaField]) -> None:
        self._name = name
        self._fields = collections.OrderedDict((f.name, f) for f in fields)
        for field in fields:  # Petastorm's attribute access, pickled with the schema
            setattr(self, field.name, field)

    @property
    def fields(self) -> collections.OrderedDict[str, UnischemaField]:
        return self._fields


class ScalarCodec:
    def __init__(self, spark_type: Any) -> None:
        self._spark_type = spark_type

    def encode(self, field: UnischemaField, value: Any) -> Any:
        name = type(self._spark_type).__name__
        if name in ("ByteType", "ShortType", "IntegerType", "LongType"):
            return int(value)
        if name in ("FloatType", "DoubleType"):
            return float(value)
        if name == "BooleanType":
            return bool(value)
        return value


class NdarrayCodec:
    def encode(self, field: UnischemaField, value: Any) -> bytes:
        memfile = io.BytesIO()
        np.save(memfile, value)
        return memfile.getvalue()


class CompressedNdarrayCodec:
    def encode(self, field: UnischemaField, value: Any) -> bytes:
        memfile = io.BytesIO()
        np.savez_compressed(memfile, arr=value)
        return memfile.getvalue()


class CompressedImageCodec:
    def __init__(self, image_codec: str = "png", quality: int = 80) -> None:
        self._image_codec = "." + image_codec
        self._quality = quality

    def encode(self, field: UnischemaField, value: Any) -> bytes:
        from PIL import Image

        memfile = io.BytesIO()
        kind = "PNG" if self._image_codec == ".png" else "JPEG"
        Image.fromarray(value).save(memfile, format=kind, quality=self._quality)
        return memfile.getvalue()


_MODULES = {
    "petastorm.unischema": (Unischema, UnischemaField),
    "petastorm.codecs": (ScalarCodec, NdarrayCodec, CompressedNdarrayCodec, CompressedImageCodec),
}


@contextlib.contextmanager
def petastorm_modules() -> Iterator[None]:
    """The stand-ins registered as Petastorm's modules (what pickle names them by), then not."""
    saved = {name: sys.modules.get(name) for name in ("petastorm", *_MODULES)}
    package = types.ModuleType("petastorm")
    sys.modules["petastorm"] = package
    try:
        for name, classes in _MODULES.items():
            module = types.ModuleType(name)
            for cls in classes:
                cls.__module__ = name
                setattr(module, cls.__name__, cls)
            sys.modules[name] = module
        yield
    finally:
        for classes in _MODULES.values():
            for cls in classes:
                cls.__module__ = __name__
        for name, before in saved.items():
            if before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = before


def pickled(schema: Unischema, protocol: int | None = None) -> bytes:
    """The schema pickled as Petastorm pickles it (its default protocol unless given)."""
    with petastorm_modules():
        return pickle.dumps(schema, protocol=protocol)


def _restore(name: str, fields: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    """Never called: it marks where pyspark's ``_restore`` goes in a legacy pickle."""
    raise AssertionError("written by name only")


_PurePickler: Any = pickle._Pickler  # the pure-Python pickler: its save() can be overridden


class _LegacyPickler(_PurePickler):  # type: ignore[misc]
    """Pickles as Petastorm 0.4-0.7 under pyspark's namedtuple patch, in protocol 0.

    With pyspark imported, each namedtuple pickled as ``pyspark.serializers._restore(name,
    fields, values)``; UnischemaField was a plain namedtuple then, so each field did so.
    """

    def __init__(self, file: io.BytesIO, namedtuples: tuple[type, ...]) -> None:
        super().__init__(file, protocol=0)
        self._namedtuples = namedtuples

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, self._namedtuples):
            row: Any = obj
            return _restore, (type(row).__name__, type(row)._fields, tuple(row))
        return NotImplemented

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if obj is not _restore:
            super().save(obj, save_persistent_id)
        elif id(obj) in self.memo:
            self.write(self.get(self.memo[id(obj)][0]))
        else:
            self.write(pickle.GLOBAL + b"pyspark.serializers\n_restore\n")
            self.memoize(obj)


def legacy_pickled(schema: Any, namedtuples: tuple[type, ...] = (UnischemaField,)) -> bytes:
    """``schema`` pickled as Petastorm 0.4-0.7 stored it (``pyspark.serializers._restore``)."""
    memfile = io.BytesIO()
    with petastorm_modules():
        _LegacyPickler(memfile, namedtuples).dump(schema)
    return memfile.getvalue()


def hello_schema() -> Unischema:
    """Petastorm's HelloWorld schema, with every codec, and a partition field ``part``."""
    from pyspark.sql.types import DoubleType, IntegerType, StringType

    return Unischema(
        "HelloSchema",
        [
            UnischemaField("id", np.int32, (), ScalarCodec(IntegerType()), False),
            UnischemaField("part", np.int32, (), ScalarCodec(IntegerType()), False),
            UnischemaField("label", np.str_, (), ScalarCodec(StringType()), False),
            UnischemaField("score", np.float64, (), ScalarCodec(DoubleType()), False),
            UnischemaField("matrix", np.float32, (4, 3), NdarrayCodec(), False),
            UnischemaField("sparse", np.int16, (None,), CompressedNdarrayCodec(), False),
            UnischemaField("image", np.uint8, (8, 6, 3), CompressedImageCodec("png"), False),
            UnischemaField("gray", np.uint8, (5, 7), CompressedImageCodec("png"), False),
        ],
    )


def hello_row(i: int) -> dict[str, Any]:
    """Row ``i`` of the hello dataset, as Python/NumPy values (what a reader decodes back)."""
    rng = np.random.default_rng(np.random.SeedSequence(i))
    return {
        "id": np.int32(i),
        "part": np.int32(i % 3),
        "label": np.str_(f"row-{i}"),
        "score": np.float64(i / 8),
        "matrix": rng.standard_normal((4, 3)).astype(np.float32),
        "sparse": np.arange(i % 5, dtype=np.int16) * np.int16(i),
        "image": rng.integers(0, 256, (8, 6, 3), dtype=np.uint8),
        "gray": rng.integers(0, 256, (5, 7), dtype=np.uint8),
    }


def encoded(schema: Unischema, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` encoded by each field's codec (Petastorm's ``dict_to_spark_row``)."""
    return {
        name: field.codec.encode(field, row[name]) if field.codec else row[name]
        for name, field in schema.fields.items()
    }


def arrow_schema(schema: Unischema, partition: str | None) -> pa.Schema:
    """The Parquet columns Spark writes for ``schema`` (binary for arrays and images)."""
    types_of = {np.int32: pa.int32(), np.str_: pa.string(), np.float64: pa.float64()}
    fields = []
    for name, field in schema.fields.items():
        if name == partition:
            continue
        kind = types_of[field.numpy_dtype] if not field.shape else pa.binary()
        fields.append(pa.field(name, kind, nullable=bool(field.nullable)))
    return pa.schema(fields)


def write_hello(
    root: Path,
    rows: int = 60,
    *,
    files: int = 3,
    row_group: int = 7,
    partition: str | None = "part",
    schema: Unischema | None = None,
    metadata: bytes | None = None,
) -> Path:
    """Write the hello dataset as ``materialize_dataset`` + Spark would, ``_common_metadata`` too.

    Rows are spread over ``files`` files per partition folder (``part=<i % 3>``), row groups
    of ``row_group`` rows. ``metadata`` replaces the pickled Unischema (a hostile one, say).
    """
    schema = schema or hello_schema()
    columns = arrow_schema(schema, partition)
    groups: dict[Any, list[dict[str, Any]]] = collections.defaultdict(list)
    for i in range(rows):
        row = encoded(schema, hello_row(i))
        groups[row[partition] if partition else None].append(row)
    for value, members in sorted(groups.items(), key=lambda item: str(item[0])):
        folder = root / f"{partition}={value}" if partition else root
        folder.mkdir(parents=True, exist_ok=True)
        for number in range(files):
            chunk = members[number::files]
            if chunk:
                table = pa.Table.from_pylist(
                    [{k: v for k, v in r.items() if k != partition} for r in chunk], columns
                )
                pq.write_table(
                    table, folder / f"part-{number:05d}.parquet", row_group_size=row_group
                )
    (root / "_SUCCESS").write_bytes(b"")
    stored = metadata if metadata is not None else pickled(schema)
    pq.write_metadata(columns.with_metadata({UNISCHEMA_KEY: stored}), root / "_common_metadata")
    return root
