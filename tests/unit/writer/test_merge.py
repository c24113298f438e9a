"""writer.merge.merge_index: every calling form of the reference's ``merge_index``.

``merge_index(out, keep_local, download_timeout)`` takes a root (a folder, a URL or a
``(local, remote)`` pair); ``merge_index(index_file_urls, out, ...)`` a list of index files
(paths, URLs or pairs). The remote here is a second local folder (opened as a store like any
URL); tests/integration/test_merge_remote.py runs the same forms against S3.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream import LocalDataset, MDSWriter
from shardstream.errors import ConfigurationError, ObjectNotFoundError, ShardNotFoundError
from shardstream.writer.merge import merge_index, natural_key, partition_folders

untyped: Any = merge_index  # for the calls that break its signature on purpose


def write(folder: Path, ids: range) -> Path:
    with MDSWriter(out=str(folder), columns={"id": "int"}, size_limit=100) as writer:
        for i in ids:
            writer.write({"id": i})
    return folder / "index.json"


def ids(root: Path) -> list[int]:
    with LocalDataset(root) as dataset:
        return [int(dataset[i]["id"]) for i in range(len(dataset))]


def basenames(index: Path) -> list[str]:
    return [shard["raw_data"]["basename"] for shard in json.loads(index.read_text())["shards"]]


@pytest.fixture
def parts(tmp_path: Path) -> Path:
    """``ds/0``, ``ds/1`` and a nested ``ds/a/b``: ids 0-3, 4-7, 8-9."""
    write(tmp_path / "ds" / "0", range(4))
    write(tmp_path / "ds" / "1", range(4, 8))
    write(tmp_path / "ds" / "a" / "b", range(8, 10))
    return tmp_path / "ds"


# --- merge_index(out, keep_local, download_timeout) -------------------------------------------


def test_the_documented_root_call_merges_every_partition(parts: Path):
    shards = merge_index(str(parts), keep_local=True)
    assert ids(parts) == list(range(10))
    names = basenames(parts / "index.json")
    assert len(names) == shards
    # A nested partition is named by its whole path (the reference writes "b/...", unreadable).
    assert {name.rsplit("/", 1)[0] for name in names} == {"0", "1", "a/b"}


def test_keep_local_false_on_a_local_root_keeps_the_dataset(parts: Path):
    # The reference deletes the whole local folder here, dataset included.
    merge_index(str(parts), False)
    assert ids(parts) == list(range(10))


def test_a_pair_root_reads_the_remote_and_publishes_to_both(parts: Path, tmp_path: Path):
    local = tmp_path / "local"
    merge_index((str(local), str(parts)), download_timeout=5)
    assert (local / "index.json").read_bytes() == (parts / "index.json").read_bytes()
    assert ids(parts) == list(range(10))


def test_a_pair_root_prefers_the_local_copy_of_a_partition_index(parts: Path, tmp_path: Path):
    local = tmp_path / "local"
    (local / "1").mkdir(parents=True)
    # A local index of partition 1 that names its first shard only tells which copy was read.
    index = json.loads((parts / "1" / "index.json").read_text())
    index["shards"] = index["shards"][:1]
    (local / "1" / "index.json").write_text(json.dumps(index))
    merge_index((str(local), "file://" + str(parts)))
    names = basenames(local / "index.json")
    assert [name for name in names if name.startswith("1/")] == ["1/shard.00000.mds"]
    assert len(names) == 1 + sum(len(basenames(parts / p / "index.json")) for p in ("0", "a/b"))


def test_keep_local_false_publishes_to_the_remote_only(parts: Path, tmp_path: Path):
    local = tmp_path / "local"
    merge_index((str(local), str(parts)), keep_local=False)
    assert (parts / "index.json").exists()
    assert not (local / "index.json").exists()


def test_a_root_without_partitions_is_refused(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    pair = (str(tmp_path / "local"), str(tmp_path / "empty"))
    outs: list[Any] = [str(tmp_path / "empty"), pair]
    for out in outs:
        with pytest.raises(ShardNotFoundError, match=f"no sub-folder of {tmp_path}/empty"):
            merge_index(out)


# --- merge_index(index_file_urls, out, keep_local, download_timeout) --------------------------


def test_a_list_of_local_index_files_is_merged_in_its_order(parts: Path):
    urls = [str(parts / "1" / "index.json"), str(parts / "0" / "index.json")]
    merge_index([*urls, urls[0]], str(parts))  # a repeat is dropped, as the reference does
    assert ids(parts) == [*range(4, 8), *range(4)]


def test_a_list_of_pairs_downloads_what_is_not_local(parts: Path, tmp_path: Path):
    local = tmp_path / "local"
    write(local / "0", range(100, 104))  # partition 0 is read here, partition 1 from the remote
    pairs = [(str(local / p / "index.json"), f"file://{parts}/{p}/index.json") for p in "01"]
    merge_index(pairs, (str(local), str(parts)), keep_local=True)
    assert basenames(local / "index.json") == basenames(parts / "index.json")
    names = basenames(local / "index.json")
    assert names[: len(basenames(local / "0" / "index.json"))] == [
        f"0/{name}" for name in basenames(local / "0" / "index.json")
    ]
    assert len(names) == len(basenames(local / "0" / "index.json")) + len(
        basenames(parts / "1" / "index.json")
    )


def test_a_listed_nested_index_is_named_by_its_path_below_out(parts: Path):
    merge_index([str(parts / "a" / "b" / "index.json")], str(parts))
    assert ids(parts) == [8, 9]
    assert all(name.startswith("a/b/") for name in basenames(parts / "index.json"))


def test_an_index_outside_out_is_named_by_its_folder(parts: Path, tmp_path: Path):
    elsewhere = tmp_path / "staging" / "1" / "index.json"
    elsewhere.parent.mkdir(parents=True)
    shutil.copy(parts / "1" / "index.json", elsewhere)
    merge_index([str(elsewhere)], str(parts))
    assert ids(parts) == list(range(4, 8))


def test_bad_lists_are_refused_naming_the_problem(parts: Path, tmp_path: Path):
    with pytest.raises(ConfigurationError, match="index_file_urls is empty"):
        merge_index([], str(parts))
    with pytest.raises(ObjectNotFoundError, match="partition '9'") as info:
        merge_index([str(parts / "9" / "index.json")], str(parts))
    assert isinstance(info.value, FileNotFoundError)
    other = tmp_path / "other" / "0" / "index.json"
    other.parent.mkdir(parents=True)
    shutil.copy(parts / "1" / "index.json", other)
    with pytest.raises(ConfigurationError, match="both name their shards 0/"):
        merge_index([str(parts / "0" / "index.json"), str(other)], str(parts))
    with pytest.raises(ConfigurationError, match="index_file_urls holds 7"):
        untyped([7], str(parts))


def test_arguments_of_neither_form_raise_value_errors(parts: Path):
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((str(parts), True, 60, "extra"), {}),
        (([str(parts / "0" / "index.json")],), {}),  # the list form needs out
        ((str(parts),), {"keep_local": "yes"}),
        ((str(parts),), {"download_timeout": 0}),
        ((("a", "b", "c"),), {}),
        ((("s3://b/x", "local-copy"),), {}),  # the local folder comes first
    ]
    for args, kwargs in cases:
        with pytest.raises(ConfigurationError) as info:
            untyped(*args, **kwargs)
        assert isinstance(info.value, ValueError)  # what the reference raises
    assert not (parts / "index.json").exists()


# --- invariants -------------------------------------------------------------------------------


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(order=st.permutations(["0", "1", "a/b"]), size=st.integers(min_value=1, max_value=3))
def test_a_listed_merge_reads_the_partitions_in_the_listed_order(
    parts: Path, order: list[str], size: int
):
    chosen = order[:size]
    merge_index([str(parts / p / "index.json") for p in chosen], str(parts))
    spans = {"0": range(4), "1": range(4, 8), "a/b": range(8, 10)}
    assert ids(parts) == [i for p in chosen for i in spans[p]]


@given(
    folders=st.lists(
        st.lists(st.sampled_from(["p1", "p2", "p10", "q"]), min_size=1, max_size=3).map("/".join),
        max_size=6,
    )
)
def test_partition_folders_are_the_shallowest_indexes_in_natural_order(folders: list[str]):
    keys = [f"{folder}/index.json" for folder in folders] + ["index.json", "p1/shard.mds"]
    chosen = partition_folders(keys)
    assert set(chosen) <= set(folders)
    for folder in folders:  # every index is a partition or inside one
        assert any(folder == c or folder.startswith(c + "/") for c in chosen)
    for a in chosen:  # and no partition is inside another
        assert not any(a.startswith(b + "/") for b in chosen)
    assert chosen == sorted(chosen, key=natural_key)


def test_partition_folders_sort_numbers_as_numbers():
    keys = ["p10/index.json", "p2/index.json", "p2/inner/index.json", "index.json"]
    assert partition_folders(keys) == ["p2", "p10"]
