"""``shardstream merge``: one ``index.json`` from the indexes parallel writers left under a root."""

from __future__ import annotations

import argparse
from typing import Any

from shardstream.format.index import INDEX_BASENAME
from shardstream.storage import is_remote, open_store
from shardstream.writer import merge_index
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
    """The sub-folders of a remote ``root`` that hold an ``index.json``, in natural order.

    A partition's own sub-folders belong to it: only the shallowest indexes count.
    """
    return partition_folders(open_store(root).list())


def _run(args: argparse.Namespace) -> int:
    if args.partitions:
        count = merge_partitions(args.root, args.partitions)
        merged = len(args.partitions)
    elif is_remote(args.root):
        prefixes = partition_prefixes(args.root)
        if not prefixes:
            print(f"shardstream merge: no sub-folder of {args.root} holds an {INDEX_BASENAME}")
            return 3
        count = merge_partitions(args.root, prefixes)
        merged = len(prefixes)
    else:
        count = merge_index(args.root)
        merged = -1
    where = f"from {merged} partitions" if merged >= 0 else "from every sub-folder's index"
    print(f"merged {count:,} shards {where} into {args.root.rstrip('/')}/{INDEX_BASENAME}")
    return 0
