"""Small datasets of the split shard formats (json, csv, tsv, xsv), as the reference writes them.

shardstream writes only MDS; these are written here byte by byte: a data file of one line a
sample and a ``.meta`` file (uint32 count, ``count + 1`` uint32 offsets, the config JSON).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

#: Each split format, and the separator its lines use.
SEPARATORS = {"json": None, "csv": ",", "tsv": "\t", "xsv": "|"}


def write_split_dataset(root: Path, fmt: str, shards: int, per_shard: int) -> Path:
    """``shards`` shards of ``per_shard`` samples ``{"id": int, "text": str}``, ids from 0."""
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for shard in range(shards):
        ids = range(shard * per_shard, (shard + 1) * per_shard)
        separator = SEPARATORS[fmt]
        if separator is None:
            lines = [json.dumps({"id": i, "text": f"t{i}"}) + "\n" for i in ids]
            header = ""
        else:
            lines = [f"{i}{separator}t{i}\n" for i in ids]
            header = f"id{separator}text\n"
        data = (header + "".join(lines)).encode()
        offsets = [len(header.encode())]
        for line in lines:
            offsets.append(offsets[-1] + len(line.encode()))
        config = {"format": fmt, "newline": "\n", "size_limit": None, "version": 2}
        meta = struct.pack(f"<{len(offsets) + 1}I", len(lines), *offsets)
        meta += json.dumps(config, sort_keys=True).encode()
        name = f"shard.{shard:05d}.{fmt}"
        (root / name).write_bytes(data)
        (root / f"{name}.meta").write_bytes(meta)
        entry: dict[str, Any] = {
            "compression": None,
            "format": fmt,
            "hashes": [],
            "newline": "\n",
            "raw_data": {"basename": name, "bytes": len(data), "hashes": {}},
            "raw_meta": {"basename": f"{name}.meta", "bytes": len(meta), "hashes": {}},
            "samples": len(lines),
            "size_limit": None,
            "version": 2,
            "zip_data": None,
            "zip_meta": None,
        }
        if fmt == "json":
            entry["columns"] = {"id": "int", "text": "str"}
        else:
            entry["column_names"] = ["id", "text"]
            entry["column_encodings"] = ["int", "str"]
        if fmt == "xsv":
            entry["separator"] = separator
        entries.append(entry)
    (root / "index.json").write_text(json.dumps({"shards": entries, "version": 2}))
    return root
