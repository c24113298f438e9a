"""Petastorm's readers on a dataset a real local Spark wrote, as materialize_dataset writes it.

Spark writes the encoded rows (binary columns for arrays and images) partitioned by ``part``;
then ``_common_metadata`` gets the pickled Unischema under Petastorm's key, as Petastorm does
after the Spark job. One dataset for the module: the machine is small.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from tests.petastorm_data import UNISCHEMA_KEY, encoded, hello_row, hello_schema, pickled

from shardstream.loader.petastorm import (
    DataLoader,
    in_lambda,
    make_batch_reader,
    make_petastorm_dataset,
    make_reader,
)

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]
ROWS = 90


@pytest.fixture(scope="module")
def hello(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    from pyspark.sql import types as T

    schema = hello_schema()
    spark_schema = T.StructType([
        T.StructField("id", T.IntegerType(), False),
        T.StructField("part", T.IntegerType(), False),
        T.StructField("label", T.StringType(), False),
        T.StructField("score", T.DoubleType(), False),
        *(T.StructField(name, T.BinaryType(), False)
          for name in ("matrix", "sparse", "image", "gray")),
    ])  # fmt: skip
    rows = [tuple(encoded(schema, hello_row(i)).values()) for i in range(ROWS)]
    root = tmp_path_factory.mktemp("spark-petastorm") / "hello"
    url = f"file://{root}"
    # What materialize_dataset sets around the job (small row groups, checked every 3 rows),
    # and the name parquet-mr now reads the check's count from.
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    settings = {"parquet.block.size": "2048", "parquet.block.size.row.check.min": "3",
                "parquet.row-group.size.row.check.min": "3",
                "parquet.page.size.row.check.min": "3"}  # fmt: skip
    saved = {key: hadoop.get(key) for key in settings}
    for key, value in settings.items():
        hadoop.set(key, value)
    try:
        frame = spark.createDataFrame(rows, spark_schema).repartition(2)
        frame.write.partitionBy("part").parquet(url)
    finally:
        for key, value in saved.items():
            hadoop.unset(key) if value is None else hadoop.set(key, value)
    first = next(root.glob("part=*/*.parquet"))
    columns = pq.read_schema(first)  # what materialize_dataset adds the key to
    pq.write_metadata(columns.with_metadata({UNISCHEMA_KEY: pickled(schema)}),
                      root / "_common_metadata")  # fmt: skip
    return url


def test_make_reader_decodes_every_row_spark_wrote(hello: str):
    with make_reader(hello) as reader:
        rows = list(reader)
    assert sorted(int(row.id) for row in rows) == list(range(ROWS))
    for row in rows:
        expected = hello_row(int(row.id))
        for name in row._fields:  # "part" comes from the folder, cast by its ScalarCodec
            assert np.array_equal(getattr(row, name), expected[name]), name
            assert type(getattr(row, name)) is type(expected[name]), name


def test_batches_filters_predicates_and_shards(hello: str):
    keep = [("part", "!=", 1)]
    shards = []
    for shard in range(2):
        with make_batch_reader(hello, schema_fields=["id", "part", "image"], filters=keep,
                               predicate=in_lambda(["score"], lambda s: s < 10),
                               cur_shard=shard, shard_count=2) as reader:  # fmt: skip
            batches = list(reader)
        for batch in batches:
            assert batch.image.shape[1:] == (8, 6, 3)
            for i, image in zip(batch.id, batch.image, strict=True):
                assert np.array_equal(image, hello_row(int(i))["image"])
        shards.append([int(i) for batch in batches for i in batch.id])
    expected = [i for i in range(ROWS) if i % 3 != 1 and i / 8 < 10]
    assert sorted(shards[0] + shards[1]) == expected
    assert not set(shards[0]) & set(shards[1])


def test_tensorflow_and_torch_read_the_same_rows(hello: str):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with make_batch_reader(hello, schema_fields=["id", "matrix"], num_epochs=2) as reader:
        seen = [int(i) for batch in make_petastorm_dataset(reader).as_numpy_iterator()
                for i in batch.id]  # fmt: skip
    assert collections.Counter(seen) == dict.fromkeys(range(ROWS), 2)
    with DataLoader(make_reader(hello, schema_fields=["id", "gray"]), batch_size=16) as loader:
        batches = list(loader)
    assert all(batch["gray"].dtype == torch.uint8 for batch in batches)
    assert sorted(torch.cat([batch["id"] for batch in batches]).tolist()) == list(range(ROWS))


def test_the_dataset_is_what_petastorm_writes(hello: str):
    root = Path(hello.removeprefix("file://"))
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["part=0", "part=1", "part=2"]
    metadata = pq.read_schema(root / "_common_metadata").metadata
    assert metadata[UNISCHEMA_KEY].startswith(b"\x80")  # a pickle
    assert any(pq.ParquetFile(f).num_row_groups > 1 for f in root.glob("part=*/*.parquet"))
