"""The stored Unischema: loaded as Petastorm pickles it, and never allowed to run code."""

from __future__ import annotations

import collections
import os
import pickle
import sys
import types
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.petastorm_data import (
    UNISCHEMA_KEY,
    NdarrayCodec,
    ScalarCodec,
    Unischema,
    UnischemaField,
    hello_row,
    hello_schema,
    legacy_pickled,
    pickled,
    write_hello,
)

from shardstream.errors import ShardFormatError, UnsafePickleError
from shardstream.loader.petastorm import codecs, make_reader
from shardstream.loader.petastorm import unischema as stand_ins
from shardstream.loader.petastorm.metadata import dump_unischema, load_unischema, read_unischema
from shardstream.storage import LocalStore


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_petastorms_pickle_loads_into_the_stand_ins(protocol: int):
    schema = load_unischema(pickled(hello_schema(), protocol), source="t")
    assert isinstance(schema, stand_ins.Unischema)
    assert schema.name == "HelloSchema"
    assert list(schema.fields) == list(hello_schema().fields)
    image = schema.fields["image"]
    assert isinstance(image, stand_ins.UnischemaField)
    assert (image.numpy_dtype, image.shape, image.nullable) == (np.uint8, (8, 6, 3), False)
    assert isinstance(image.codec, codecs.CompressedImageCodec)
    assert image.codec._image_codec == ".png"
    scalar = schema.fields["id"].codec
    assert isinstance(scalar, codecs.ScalarCodec)
    assert scalar.spark_dtype().type_name == "IntegerType"
    assert schema.id is schema.fields["id"]  # Petastorm's attribute access
    assert isinstance(schema.fields["sparse"].codec, codecs.CompressedNdarrayCodec)


def test_numpy_dtypes_decimals_and_spark_type_attributes_load():
    from pyspark.sql.types import DecimalType

    schema = Unischema("S", [
        UnischemaField("a", np.dtype("float32"), (None, 2), NdarrayCodec(), True),
        UnischemaField("d", Decimal, (), ScalarCodec(DecimalType(10, 2))),
    ])  # fmt: skip
    loaded = load_unischema(pickled(schema), source="t")
    assert loaded.fields["a"].numpy_dtype == np.dtype("float32")
    assert loaded.fields["a"].nullable is True
    assert loaded.fields["d"].codec.spark_dtype().state == {
        "precision": 10, "scale": 2, "hasPrecisionInfo": True,
    }  # fmt: skip


class _RunsCode:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


class _Evaluates:
    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, ("__import__('os').getpid()",))


@pytest.mark.parametrize("make", [_RunsCode, lambda _: _Evaluates()])
def test_a_hostile_pickle_is_refused_before_anything_runs(tmp_path: Path, make: Any):
    marker = tmp_path / "ran"
    schema = Unischema("S", [UnischemaField("x", np.int32, (), make(marker))])
    with pytest.raises(UnsafePickleError, match=r"(posix\.system|builtins\.eval).*not load"):
        load_unischema(pickled(schema), source="ds/_common_metadata")
    assert not marker.exists()


def test_an_unknown_codec_class_is_named_in_the_refusal(monkeypatch: pytest.MonkeyPatch):
    class MyCodec:
        pass

    MyCodec.__module__, MyCodec.__qualname__ = "mycodecs", "MyCodec"
    module = types.ModuleType("mycodecs")
    module.MyCodec = MyCodec  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mycodecs", module)
    data = pickled(Unischema("S", [UnischemaField("x", np.int32, (), MyCodec())]))
    with pytest.raises(UnsafePickleError, match=r"ds/_common_metadata: .*mycodecs\.MyCodec"):
        load_unischema(data, source="ds/_common_metadata")


@pytest.mark.parametrize(
    "name",
    [
        "builtins.getattr",
        "numpy.load",
        "pyspark.sql.SparkSession",
        "copyreg.__newobj__",
        "petastorm.unischema.dict_to_spark_row",
    ],
)
def test_names_outside_a_schema_are_refused(name: str):
    module, attribute = name.rsplit(".", 1)
    data = b"\x80\x04c" + module.encode() + b"\n" + attribute.encode() + b"\n."
    with pytest.raises(UnsafePickleError):
        load_unischema(data, source="t")


def test_petastorms_old_package_names_load():
    data = pickled(hello_schema(), 0).replace(
        b"cpetastorm.unischema\n", b"cav.ml.dataset_toolkit.unischema\n"
    )
    assert b"av.ml.dataset_toolkit" in data
    assert list(load_unischema(data, source="t").fields) == list(hello_schema().fields)


@pytest.mark.parametrize("data", [pickle.dumps({"a": 1}), b"not a pickle", pickle.dumps(3)])
def test_anything_but_a_unischema_is_a_format_error(data: bytes):
    with pytest.raises(ShardFormatError):
        load_unischema(data, source="t")


def test_the_metadata_is_found_at_the_root_or_beside_the_first_file(tmp_path: Path):
    root = write_hello(tmp_path / "ds", 12)
    assert next(iter(read_unischema(LocalStore(str(root)), None).fields)) == "id"  # type: ignore[union-attr]
    moved = root / "part=0" / "_common_metadata"
    (root / "_common_metadata").rename(moved)
    assert read_unischema(LocalStore(str(root)), None) is None
    found = read_unischema(LocalStore(str(root)), "part=0/part-00000.parquet")
    assert found is not None
    assert found.name == "HelloSchema"


def test_a_common_metadata_without_a_unischema_gives_none(tmp_path: Path):
    pq.write_metadata(pa.schema([("a", pa.int32())]), tmp_path / "_common_metadata")
    assert read_unischema(LocalStore(str(tmp_path)), None) is None
    (tmp_path / "_common_metadata").write_bytes(b"junk")
    with pytest.raises(ShardFormatError, match="not a Parquet metadata file"):
        read_unischema(LocalStore(str(tmp_path)), None)


def test_the_key_is_petastorms():
    assert UNISCHEMA_KEY == b"dataset-toolkit.unischema.v1"


def test_petastorm_0_4_to_0_7_fields_restored_by_pyspark_load():
    data = legacy_pickled(hello_schema())
    assert b"cpyspark.serializers\n_restore\n" in data  # as those versions stored it
    assert b"UnischemaField" in data
    assert b"petastorm.unischema\nUnischemaField" not in data
    schema = load_unischema(data, source="t")
    assert list(schema.fields) == list(hello_schema().fields)
    image = schema.fields["image"]
    assert isinstance(image, stand_ins.UnischemaField)
    assert (image.numpy_dtype, image.shape, image.nullable) == (np.uint8, (8, 6, 3), False)
    assert isinstance(image.codec, codecs.CompressedImageCodec)


def test_a_petastorm_0_4_dataset_reads_with_make_reader(tmp_path: Path):
    root = write_hello(tmp_path / "old", 12, metadata=legacy_pickled(hello_schema()))
    with make_reader(str(root), shuffle_row_groups=False) as reader:
        rows = list(reader)
    assert sorted(int(row.id) for row in rows) == list(range(12))
    for row in rows:
        np.testing.assert_array_equal(row.image, hello_row(int(row.id))["image"])


Evil = collections.namedtuple("Evil", ["name", "numpy_dtype", "shape"])
# A field of another shape under UnischemaField's name.
OddField = collections.namedtuple("UnischemaField", ["name", "numpy_dtype", "shape", "code"])  # type: ignore[name-match]


def test_pysparks_restore_builds_no_other_namedtuple():
    with pytest.raises(UnsafePickleError, match="namedtuple 'Evil'"):
        load_unischema(legacy_pickled(Evil("x", np.int32, ()), (Evil,)), source="t")
    with pytest.raises(UnsafePickleError, match="with the fields"):
        load_unischema(legacy_pickled(OddField("x", np.int32, (), 1), (OddField,)), source="t")


def written_schema() -> stand_ins.Unischema:
    from pyspark.sql.types import DecimalType, IntegerType

    return stand_ins.Unischema("Written", [
        stand_ins.UnischemaField("id", np.int32, (), codecs.ScalarCodec(IntegerType()), False),
        stand_ins.UnischemaField("ok", np.bool_, (), None, True),
        stand_ins.UnischemaField("d", Decimal, (), codecs.ScalarCodec(DecimalType(10, 2))),
        stand_ins.UnischemaField("m", np.float32, (None, 3), codecs.NdarrayCodec(), False),
        stand_ins.UnischemaField("z", np.int8, (2,), codecs.CompressedNdarrayCodec(), False),
        stand_ins.UnischemaField("im", np.uint8, (4, 4, 3), codecs.CompressedImageCodec("jpeg", 90),
                                 True),
    ])  # fmt: skip


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_written_schema_names_petastorms_classes_and_loads_back(protocol: int):
    data = dump_unischema(written_schema(), protocol)
    for name in (
        b"petastorm.unischema",
        b"Unischema",
        b"UnischemaField",
        b"petastorm.codecs",
        b"ScalarCodec",
        b"CompressedImageCodec",
        b"pyspark.sql.types",
        b"bool_",
    ):
        assert name in data  # fmt: skip
    assert b"shardstream" not in data
    loaded = load_unischema(data, source="t")
    assert list(loaded.fields) == ["id", "ok", "d", "m", "z", "im"]
    assert loaded.fields["ok"].numpy_dtype is np.bool_
    assert loaded.fields["d"].codec.spark_dtype().state == {
        "precision": 10, "scale": 2, "hasPrecisionInfo": True,
    }  # fmt: skip
    assert loaded.fields["im"].codec._quality == 90
    assert loaded.id is loaded.fields["id"]  # the attributes Petastorm's schema pickles too
    assert dump_unischema(loaded, protocol) == data or protocol < 2  # a loaded one writes alike


def test_numpy_2s_name_of_bool_loads():
    assert load_unischema(pickled(Unischema("B", [UnischemaField("b", np.bool_, ())])),
                          source="t").fields["b"].numpy_dtype is np.bool_  # fmt: skip
    assert b"numpy\nbool\n" in pickle.dumps(np.bool_, protocol=0)  # what NumPy 2 writes
