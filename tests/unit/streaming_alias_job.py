"""A job written for mosaicml-streaming, run on shardstream through the streaming alias.

Run as a script by tests/unit/test_compat.py (``sys.modules`` is the process's own):
``python streaming_alias_job.py FOLDER CONTEXT`` prints one JSON object of what it saw. The
dataset class is written as LLM Foundry's ``StreamingTextDataset`` is: it imports ``streaming``,
passes the reference's keyword arguments up, and its ``__getitem__`` calls
``super().__getitem__`` and tokenizes ``sample['text']`` or reads ``sample['tokens']``. The
resume follows Composer's duck-typed protocol: ``dataset.state_dict(num_samples, True)``,
then ``load_state_dict`` on a new dataset.
"""

from __future__ import annotations

import shardstream

# At module level, as the docs say: DataLoader workers started with spawn re-import this file
# and need the alias before they unpickle a StreamingTextDataset.
shardstream.install_streaming_alias()

import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import streaming  # noqa: E402
import torch  # noqa: E402
from streaming import MDSWriter, Stream, StreamingDataset  # noqa: E402
from streaming.base.util import clean_stale_shared_memory, merge_index  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

SAMPLES = 60
MAX_SEQ_LEN = 4


class CharTokenizer:
    """Stands in for a Hugging Face tokenizer: one token per character, padded with zeros."""

    def __call__(
        self, text: str, truncation: bool, padding: str, max_length: int
    ) -> dict[str, list[int]]:
        ids = [ord(c) - ord("0") for c in text][:max_length]
        return {"input_ids": ids + [0] * (max_length - len(ids))}


class StreamingTextDataset(StreamingDataset):  # type: ignore[misc]
    def __init__(
        self,
        tokenizer: CharTokenizer,
        max_seq_len: int,
        streams: Sequence[Stream] | None = None,
        remote: str | None = None,
        local: str | None = None,
        split: str | None = None,
        download_retry: int = 2,
        download_timeout: float = 60,
        validate_hash: str | None = None,
        keep_zip: bool = False,
        epoch_size: int | str | None = None,
        predownload: int | None = None,
        cache_limit: int | str | None = None,
        partition_algo: str = "relaxed",
        num_canonical_nodes: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = False,
        shuffle_algo: str = "py1e",
        shuffle_seed: int = 9176,
        shuffle_block_size: int | None = None,
        sampling_method: str = "balanced",
        sampling_granularity: int = 1,
        batching_method: str = "random",
        allow_unsafe_types: bool = False,
        replication: int | None = None,
        stream_name: str = "stream",
        stream_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            streams=streams,
            remote=remote,
            local=local,
            split=split,
            download_retry=download_retry,
            download_timeout=download_timeout,
            validate_hash=validate_hash,
            keep_zip=keep_zip,
            epoch_size=epoch_size,
            predownload=predownload,
            cache_limit=cache_limit,
            partition_algo=partition_algo,
            num_canonical_nodes=num_canonical_nodes,
            batch_size=batch_size,
            shuffle=shuffle,
            shuffle_algo=shuffle_algo,
            shuffle_seed=shuffle_seed,
            shuffle_block_size=shuffle_block_size,
            sampling_method=sampling_method,
            sampling_granularity=sampling_granularity,
            batching_method=batching_method,
            allow_unsafe_types=allow_unsafe_types,
            replication=replication,
            stream_name=stream_name,
            stream_config=stream_config,
            **kwargs,
        )
        self.tokenizer = tokenizer
        self.max_seq_len = max_seq_len

    def _tokenize(self, text_sample: dict[str, Any]) -> dict[str, list[int]]:
        return self.tokenizer(
            text_sample["text"], truncation=True, padding="max_length", max_length=self.max_seq_len
        )

    def _read_binary_tokenized_sample(self, sample: dict[str, Any]) -> torch.Tensor:
        tokens = np.frombuffer(sample["tokens"], dtype=np.int64)[: self.max_seq_len]
        return torch.from_numpy(tokens.copy()).to(torch.int64)

    def __getitem__(self, idx: int) -> dict[str, list[int]] | torch.Tensor:
        sample = super().__getitem__(idx)
        if "text" in sample:
            return self._tokenize(sample)
        if "tokens" in sample:
            return self._read_binary_tokenized_sample(sample)
        raise RuntimeError("StreamingTextDataset needs samples to have a `text` or `tokens` column")


def write(root: str, column: str) -> None:
    """Two partitions merged as the reference documents it: ids 0..SAMPLES-1 in ``column``."""
    for part, ids in enumerate((range(SAMPLES // 2), range(SAMPLES // 2, SAMPLES))):
        encoding = "str" if column == "text" else "bytes"
        with MDSWriter(out=f"{root}/{part}", columns={column: encoding}, size_limit=200,
                       hashes=["xxh64"], compression="zstd") as writer:  # fmt: skip
            for i in ids:
                value = f"{i:04d}" if column == "text" else np.arange(i, i + 4).tobytes()
                writer.write({column: value})
    merge_index(root, keep_local=True)


def sample_id(item: Any) -> int:
    if isinstance(item, torch.Tensor):
        return int(item[0])
    return int("".join(str(token) for token in item["input_ids"]))


def ids(batches: Iterable[list[Any]]) -> list[int]:
    return [sample_id(item) for batch in batches for item in batch]


def text_dataset(folder: str, cache: str) -> StreamingTextDataset:
    """Built with the keyword arguments of LLM Foundry's dataset config."""
    return StreamingTextDataset(
        tokenizer=CharTokenizer(), max_seq_len=MAX_SEQ_LEN, remote=f"{folder}/text",
        local=cache, split=None, download_retry=1, download_timeout=30, validate_hash="xxh64",
        keep_zip=True, epoch_size=None, predownload=8, cache_limit=None,
        partition_algo="relaxed", num_canonical_nodes=1, batch_size=4, shuffle=True,
        shuffle_algo="py1e", shuffle_seed=17, shuffle_block_size=None,
        sampling_method="balanced", sampling_granularity=1, batching_method="random",
    )  # fmt: skip


def main(folder: str, context: str) -> dict[str, Any]:
    clean_stale_shared_memory()
    write(f"{folder}/text", "text")
    write(f"{folder}/tokens", "tokens")
    seen: dict[str, Any] = {}
    dataset = text_dataset(folder, f"{folder}/cache-a")
    seen["is_shardstream"] = isinstance(dataset, shardstream.StreamingDataset) and isinstance(
        dataset, streaming.StreamingDataset
    )
    seen["version"] = streaming.__version__
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=list,
                        multiprocessing_context=context)  # fmt: skip
    seen["workers_ids"] = sorted(ids(loader))
    tokens = StreamingTextDataset(
        tokenizer=CharTokenizer(), max_seq_len=MAX_SEQ_LEN, batch_size=4,
        streams=[Stream(remote=f"{folder}/tokens", local=f"{folder}/cache-t")],
    )  # fmt: skip
    seen["tokens_ids"] = sorted(ids([list(tokens)]))
    # Composer: state_dict(samples seen in the epoch, from_beginning) at a checkpoint, then
    # load_state_dict on the dataset of the resumed run before it iterates.
    whole = ids(DataLoader(text_dataset(folder, f"{folder}/cache-w"), batch_size=4,
                           collate_fn=list))  # fmt: skip
    first = text_dataset(folder, f"{folder}/cache-r")
    batches = iter(DataLoader(first, batch_size=4, collate_fn=list))
    head = ids(next(batches) for _ in range(3))
    state = first.state_dict(len(head), True)
    resumed = text_dataset(folder, f"{folder}/cache-r")
    resumed.load_state_dict(json.loads(json.dumps(state)))  # a checkpoint holds it as JSON
    tail = ids(DataLoader(resumed, batch_size=4, collate_fn=list))
    seen["resume"] = {"whole": whole, "head": head, "tail": tail}
    return seen


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
