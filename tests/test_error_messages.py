"""Every error message names the object concerned and says what to do about it.

One representative error per layer (format, writer, storage, dataset, converters, sampling):
each test checks that the message holds the file, column, URL, parameter or value at fault,
and a word of the fix. None needs a server; the module runs in a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream import LocalDataset, MDSWriter, StreamingDataset, get_encoding
from shardstream.config import distributed_environment
from shardstream.errors import (
    ConfigurationError,
    DatasetExistsError,
    IndexFormatError,
    MissingColumnError,
    ObjectNotFoundError,
    SampleEncodingError,
    ShardstreamError,
    TopologyError,
    UnknownEncodingError,
    UnsafeEncodingError,
    UnsupportedURLError,
)
from shardstream.format.compression import get_compression
from shardstream.sampling.topology import Sourced, resolve_topology
from shardstream.storage.azure import parse_azure_url
from shardstream.storage.local import LocalStore
from shardstream.storage.registry import open_store
from shardstream.units import parse_bytes

QUERY_PART = "sig=TopSecret0123456789"


def message_of(info: pytest.ExceptionInfo[BaseException]) -> str:
    assert isinstance(info.value, ShardstreamError)
    return str(info.value)


def write(folder: Path, columns: dict[str, str], samples: list[dict[str, object]]) -> Path:
    with MDSWriter(out=str(folder), columns=columns) as writer:
        for sample in samples:
            writer.write(sample)
    return folder


# --- format ---------------------------------------------------------------------------------


def test_unknown_encoding_names_it_and_how_to_register_one():
    with pytest.raises(UnknownEncodingError) as info:
        get_encoding("strr")
    text = message_of(info)
    assert "'strr'" in text
    assert ", str," in text  # the names that do exist
    assert "register_encoding" in text


def test_encoding_argument_names_the_encoding_and_the_fix():
    with pytest.raises(UnknownEncodingError) as info:
        get_encoding("int:5")
    text = message_of(info)
    assert "'int:5'" in text
    assert "write just 'int'" in text


def test_bad_index_json_names_the_file_and_the_fix(tmp_path: Path):
    (tmp_path / "index.json").write_text('{"shards": [')
    with pytest.raises(IndexFormatError) as info:
        len(LocalDataset(tmp_path))  # the index is read on first use
    text = message_of(info)
    assert str(tmp_path / "index.json") in text
    assert "not valid JSON" in text
    assert "rewrite the dataset" in text


def test_index_json_of_another_kind_says_where_to_point(tmp_path: Path):
    (tmp_path / "index.json").write_text('{"files": []}')
    with pytest.raises(IndexFormatError) as info:
        len(LocalDataset(tmp_path))
    text = message_of(info)
    assert str(tmp_path / "index.json") in text
    assert "'shards' list" in text
    assert "dataset's root" in text


def test_unsafe_pickle_column_names_the_column_and_the_opt_in(tmp_path: Path):
    write(tmp_path / "ds", {"obj": "pkl"}, [{"obj": {"a": 1}}])
    with pytest.raises(UnsafeEncodingError) as info:
        LocalDataset(tmp_path / "ds")[0]
    text = message_of(info)
    assert "'obj'" in text
    assert "'pkl'" in text
    assert "allow_unsafe_types=True" in text


def test_compression_level_names_the_value_and_the_range():
    with pytest.raises(ConfigurationError) as info:
        get_compression("zstd:99")
    text = message_of(info)
    assert "'zstd:99'" in text
    assert "must be an integer from" in text


def test_json_value_names_the_fix():
    with pytest.raises(SampleEncodingError) as info:
        get_encoding("json").encode({"when": object()})
    text = message_of(info)
    assert "'json'" in text
    assert "convert it to" in text


# --- writer ---------------------------------------------------------------------------------


def test_size_limit_names_the_value_and_the_limit(tmp_path: Path):
    with pytest.raises(ConfigurationError) as info:
        MDSWriter(out=str(tmp_path / "ds"), columns={"x": "int"}, size_limit="5gb")
    text = message_of(info)
    assert "size_limit='5gb'" in text
    assert "under 4 GiB" in text


def test_unreadable_size_names_the_value_and_an_example():
    with pytest.raises(ConfigurationError) as info:
        parse_bytes("12 parsecs", what="cache_limit")
    text = message_of(info)
    assert "cache_limit='12 parsecs'" in text
    assert "e.g. '64mb'" in text


def test_existing_output_names_the_folder_and_exist_ok(tmp_path: Path):
    out = write(tmp_path / "ds", {"x": "int"}, [{"x": 1}])
    with pytest.raises(DatasetExistsError) as info:
        MDSWriter(out=str(out), columns={"x": "int"}).finish()
    text = message_of(info)
    assert str(out) in text
    assert "exist_ok=True" in text


def test_sample_without_a_column_names_it_and_the_columns(tmp_path: Path):
    with MDSWriter(out=str(tmp_path / "ds"), columns={"x": "int", "y": "str"}) as writer:
        with pytest.raises(MissingColumnError) as info:
            writer.write({"x": 1})
        writer.write({"x": 1, "y": "one"})
    text = message_of(info)
    assert "'y'" in text
    assert "['x', 'y']" in text


def test_columns_of_different_lengths_say_which(tmp_path: Path):
    writer = MDSWriter(out=str(tmp_path / "ds"), columns={"x": "int32", "y": "str"})
    with pytest.raises(ConfigurationError) as info:
        writer.write_columns({"x": [b"\0\0\0\0"], "y": [b"a", b"b"]})
    writer.finish()
    text = message_of(info)
    assert "{'x': 1, 'y': 2}" in text
    assert "same number of values" in text


# --- storage --------------------------------------------------------------------------------


def test_unsupported_scheme_names_it_and_hides_the_query():
    with pytest.raises(UnsupportedURLError) as info:
        open_store(f"ftp://host/data?{QUERY_PART}")
    text = message_of(info)
    assert "'ftp://host/data?***'" in text
    assert "'ftp://'" in text
    assert "local folder" in text
    assert "TopSecret" not in text


@pytest.mark.parametrize(
    "url",
    [
        f"s3://bucket/prefix?X-Amz-Signature=1&{QUERY_PART}",
        f"gs://bucket/prefix?{QUERY_PART}",
        f"https://host/prefix?{QUERY_PART}",
        f"oci://bucket@namespace/prefix?{QUERY_PART}",
        f"dbfs:/Volumes/c/s/v?{QUERY_PART}",
    ],
)
def test_a_url_with_a_query_is_refused_without_showing_it(url: str):
    with pytest.raises(ConfigurationError) as info:
        open_store(url)
    text = message_of(info)
    assert url.partition("?")[0] in text
    assert "TopSecret" not in text


def test_azure_sas_in_the_url_is_hidden_and_the_argument_named():
    with pytest.raises(ConfigurationError) as info:
        parse_azure_url(f"azure://container/prefix?sv=2024&{QUERY_PART}")
    text = message_of(info)
    assert "'azure://container/prefix?***'" in text
    assert "sas_token=" in text
    assert "TopSecret" not in text


def test_password_in_a_url_is_hidden():
    with pytest.raises(UnsupportedURLError) as info:
        open_store("ftp://user:hunter2@host/data")
    text = message_of(info)
    assert "ftp://user:***@host/data" in text
    assert "hunter2" not in text


def test_missing_local_object_names_the_file_and_what_to_check(tmp_path: Path):
    store = LocalStore(str(tmp_path))
    with pytest.raises(ObjectNotFoundError) as info:
        store.get_bytes("shard.00007.mds")
    text = message_of(info)
    assert "shard.00007.mds" in text
    assert str(tmp_path) in text
    assert "check the key" in text


def test_climbing_key_names_it_and_the_rule(tmp_path: Path):
    with pytest.raises(ConfigurationError) as info:
        LocalStore(str(tmp_path)).get_bytes("../etc/passwd")
    text = message_of(info)
    assert "'../etc/passwd'" in text
    assert "must not climb" in text


# --- dataset --------------------------------------------------------------------------------


def test_unknown_shuffle_algo_names_it_and_the_choices(tmp_path: Path):
    with pytest.raises(ConfigurationError) as info:
        StreamingDataset(local=str(tmp_path), batch_size=4, shuffle_algo="py9z")
    text = message_of(info)
    assert "'py9z'" in text
    assert "py1e" in text


@pytest.mark.parametrize("batch_size", [0, 2.5, True])
def test_bad_batch_size_names_the_value_and_the_rule(tmp_path: Path, batch_size: object):
    with pytest.raises(ConfigurationError) as info:
        StreamingDataset(local=str(tmp_path), batch_size=batch_size)  # type: ignore[arg-type]
    text = message_of(info)
    assert f"batch_size must be an integer >= 1, got {batch_size!r}" in text


def test_bad_state_dict_says_what_to_pass(tmp_path: Path):
    write(tmp_path / "ds", {"x": "int"}, [{"x": i} for i in range(4)])
    dataset = StreamingDataset(local=str(tmp_path / "ds"), batch_size=2)
    with pytest.raises(ConfigurationError) as info:
        dataset.load_state_dict({"epoch": 0})
    text = message_of(info)
    assert "lacks" in text
    assert "state_dict()" in text


# --- converters -----------------------------------------------------------------------------


def test_missing_column_names_it_and_the_data_columns():
    pa = pytest.importorskip("pyarrow")
    from shardstream.converters import BatchConverter

    schema = pa.schema([("text", pa.string()), ("label", pa.int64())])
    with pytest.raises(ConfigurationError) as info:
        BatchConverter(schema, {"txet": "str"})
    text = message_of(info)
    assert "['txet']" in text
    assert "['text', 'label']" in text
    assert "columns=" in text


def test_null_value_names_the_column_row_and_on_null():
    pa = pytest.importorskip("pyarrow")
    from shardstream.converters import BatchConverter

    table = pa.table({"text": ["a", None, "c"]})
    converter = BatchConverter(table.schema, {"text": "str"})
    with pytest.raises(SampleEncodingError) as info:
        list(converter.samples(table.to_batches()[0]))
    text = message_of(info)
    assert "'text'" in text
    assert "row 1" in text
    assert "on_null='skip'" in text


# --- sampling -------------------------------------------------------------------------------


def test_inconsistent_topology_names_both_sources():
    found = distributed_environment({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"})
    with pytest.raises(TopologyError) as info:
        resolve_topology(
            rank=[Sourced(1, "rank="), found["RANK"]],
            world_size=[found["WORLD_SIZE"]],
            ranks_per_node=[found["LOCAL_WORLD_SIZE"]],
            local_rank=[],
        )
    text = message_of(info)
    assert "1 (rank=)" in text
    assert "3 (environment RANK)" in text
    assert "make them agree" in text


def test_bad_environment_variable_names_it_and_the_fix():
    with pytest.raises(TopologyError) as info:
        distributed_environment({"WORLD_SIZE": "four"})
    text = message_of(info)
    assert "WORLD_SIZE='four'" in text
    assert "unset" in text
