"""dataframe_to_mds with a real local SparkSession: types, nulls, retried attempts, S3, binaryFile.

Every dataset written here is read back with shardstream's LocalDataset (and, for the
MDS-native types, with mosaicml-streaming 0.13 in its own venv) and compared value by value.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import os
import pickle
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.errors import PySparkException
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql import types as T
from tests.interop.cases import normalize
from tests.interop.conftest import WORKER, reference_python

from shardstream import LocalDataset
from shardstream.converters import dataframe_to_mds, infer_dataframe_schema
from shardstream.errors import ConfigurationError, DatasetExistsError
from shardstream.format.index import parse_index
from shardstream.storage import open_store

from .conftest import S3Server
from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)

# Spark binds 127.0.0.1 (spark_session.py); the driver process may connect nowhere else.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]

UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
ROWS = 40

SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("byte", T.ByteType()),
        T.StructField("short", T.ShortType()),
        T.StructField("int", T.IntegerType()),
        T.StructField("float", T.FloatType()),
        T.StructField("double", T.DoubleType()),
        T.StructField("bool", T.BooleanType()),
        T.StructField("decimal", T.DecimalType(20, 6)),
        T.StructField("string", T.StringType()),
        T.StructField("binary", T.BinaryType()),
        T.StructField("date", T.DateType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestamp_ntz", T.TimestampNTZType()),
        T.StructField("interval", T.DayTimeIntervalType()),
        T.StructField("doubles", T.ArrayType(T.DoubleType(), containsNull=False)),
        T.StructField("ints_nullable", T.ArrayType(T.IntegerType(), containsNull=True)),
        T.StructField("shorts", T.ArrayType(T.ShortType())),
        T.StructField("matrix", T.ArrayType(T.ArrayType(T.LongType()))),
        T.StructField("words", T.ArrayType(T.StringType())),
        T.StructField(
            "struct",
            T.StructType([T.StructField("a", T.IntegerType()), T.StructField("b", T.StringType())]),
        ),
        T.StructField("map", T.MapType(T.StringType(), T.DoubleType())),
        T.StructField("vector", VectorUDT()),
    ]
)

ENCODINGS = {
    "id": "int64",
    "byte": "int8",
    "short": "int16",
    "int": "int32",
    "float": "float32",
    "double": "float64",
    "bool": "uint8",
    "decimal": "str_decimal",
    "string": "str",
    "binary": "bytes",
    "date": "int32",
    "timestamp": "int64",
    "timestamp_ntz": "int64",
    "interval": "int64",
    "doubles": "ndarray:float64",
    "ints_nullable": "ndarray:int32",
    "shorts": "ndarray:int16",
    "matrix": "ndarray:int64",
    "words": "json",
    "struct": "json",
    "map": "json",
    "vector": "ndarray:float64",
}


def row(i: int) -> tuple[Any, ...]:
    sign = -1 if i % 2 else 1
    width = 1 + i % 3
    return (
        i,
        sign * (i * 3 % 128) if i != 5 else -128,
        sign * (i * 1000 % 32768) if i != 6 else -32768,
        sign * i * 100_000,
        i / 8,
        sign * i / 3,
        i % 3 == 0,
        Decimal(f"{sign * i}.{i:06d}"),
        f"text-{i}-é✓",
        bytes(range(i % 7)),
        datetime.date(1969, 12, 25) + datetime.timedelta(days=i * 40),
        datetime.datetime(1965, 3, 4, 5, 6, 7, i, tzinfo=UTC) + datetime.timedelta(days=i * 500),
        datetime.datetime(2001, 2, 3, 4, 5, 6, 7 * i),
        datetime.timedelta(days=-i, microseconds=i),
        [float(i), -0.5, 1e300][: 1 + i % 3],
        [i, -i],
        [sign * 300, i],
        [[i * width + j for j in range(2)] for _ in range(width)],
        [f"w{i}", "x"][: 1 + i % 2],
        (i, f"s{i}"),
        {"k": i / 2, "other": -1.0},
        Vectors.dense([i, 0.25]) if i % 2 else Vectors.sparse(3, [1], [float(i)]),
    )


def expected(i: int) -> dict[str, Any]:
    values = dict(zip(SCHEMA.names, row(i), strict=True))
    return {
        **values,
        "bool": int(values["bool"]),
        "float": np.float32(values["float"]),
        "date": (values["date"] - datetime.date(1970, 1, 1)).days,
        "timestamp": (values["timestamp"] - EPOCH) // datetime.timedelta(microseconds=1),
        "timestamp_ntz": (values["timestamp_ntz"] - EPOCH.replace(tzinfo=None))
        // datetime.timedelta(microseconds=1),
        "interval": (-i * 86_400_000_000) + i,
        "struct": {"a": i, "b": f"s{i}"},
        "vector": values["vector"].toArray(),
    }


def read_back(folder: Path) -> dict[int, dict[str, Any]]:
    with LocalDataset(folder, cache_dir=folder.parent / f"{folder.name}-cache") as dataset:
        samples = [dataset[i] for i in range(len(dataset))]
    by_id = {int(sample["id"]): sample for sample in samples}
    assert len(by_id) == len(samples), "an id appears twice"
    return by_id


def assert_same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
        assert isinstance(got, np.ndarray), where
        np.testing.assert_array_equal(got, np.asarray(want, dtype=got.dtype), err_msg=where)
    else:
        assert got == want, where


def test_every_spark_type_round_trips(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    frame = spark.createDataFrame([row(i) for i in range(ROWS)], SCHEMA).repartition(3)
    out = tmp_path / "all"
    local, remote = dataframe_to_mds(frame, mds_kwargs={"out": str(out), "size_limit": 2000})
    assert (local, remote) == (str(out), "")
    assert "dataframe_to_mds: 100%" in capsys.readouterr().err  # the driver's bar of tasks
    index = parse_index((out / "index.json").read_bytes(), source="index.json")
    assert index[0].columns == ENCODINGS
    assert all(entry.compression == "zstd" for entry in index)
    assert len(index) > 3  # several shards from several partitions
    samples = read_back(out)
    assert sorted(samples) == list(range(ROWS))
    for i, sample in samples.items():
        want = expected(i)
        assert set(sample) == set(ENCODINGS)
        for column, value in want.items():
            assert_same(sample[column], value, f"row {i} column {column}")
    # The scalar dtypes come back as written.
    assert samples[5]["byte"] == -128
    assert samples[5]["byte"].dtype == np.int8
    assert samples[6]["short"] == -32768
    assert samples[6]["short"].dtype == np.int16
    assert samples[3]["matrix"].shape == (1, 2)
    assert samples[4]["matrix"].shape == (2, 2)
    names = sorted(os.listdir(out))
    assert names[0] == "index.json"
    assert len(names) == 4
    assert all(name.startswith("part-") for name in names[1:])


def test_infer_dataframe_schema_names_what_dataframe_to_mds_writes(spark):
    # ENCODINGS is what the round trip above finds in the written index.
    frame = spark.createDataFrame([row(i) for i in range(3)], SCHEMA)
    assert infer_dataframe_schema(frame) == ENCODINGS
    assert infer_dataframe_schema(frame, {"words": "json", "vector": "ndarray:float64"}) is None
    with pytest.raises(ConfigurationError, match="column 'string'"):
        infer_dataframe_schema(frame, {"string": "int32"})


def test_explicit_columns_override_the_inferred_ones(spark, tmp_path: Path):
    frame = spark.createDataFrame(
        [(i, [[1, 2], [3]] if i == 7 else [[i]], datetime.date(2020, 1, 1 + i)) for i in range(10)],
        "id long, ragged array<array<int>>, day date",
    ).coalesce(1)
    with pytest.raises(PySparkException, match=r"column 'ragged' at row 7 of Spark partition 0"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "ragged")}, progress=False)
    out = tmp_path / "as_json"
    columns = {"id": "int", "ragged": "json", "day": "str"}
    dataframe_to_mds(frame, mds_kwargs={"out": str(out), "columns": columns, "compression": None})
    samples = read_back(out)
    assert samples[7]["ragged"] == [[1, 2], [3]]
    assert samples[3]["day"] == "2020-01-04"
    assert parse_index((out / "index.json").read_bytes(), source="x")[0].compression is None


def test_float_dtype_casts_floating_columns_for_torch(spark, tmp_path: Path):
    frame = spark.createDataFrame(
        [(i, i / 4, [i / 2, 0.5], Vectors.dense([i, 1.0])) for i in range(6)],
        T.StructType([
            T.StructField("id", T.LongType(), False),
            T.StructField("x", T.DoubleType(), False),
            T.StructField("v", T.ArrayType(T.DoubleType(), False), False),
            T.StructField("ml", VectorUDT(), False),
        ]),
    ).coalesce(1)  # fmt: skip
    kept, cast = tmp_path / "kept", tmp_path / "cast"
    dataframe_to_mds(frame, mds_kwargs={"out": str(kept)}, progress=False)
    dataframe_to_mds(frame, mds_kwargs={"out": str(cast)}, progress=False, float_dtype="float32")
    assert read_back(kept)[3]["x"] == 0.75
    assert LocalDataset(str(kept)).shards[0].columns["x"] == "float64"  # the default keeps it
    sample = read_back(cast)[3]
    assert LocalDataset(str(cast)).shards[0].columns["id"] == "int64"
    assert np.asarray(sample["x"]).dtype == np.float32
    assert sample["x"] == 0.75
    assert sample["v"].dtype == sample["ml"].dtype == np.float32
    assert sample["v"].tolist() == [1.5, 0.5]
    assert sample["ml"].tolist() == [3.0, 1.0]
    with pytest.raises(ConfigurationError, match="float_dtype must be"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "x")}, float_dtype="half")


def test_a_null_fails_naming_column_row_and_partition(spark, tmp_path: Path):
    frame = spark.createDataFrame(
        [(i, None if i == 13 else float(i), [1.0, None] if i == 17 else [1.0]) for i in range(20)],
        "id long, score double, values array<double>",
    ).coalesce(1)
    with pytest.raises(PySparkException) as info:
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "fail")}, progress=False)
    message = str(info.value)
    assert "column 'score' is null at row 13 of Spark partition 0" in message
    assert "fillna" in message
    assert "on_null='skip'" in message
    arrays = frame.where("id != 13")
    with pytest.raises(PySparkException, match=r"'values' is null \(an element of its array\)"):
        dataframe_to_mds(arrays, mds_kwargs={"out": str(tmp_path / "fail2")}, progress=False)
    out = tmp_path / "skip"
    dataframe_to_mds(frame, mds_kwargs={"out": str(out)}, on_null="skip")
    assert sorted(read_back(out)) == [i for i in range(20) if i not in (13, 17)]


def test_a_failed_first_attempt_leaves_every_row_exactly_once(
    spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    from pyspark import TaskContext

    def samples(pdf: Any, fail_after: int) -> Any:
        for value in pdf["id"]:
            yield {"id": int(value), "text": f"row {value}"}
        context = TaskContext.get()
        assert context is not None
        # The first attempt of partition 1 fails after its last row (its shards are written).
        if fail_after in set(pdf["id"]) and context.attemptNumber() == 0:
            raise RuntimeError("injected failure of the first attempt")

    frame = spark.range(0, 300, numPartitions=3)
    out = tmp_path / "retried"
    caplog.set_level(logging.INFO, logger="shardstream.converters.spark")
    dataframe_to_mds(
        frame,
        mds_kwargs={"out": str(out), "columns": {"id": "int64", "text": "str"}, "size_limit": 500},
        udf_iterable=samples,
        udf_kwargs={"fail_after": 199},
    )
    assert sorted(read_back(out)) == list(range(300))
    folders = sorted(name for name in os.listdir(out) if name != "index.json")
    assert [name.split("-")[1] for name in folders] == ["00000", "00001", "00002"]
    index = parse_index((out / "index.json").read_bytes(), source="x")
    assert sum(entry.samples for entry in index) == 300
    assert {entry.raw_data.basename.split("/")[0] for entry in index} == set(folders)
    # The failed attempt had written shards into a folder of its own, which was removed.
    removed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("removing")]
    assert len(removed) == 1
    assert removed[0].startswith("removing part-00001-")
    assert removed[0].split()[1].rstrip(":") not in folders


def test_without_merge_each_partition_keeps_its_index(spark, tmp_path: Path):
    out = tmp_path / "parts"
    dataframe_to_mds(
        spark.range(0, 50, numPartitions=2), merge_index=False, mds_kwargs={"out": str(out)}
    )
    assert not (out / "index.json").exists()
    parts = sorted(os.listdir(out))
    assert len(parts) == 2
    assert sum(len(read_back(out / part)) for part in parts) == 50


def test_destination_must_be_empty_unless_exist_ok(spark, tmp_path: Path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "old.txt").write_text("x")
    frame = spark.range(0, 5, numPartitions=1)
    with pytest.raises(DatasetExistsError, match="not empty"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(out)})
    dataframe_to_mds(frame, mds_kwargs={"out": str(out), "exist_ok": True})
    assert sorted(read_back(out)) == list(range(5))
    assert not (out / "old.txt").exists()
    with pytest.raises(ConfigurationError, match="no rows"):
        dataframe_to_mds(frame.where("id < 0"), mds_kwargs={"out": str(tmp_path / "none")})
    with pytest.raises(ConfigurationError, match="columns"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "u")}, udf_iterable=lambda df: [])
    # Columns that do not fit the schema fail on the driver, before any task runs.
    with pytest.raises(ConfigurationError, match=r"\['nope'\] are not in the data"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "c"), "columns": {"nope": "int"}})
    with pytest.raises(ConfigurationError, match=r"column 'id' has Arrow type int64.*'png'"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "c"), "columns": {"id": "png"}})


@pytest.mark.s3
def test_writes_to_an_object_store(spark, s3_env: S3Server, tmp_path: Path):
    # Python workers take their environment from the SparkContext (spark.executorEnv.*).
    names = [
        "S3_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_EC2_METADATA_DISABLED",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ]
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update({name: os.environ[name] for name in names})
    try:
        url = s3_env.url("spark")
        frame = spark.createDataFrame(
            [(i, f"t{i}", [float(i), 1.0]) for i in range(60)],
            "id long, text string, v array<float>",
        ).repartition(3)
        assert dataframe_to_mds(frame, mds_kwargs={"out": url, "size_limit": 400}) == ("", url)
        first_keys = set(open_store(url).list())
        # A rewrite whose job fails (a partition fails on every attempt) leaves it whole.
        failing = {"out": url, "exist_ok": True, "columns": {"id": "int64", "text": "str"}}
        with pytest.raises(Exception, match="rewrite dies here"):
            dataframe_to_mds(frame, mds_kwargs=failing, udf_iterable=_dies, progress=False)
        failed = _copied_samples(open_store(url), tmp_path / "failed")
        assert sorted(failed) == list(range(60))
        assert {sample["text"] for sample in failed.values()} == {f"t{i}" for i in range(60)}
        # A rewrite: only its files are left once its index is published.
        rewrite = {"out": url, "size_limit": 400, "exist_ok": True}
        dataframe_to_mds(frame.where("id >= 30"), mds_kwargs=rewrite, progress=False)
        rewritten = set(open_store(url).list())
        assert not (rewritten - {"index.json"}) & first_keys
        rewritten_samples = _copied_samples(open_store(url), tmp_path / "rewritten")
        assert sorted(rewritten_samples) == list(range(30, 60))
        named = {entry.raw_data.basename.split("/")[0] for entry in _index(open_store(url))}
        assert {key.split("/")[0] for key in rewritten} == {*named, "index.json"}
        dataframe_to_mds(frame, mds_kwargs=rewrite, progress=False)
        # A (local, remote) pair: shards and the merged index in both places.
        pair = (str(tmp_path / "pair"), s3_env.url("spark-pair"))
        dataframe_to_mds(frame, mds_kwargs={"out": pair, "keep_local": True}, progress=False)
    finally:
        environment.clear()
        environment.update(saved)
    store = open_store(url)
    assert "index.json" in store.list()
    samples = _copied_samples(store, tmp_path / "copy")
    assert sorted(samples) == list(range(60))
    assert samples[9]["text"] == "t9"
    assert samples[9]["v"].dtype == np.float32
    with pytest.raises(DatasetExistsError, match="is not empty"):
        dataframe_to_mds(frame, mds_kwargs={"out": url})
    assert sorted(read_back(tmp_path / "pair")) == list(range(60))
    remote_index = open_store(pair[1]).get_bytes("index.json")
    assert remote_index == (tmp_path / "pair" / "index.json").read_bytes()


def _dies(pdf: Any) -> Any:
    for value in pdf["id"]:
        if value == 45:
            raise RuntimeError("the rewrite dies here")
        yield {"id": int(value), "text": "rewritten"}


def _copied_samples(store: Any, copy: Path) -> dict[int, Any]:
    for key in store.list():
        (copy / key).parent.mkdir(parents=True, exist_ok=True)
        (copy / key).write_bytes(store.get_bytes(key))
    return read_back(copy)


def _index(store: Any) -> list[Any]:
    return list(parse_index(store.get_bytes("index.json"), source=store.url("index.json")))


def _image_bytes(fmt: str, seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (5 + seed, 7, 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, format=fmt)
    return buffer.getvalue()


def test_binary_files_keep_or_decode_images(spark, tmp_path: Path):
    folder = tmp_path / "images"
    folder.mkdir()
    files = {f"img{i}.png": _image_bytes("PNG", i) for i in range(4)}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    frame = spark.read.format("binaryFile").load(str(folder))
    kept = tmp_path / "kept"
    dataframe_to_mds(frame, mds_kwargs={"out": str(kept)})
    index = parse_index((kept / "index.json").read_bytes(), source="x")
    assert index[0].columns == {"path": "str", "modificationTime": "int64", "length": "int64",
                                "content": "bytes"}  # fmt: skip
    with LocalDataset(kept) as dataset:
        for sample in dataset:
            assert sample["content"] == files[os.path.basename(sample["path"])]
            assert sample["length"] == len(sample["content"])
    for encoding in ("png", "pil"):
        out = tmp_path / encoding
        columns = {"path": "str", "content": encoding}
        dataframe_to_mds(frame, mds_kwargs={"out": str(out), "columns": columns})
        with LocalDataset(out) as dataset:
            for sample in dataset:
                original = files[os.path.basename(sample["path"])]
                from PIL import Image

                want = np.asarray(Image.open(io.BytesIO(original)))
                np.testing.assert_array_equal(np.asarray(sample["content"]), want)
        if encoding == "png":  # the original file bytes, not a re-encoding
            shard = next(p for p in out.rglob("*.mds.zstd"))
            import zstandard

            raw = zstandard.ZstdDecompressor().decompress(shard.read_bytes())
            assert any(data in raw for data in files.values())


@pytest.mark.interop
def test_the_reference_reads_what_dataframe_to_mds_wrote(spark, tmp_path: Path):
    python = reference_python()
    frame = spark.createDataFrame(
        [
            (i, i % 100 - 50, -i, i / 4, f"s{i}", bytes([i % 256]) * (i % 5), Decimal(f"{i}.25"),
             [float(i), 2.0], [[i, 1], [2, 3]])
            for i in range(50)
        ],
        "id long, small byte, neg int, f float, s string, b binary, d decimal(10,2), "
        "v array<double>, m array<array<int>>",
    ).repartition(3)  # fmt: skip
    out = tmp_path / "for_reference"
    dataframe_to_mds(frame, mds_kwargs={"out": str(out), "size_limit": 1000, "hashes": ["xxh64"]})
    ours = [normalize(sample) for sample in LocalDataset(out, cache_dir=tmp_path / "c")]
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(out), str(copy)], check=True)
    job = tmp_path / "job.json"
    dump = tmp_path / "ref.pkl"
    job.write_text(json.dumps({"read": [{"dir": str(copy), "dump": str(dump)}]}))
    completed = subprocess.run(
        [python, str(WORKER), str(job)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"}, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    with open(dump, "rb") as handle:
        theirs = pickle.load(handle)
    assert len(theirs) == 50
    assert theirs == ours
