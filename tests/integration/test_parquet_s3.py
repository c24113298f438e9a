"""Parquet streamed from a real S3-compatible server (SeaweedFS): row groups as ranged GETs."""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.parquet_data import FILES, ROWS, write_parquet
from tests.streaming_data import global_batches, ids_of

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream.errors import ConfigurationError
from shardstream.storage import S3Store

from .conftest import S3Server

pytestmark = pytest.mark.s3

GROUPS = sum(-(-rows // group) for rows, group in FILES)


def upload(url: str, folder: Path) -> None:
    store = S3Store(url)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            store.put_file(str(path), path.relative_to(folder).as_posix())


@pytest.fixture
def remote(s3_env: S3Server, tmp_path: Path) -> str:
    url = s3_env.url(f"parquet-{tmp_path.name}")
    upload(url, write_parquet(tmp_path / "source"))
    return url


def dataset(url: str, local: Path, **kwargs: object) -> StreamingDataset:
    options: dict[str, object] = {
        "batch_size": 4, "shuffle": True, "num_canonical_nodes": 2,
        "columns": ["id", "name", "blob"],
    }  # fmt: skip
    options.update(kwargs)
    return StreamingDataset(remote=url, local=str(local), **options)  # type: ignore[arg-type]


def test_an_s3_parquet_folder_streams_every_row_once(remote: str, tmp_path: Path):
    local = tmp_path / "cache"
    ds = dataset(remote, local)
    ids = [int(sample["id"]) for sample in ds]
    assert set(ids) == set(range(ROWS))
    assert len(ids) - ROWS == -ROWS % 4
    cached = sorted(p.name for p in local.iterdir() if p.is_file())
    assert len(cached) == GROUPS
    assert all(".rowgroup-" in name for name in cached)
    source = pq.ParquetFile(tmp_path / "source" / "part-002.parquet").read_row_group(1)
    assert ds[130 + 7 + 50]["name"] == source.column("name")[0].as_py()


def test_s3_ranks_and_workers_see_the_global_batches_of_one_rank(remote: str, tmp_path: Path):
    single = ids_of(StreamingDataLoader(dataset(remote, tmp_path / "one", batch_size=8), 8))
    per_rank = [
        ids_of(
            StreamingDataLoader(
                dataset(remote, tmp_path / "two", batch_size=4, rank=rank, world_size=2,
                        ranks_per_node=2),
                batch_size=4, num_workers=2,
            )
        )
        for rank in range(2)
    ]  # fmt: skip
    assert global_batches(per_rank, 4) == global_batches([single], 8)
    counts = collections.Counter(i for ids in per_rank for i in ids)
    assert set(counts) == set(range(ROWS))


def test_s3_projection_of_a_missing_column_names_it(remote: str, tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"\['height'\] not in s3://.*part-000\.parquet"):
        dataset(remote, tmp_path / "cache", columns=["height"]).prepare()
