"""NumPy-style keys: what ``select`` returns is what a list of the ids would, nested alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset
from shardstream.dataset.indexing import checked_id, select
from shardstream.errors import SampleKeyError

N = 30


def get(sample_id: int) -> int:
    """Stands in for a dataset's get_item: the id itself, negatives counted from the end."""
    if not -N <= sample_id < N:
        raise IndexError(sample_id)
    return sample_id % N


ids = st.integers(-N, N - 1)
keys = st.recursive(st.lists(ids, max_size=5), lambda inner: st.lists(inner, max_size=3))


@given(key=st.slices(N + 5))
def test_a_slice_selects_what_a_list_slice_would(key: slice):
    assert select(key, N, get) == list(range(N))[key]


@given(key=keys)
def test_lists_select_nested_as_they_are(key: list[Any]):
    def expected(part: Any) -> Any:
        return part % N if isinstance(part, int) else [expected(item) for item in part]

    assert select(key, N, get) == expected(key)


@given(key=st.lists(ids, min_size=1, max_size=12))
def test_an_array_selects_as_its_list(key: list[int]):
    array = np.array(key, np.int64)
    assert select(array, N, get) == [k % N for k in key]
    pairs = array[: len(key) // 2 * 2].reshape(-1, 2)
    assert select(pairs, N, get) == [[a % N, b % N] for a, b in pairs.tolist()]
    assert select(np.int32(key[0]), N, get) == key[0] % N
    assert select(np.array(key[0]), N, get) == key[0] % N  # a 0-d array is an id


@pytest.mark.parametrize(
    "key", [1.5, "3", None, b"1", {1}, [0.5], [[1], ["2"]], np.array([1.0]), np.array([True])]
)
def test_other_keys_are_refused_naming_the_key(key: Any):
    with pytest.raises(SampleKeyError, match="indexed by a sample id") as info:
        select(key, N, get)
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, ValueError)  # what the reference raises


def test_an_id_out_of_range_is_the_getters_index_error():
    with pytest.raises(IndexError):
        select([0, N], N, get)


# --- StreamingDataset ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> StreamingDataset:
    base = tmp_path_factory.mktemp("indexing")
    remote = write_dataset(base / "remote", N, size_limit=512)
    return StreamingDataset(remote=str(remote), local=str(base / "cache"), batch_size=4)


def id_of(samples: Any) -> Any:
    if isinstance(samples, dict):
        return int(samples["id"])
    return [id_of(sample) for sample in samples]


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ([1, 2], [1, 2]),
        (slice(0, 3), [0, 1, 2]),
        (np.arange(3), [0, 1, 2]),
        (np.int64(-1), N - 1),
        ([[1, 2], [3]], [[1, 2], [3]]),
        (np.array([[4, 5], [6, 7]]), [[4, 5], [6, 7]]),
        (slice(None, None, -10), [29, 19, 9]),
        ([], []),
    ],
)
def test_a_streaming_dataset_takes_numpy_style_keys(
    dataset: StreamingDataset, key: Any, expected: Any
):
    assert id_of(dataset[key]) == expected


def test_a_streaming_dataset_reads_each_id_through_get_item(tmp_path: Path):
    remote = write_dataset(tmp_path / "remote", N)

    class Tagged(StreamingDataset):
        def get_item(self, sample_id: int) -> dict[str, Any]:
            return {**super().get_item(sample_id), "tag": sample_id}

    ds = Tagged(remote=str(remote), local=str(tmp_path / "cache"), batch_size=4)
    assert [sample["tag"] for sample in ds[[3, -1]]] == [3, -1]
    with pytest.raises(SampleKeyError):
        ds[1.5]


@given(st.integers(1, 10**6), st.integers(-(10**7), 10**7))
def test_checked_id_counts_negatives_from_the_end_and_refuses_the_rest(
    size: int, sample_id: int
) -> None:
    if -size <= sample_id < size:
        assert checked_id(sample_id, size) == sample_id % size
        assert checked_id(np.int64(sample_id), size) == sample_id % size
    else:
        with pytest.raises(IndexError, match=f"sample id {sample_id} is out of range"):
            checked_id(sample_id, size)
