"""A root that holds splits and no index: the error lists them and says ``split=``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset
from shardstream.dataset.splits import listed_splits, split_advice
from shardstream.errors import ObjectNotFoundError, ShardNotFoundError


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("splits") / "ds"
    write_dataset(folder / "train", 8)
    write_dataset(folder / "validation", 4)
    return folder


def opened(**kwargs: object) -> StreamingDataset:
    dataset = StreamingDataset(batch_size=2, **kwargs)  # type: ignore[arg-type]
    len(dataset)  # opens the index
    return dataset


def test_a_local_root_of_splits_lists_them(root: Path):
    with pytest.raises(ShardNotFoundError) as caught:
        opened(local=str(root))
    assert str(caught.value) == (
        f"{root} holds no index.json; it holds the splits train, validation: pick one with "
        "split='train'"
    )
    assert len(opened(local=str(root), split="validation")) == 4


def test_a_misspelt_split_gets_the_closest_name(root: Path, tmp_path: Path):
    with pytest.raises(ShardNotFoundError, match=r"did you mean split='validation'\?"):
        opened(local=str(root), split="valid")
    with pytest.raises(ObjectNotFoundError, match=r"no split 'trian'.*split='train'"):
        opened(remote=str(root), local=str(tmp_path / "cache"), split="trian")


def test_a_folder_with_no_splits_keeps_its_message(tmp_path: Path):
    with pytest.raises(ShardNotFoundError, match=r"no index\.json and no \*\.parquet files"):
        opened(local=str(tmp_path))


def test_split_advice_and_listing():
    assert listed_splits(["train/index.json", "a/b/index.json", "index.json", "x/y"]) == ["train"]
    assert split_advice("", []) == ""
    assert split_advice("zzz", ["train"]) == "there is no split 'zzz'; the splits are train"
    assert split_advice("tran", ["train", "test"], flag="--split").endswith("--split train?")
