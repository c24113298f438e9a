"""``shardstream merge``: one ``index.json`` from the indexes parallel writers left under a root."""

from __future__ import annotations

import argparse
from typing import Any

from shardstream.errors import ShardNotFoundError
from shardstream.format.index import INDEX_BASENAME
from shardstream.storage import open_store
from shardstream.writer.merge import merge_partitions, partition_folders

__all__ = ["partition_prefixes", "register"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``merge`` to the sub-commands."""
    parser = commands.add_parser(
        "merge",
        parents=parents,
        help="merge the indexes of parallel writers into one index.json",
        description="Write ROOT/index.json from the index.json of each sub-folder (or only the "
        "--partitions given), in natural order (2 before 10); it is written last, atomically. "
        "Partitions with different columns are refused. "
        "Example: shardstream merge s3://bucket/my-ds",
    )
    parser.add_argument("root", help="the dataset root: a folder or a URL")
    parser.add_argument(
        "--partitions",
        nargs="+",
        metavar="FOLDER",
        help="merge only these sub-folders, in this order (default: every sub-folder with an "
        "index.json)",
    )
    parser.set_defaults(run=_run)


def partition_prefixes(root: str) -> list[str]:
    """The sub-folders of ``root`` (a folder or a URL) that hold an ``index.json``, in order.

    A partition's own sub-folders belong to it: only the shallowest indexes count.
    """
    return partition_folders(open_store(root).list())


def _run(args: argparse.Namespace) -> int:
    prefixes = args.partitions or partition_prefixes(args.root)
    if not prefixes:
        raise ShardNotFoundError(
            f"no sub-folder of {args.root} holds an {INDEX_BASENAME}: write the partitions "
            "there first, or name them with --partitions"
        )
    count = merge_partitions(args.root, prefixes, same_columns=True)
    where = f"from {len(prefixes)} partitions" if args.partitions else "from every sub-folder"
    print(f"merged {count:,} shards {where} into {args.root.rstrip('/')}/{INDEX_BASENAME}")
    return 0
