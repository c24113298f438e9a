"""Small Delta tables for the Delta streaming tests, written with deltalake (delta-rs, no JVM).

deltalake writes appends, overwrites, deletes (by rewriting files), partitions and vacuums. Two
commits it does not write are made here by hand, as Spark writes them: a deletion vector that
removes rows without rewriting the file (inline, a serialized roaring bitmap in Z85 text), and
a column renamed under column mapping (a new schema whose field keeps its physical name).
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, WriterProperties, write_deltalake

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_DV_MAGIC = 1681511377
_ROARING_NO_RUNS = 12346


def rows(first: int, count: int, *, year: int | None = None) -> pa.Table:
    """Rows ``first .. first + count - 1``: an id, a text and a year (a partition column)."""
    ids = list(range(first, first + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"row-{i}" for i in ids], pa.string()),
            "year": pa.array([year if year is not None else 2020 + i % 2 for i in ids], pa.int64()),
        }
    )


def write(root: Path | str, table: pa.Table, *, mode: str = "append", **options: Any) -> None:
    """Write ``table`` into the Delta table at ``root``, in row groups of 8 rows."""
    writer: Any = write_deltalake  # its overloads tie mode to a literal
    writer(
        str(root), table, mode=mode,
        writer_properties=WriterProperties(max_row_group_size=8), **options,
    )  # fmt: skip


def table_with_versions(root: Path, **options: Any) -> Path:
    """Version 0: ids 0-39 over two partitions; 1: ids 40-59 appended; 2: ids 0-4 deleted."""
    write(root, rows(0, 40), partition_by=["year"], **options)
    write(root, rows(40, 20), partition_by=["year"])
    DeltaTable(str(root)).delete("id < 5")
    return root


def next_version(root: Path) -> int:
    return DeltaTable(str(root)).version() + 1


def commit(root: Path, actions: list[dict[str, Any]]) -> int:
    """Write the next commit of the table at ``root`` by hand; return its version."""
    version = next_version(root)
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "MANUAL"}}
    lines = [json.dumps(action) for action in [*actions, info]]
    (root / "_delta_log" / f"{version:020d}.json").write_text("\n".join(lines) + "\n")
    return version


def delete_with_vector(root: Path, key: str, deleted: list[int]) -> int:
    """Delete rows ``deleted`` of the file ``key`` with an inline deletion vector."""
    table = DeltaTable(str(root))
    actions = pa.table(table.get_add_actions(flatten=False)).to_pylist()
    (add,) = [action for action in actions if action["path"] == key]
    values = {k: None if v is None else str(v) for k, v in (add.get("partition") or {}).items()}
    data = _roaring(sorted(deleted))
    vector = {
        "storageType": "i",
        "pathOrInlineDv": _z85(data),
        "sizeInBytes": len(data),
        "cardinality": len(deleted),
    }
    now = int(time.time() * 1000)
    return commit(
        root,
        [
            {"remove": {"path": key, "deletionTimestamp": now, "dataChange": True,
                        "partitionValues": values, "size": add["size_bytes"]}},
            {"add": {"path": key, "partitionValues": values, "size": add["size_bytes"],
                     "modificationTime": now, "dataChange": True, "deletionVector": vector,
                     "stats": json.dumps({"numRecords": add["num_records"]})}},
        ],
    )  # fmt: skip


def rename_column(root: Path, old: str, new: str) -> int:
    """Rename a column of a table with column mapping: only the schema's logical name changes."""
    log = sorted((root / "_delta_log").glob("*.json"))
    metadata = None
    for path in log:
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                metadata = action["metaData"]
    assert metadata is not None
    schema = json.loads(metadata["schemaString"])
    for field in schema["fields"]:
        if field["name"] == old:
            field["name"] = new
    metadata["schemaString"] = json.dumps(schema)
    return commit(root, [{"metaData": metadata}])


def set_reader_feature(root: Path, feature: str) -> int:
    """Commit a protocol that needs the reader feature ``feature``."""
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": [feature],
        "writerFeatures": [feature],
    }
    return commit(root, [{"protocol": protocol}])


def same_sized_commits(first: Path, second: Path) -> None:
    """Pad the shorter of each pair of same-named commits with JSON whitespace to one size.

    Commits of two tables of like rows differ in length only by a few digits (a duration, a
    statistic), so one table deleted and written again at its path can leave commits of the same
    names and sizes: that case is made certain here.
    """
    for mine in sorted((first / "_delta_log").glob("*.json")):
        theirs = second / "_delta_log" / mine.name
        a, b = mine.read_bytes(), theirs.read_bytes()
        short, long = (mine, b) if len(a) < len(b) else (theirs, a)
        data = short.read_bytes()
        if len(data) != len(long):
            short.write_bytes(b"{" + b" " * (len(long) - len(data)) + data[1:])


def _roaring(values: list[int]) -> bytes:
    """Delta's serialized ``RoaringBitmapArray`` of small row numbers (one 32-bit bitmap)."""
    assert values
    assert values[-1] < 1 << 16
    container = struct.pack(f"<{len(values)}H", *values)
    bitmap = (
        struct.pack("<II", _ROARING_NO_RUNS, 1)
        + struct.pack("<HH", 0, len(values) - 1)
        + struct.pack("<I", 8 + 4 + 4)
        + container
    )
    data = struct.pack("<I", _DV_MAGIC) + struct.pack("<q", 1) + struct.pack("<I", 0) + bitmap
    return data + b"\0" * (-len(data) % 4)


def _z85(data: bytes) -> str:
    out = []
    for (word,) in struct.iter_unpack(">I", data):
        chars = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            chars.append(_Z85[digit])
        out.append("".join(reversed(chars)))
    return "".join(out)


def add_file(root: Path, key: str, table: pa.Table) -> int:
    """Commit a Parquet file of ``table``, written as is (as a writer other than deltalake)."""
    pq.write_table(table, root / key)
    size = (root / key).stat().st_size
    stats = json.dumps({"numRecords": table.num_rows})
    add = {"path": key, "partitionValues": {}, "size": size, "stats": stats,
           "modificationTime": int(time.time() * 1000), "dataChange": True}  # fmt: skip
    return commit(root, [{"add": add}])
