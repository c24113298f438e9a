"""Petastorm's own test datasets (its ``test_common``'s), written with our writers and Spark.

The schema and rows are those of Petastorm's ``TestSchema`` (NumPy 2 names: ``np.str_`` and
``np.bytes_`` for ``np.unicode_`` and ``np.string_``), the rows drawn from a seeded Generator
per id. The rows are encoded with :func:`dict_to_spark_row` and written by Spark inside
:func:`materialize_dataset`, partitioned by ``partition_key``, as Petastorm's helper does; the
encoding runs on the driver (Petastorm's runs in Spark's workers), so the workers need not
import the tests.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np

from shardstream.loader.petastorm import (
    CompressedImageCodec,
    NdarrayCodec,
    ScalarCodec,
    Unischema,
    UnischemaField,
    dict_to_spark_row,
    materialize_dataset,
)

IMAGE_SIZE = (32, 16, 3)


def petastorm_test_schema() -> Unischema:
    """Petastorm's ``TestSchema``."""
    from pyspark.sql.types import DecimalType, ShortType

    return Unischema("TestSchema", [
        UnischemaField("partition_key", np.str_, ()),
        UnischemaField("id", np.int64, ()),
        UnischemaField("id2", np.int32, (), ScalarCodec(ShortType()), False),
        UnischemaField("id_float", np.float64, ()),
        UnischemaField("id_odd", np.bool_, ()),
        UnischemaField("python_primitive_uint8", np.uint8, ()),
        UnischemaField("image_png", np.uint8, IMAGE_SIZE, CompressedImageCodec("png"), False),
        UnischemaField("matrix", np.float32, IMAGE_SIZE, NdarrayCodec(), False),
        UnischemaField("decimal", Decimal, (), ScalarCodec(DecimalType(10, 9)), False),
        UnischemaField("matrix_uint16", np.uint16, IMAGE_SIZE, NdarrayCodec(), False),
        UnischemaField("matrix_uint32", np.uint32, IMAGE_SIZE, NdarrayCodec(), False),
        UnischemaField("matrix_string", np.bytes_, (None, None), NdarrayCodec(), False),
        UnischemaField("empty_matrix_string", np.bytes_, (None,), NdarrayCodec(), False),
        UnischemaField("matrix_nullable", np.uint16, IMAGE_SIZE, NdarrayCodec(), True),
        UnischemaField("sensor_name", np.str_, (1,), NdarrayCodec(), False),
        UnischemaField("string_array_nullable", np.str_, (None,), NdarrayCodec(), True),
        UnischemaField("integer_nullable", np.int32, (), nullable=True),
    ])  # fmt: skip


def random_row(id_num: int) -> dict[str, Any]:
    """Petastorm's ``_randomize_row``: row ``id_num`` of the test dataset."""
    rng = np.random.default_rng(id_num)
    strings = [["".join(rng.choice(["\x00", "A", "B"], rng.integers(0, 11))) for _ in range(3)]
               for _ in range(2)]  # fmt: skip
    return {
        "id": np.int64(id_num),
        "id2": np.int32(id_num % 2),
        "id_float": np.float64(id_num),
        "id_odd": np.bool_(id_num % 2),
        "partition_key": np.str_(f"p_{id_num // 10}"),
        "python_primitive_uint8": np.uint8(rng.integers(0, 255)),
        "image_png": rng.integers(0, 255, IMAGE_SIZE).astype(np.uint8),
        "matrix": rng.random(IMAGE_SIZE).astype(np.float32),
        "decimal": Decimal(int(rng.integers(0, 255))) / Decimal(100),
        "matrix_uint16": rng.integers(0, 2**16 - 1, IMAGE_SIZE).astype(np.uint16),
        "matrix_uint32": rng.integers(0, 2**32 - 1, IMAGE_SIZE).astype(np.uint32),
        "matrix_string": np.asarray(strings).astype(np.bytes_),
        "empty_matrix_string": np.asarray([], dtype=np.bytes_),
        "matrix_nullable": None,
        "sensor_name": np.asarray(["test_sensor"], dtype=np.str_),
        "string_array_nullable": None
        if id_num % 5 == 0
        else np.asarray([], dtype=np.str_)
        if id_num % 4 == 0
        else np.asarray([str(i + id_num) for i in range(2)], dtype=np.str_),
        "integer_nullable": None if id_num % 2 else np.int32(id_num),
    }


def create_test_dataset(
    spark: Any, url: str, rows: range, num_files: int = 2, use_summary_metadata: bool = False
) -> list[dict[str, Any]]:
    """Write the test dataset at ``url`` as Petastorm's helper does; return its rows."""
    schema = petastorm_test_schema()
    data = [random_row(i) for i in rows]
    with materialize_dataset(spark, url, schema, use_summary_metadata=use_summary_metadata):
        encoded = [dict_to_spark_row(schema, row) for row in data]
        frame = spark.createDataFrame(encoded, schema.as_spark_schema()).sort("id")
        frame.coalesce(num_files).write.option("compression", "none") \
            .partitionBy("partition_key").mode("overwrite").parquet(url)  # fmt: skip
    return data


def scalar_row(i: int) -> dict[str, Any]:
    """Row ``i`` of Petastorm's scalar dataset, as its ``create_test_scalar_dataset`` expects it."""
    return {
        "id": np.int32(i),
        "id_div_700": np.int32(i // 700),
        "datetime": np.datetime64("2019-01-02"),
        "timestamp": np.datetime64("2005-02-25T03:30"),
        "string": np.str_(f"hello_{i}"),
        "string2": np.str_(f"world_{i}"),
        "float64": np.float64(i) * 0.66,
        "int_fixed_size_list": np.arange(1 + i, 10 + i).astype(np.int32),
    }


def create_test_scalar_dataset(
    spark: Any, url: str, num_rows: int, num_files: int = 4, partition_by: list[str] | None = None
) -> list[dict[str, Any]]:
    """Petastorm's plain Parquet dataset (no Unischema), written by Spark as its helper writes it.

    Row groups of Parquet's smallest size (``parquet.block.size`` 100 bytes, as Petastorm's
    helper sets it), so each file holds many; the setting is restored after the write.
    """
    import datetime

    from pyspark.sql.types import (
        ArrayType,
        DateType,
        DoubleType,
        IntegerType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    data = [scalar_row(i) for i in range(num_rows)]
    schema = StructType([
        StructField("datetime", DateType(), False),
        StructField("float64", DoubleType(), False),
        StructField("id", IntegerType(), False),
        StructField("id_div_700", IntegerType(), False),
        StructField("int_fixed_size_list", ArrayType(IntegerType(), False), False),
        StructField("nested_struct", StructType([StructField("nested_int", IntegerType(), True)])),
        StructField("string", StringType(), False),
        StructField("string2", StringType(), False),
        StructField("timestamp", TimestampType(), False),
    ])  # fmt: skip
    utc = datetime.timezone.utc
    rows = [
        (datetime.date(2019, 1, 2), float(r["float64"]), int(r["id"]), int(r["id_div_700"]),
         r["int_fixed_size_list"].tolist(), (0,), str(r["string"]), str(r["string2"]),
         datetime.datetime(2005, 2, 25, 3, 30, tzinfo=utc))
        for r in data
    ]  # fmt: skip
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    saved = hadoop.get("parquet.block.size")
    hadoop.setInt("parquet.block.size", 100)
    try:
        frame = spark.createDataFrame(rows, schema).coalesce(num_files)
        frame.write.option("compression", "none").mode("overwrite") \
            .partitionBy(*(partition_by or [])).parquet(url)  # fmt: skip
    finally:
        if saved is None:
            hadoop.unset("parquet.block.size")
        else:
            hadoop.set("parquet.block.size", saved)
    return data
