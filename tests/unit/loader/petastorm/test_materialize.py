"""dict_to_spark_row and the _common_metadata that materialize_dataset stores (Spark-free)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.errors import ConfigurationError, SampleValueError
from shardstream.loader.petastorm import (
    NdarrayCodec,
    ScalarCodec,
    Unischema,
    UnischemaField,
    dict_to_spark_row,
)
from shardstream.loader.petastorm.materialize import write_common_metadata
from shardstream.loader.petastorm.metadata import (
    ROW_GROUPS_PER_FILE_KEY,
    UNISCHEMA_KEY,
    dump_unischema,
    load_unischema,
)
from shardstream.storage import LocalStore


def schema() -> Unischema:
    from pyspark.sql.types import IntegerType

    return Unischema("S", [
        UnischemaField("id", np.int32, (), ScalarCodec(IntegerType()), False),
        UnischemaField("m", np.float32, (2,), NdarrayCodec(), False),
        UnischemaField("n", np.int64, (), None, True),
    ])  # fmt: skip


def test_a_row_is_encoded_in_the_schemas_order_with_nulls_filled_in():
    row = dict_to_spark_row(schema(), {"m": np.ones(2, np.float32), "id": np.int32(4)})
    assert row.__fields__ == ["id", "m", "n"]
    assert row.id == 4
    assert type(row.id) is int
    assert row.n is None
    np.testing.assert_array_equal(np.load(io.BytesIO(row.m)), np.ones(2))
    assert (
        dict_to_spark_row(schema(), {"id": 1, "m": np.ones(2, np.float32), "n": np.int64(3)}).n == 3
    )


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({"id": 1}, "missing \\['m'\\]"),
        ({"id": 1, "m": np.ones(2, np.float32), "x": 1}, "unknown \\['x'\\]"),
        ({"id": None, "m": np.ones(2, np.float32)}, "'id' is not nullable"),
        ({"id": 1, "m": np.ones(3, np.float32)}, "field 'm'"),
    ],
)
def test_rows_that_do_not_fit_the_schema_are_refused(row: dict[str, object], match: str):
    with pytest.raises(SampleValueError, match=match):
        dict_to_spark_row(schema(), row)


def test_the_common_metadata_holds_the_schema_and_the_row_group_counts(tmp_path: Path):
    table = pa.table({"id": pa.array(range(10), pa.int32()), "m": [b"x"] * 10, "n": [None] * 10})
    (tmp_path / "k=1").mkdir()
    pq.write_table(table, tmp_path / "k=1" / "part-0.parquet", row_group_size=3)
    pq.write_table(table, tmp_path / "part-1.parquet", row_group_size=5)
    (tmp_path / "_SUCCESS").write_bytes(b"")
    (tmp_path / ".part-1.parquet.crc").write_bytes(b"crc")
    (tmp_path / "._common_metadata.crc").write_bytes(b"stale")
    write_common_metadata(LocalStore(str(tmp_path)), dump_unischema(schema()))
    stored = pq.read_schema(tmp_path / "_common_metadata")
    assert stored.names == ["id", "m", "n"]
    assert list(load_unischema(stored.metadata[UNISCHEMA_KEY], source="t").fields) == [
        "id",
        "m",
        "n",
    ]
    counts = json.loads(stored.metadata[ROW_GROUPS_PER_FILE_KEY])
    assert counts == {"k=1/part-0.parquet": 4, "part-1.parquet": 2}
    assert not (tmp_path / "._common_metadata.crc").exists()


def test_no_data_file_is_an_error_saying_where_to_write(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="inside the block"):
        write_common_metadata(LocalStore(str(tmp_path)), dump_unischema(schema()))


def test_as_spark_schema_takes_codecs_types_and_numpy_types():
    from pyspark.sql.types import BinaryType, IntegerType, LongType

    spark = schema().as_spark_schema()
    assert [(f.name, f.dataType, f.nullable) for f in spark.fields] == [
        ("id", IntegerType(), False), ("m", BinaryType(), False), ("n", LongType(), True),
    ]  # fmt: skip
    bad = Unischema("B", [UnischemaField("a", np.float32, (3,), None, False)])
    with pytest.raises(ConfigurationError, match=r"'a'.*give it a codec"):
        bad.as_spark_schema()
