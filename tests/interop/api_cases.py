"""The reference API calls compared by test_reference_api.py, defined once for both venvs.

Imported by the test suite and by ``ref_api_worker.py`` (the reference's venv), so it may use
only numpy, Pillow and the standard library.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from PIL import Image

#: Samples of the two streams (their ``id`` columns run on from stream to stream).
SIZES = (40, 13)
COLUMNS = {"id": "int", "text": "str"}
WRITER: list[dict[str, Any]] = [
    {"size_limit": 400},
    {"size_limit": 300, "compression": "zstd", "hashes": ["xxh64"]},
]

#: The reference's introspection attributes and the sizes it reports.
TABLES = [
    "samples_per_shard", "sample_offset_per_shard", "stream_per_shard", "shards_per_stream",
    "shard_offset_per_stream", "samples_per_stream", "sample_offset_per_stream",
]  # fmt: skip
SIZES_READ = ["num_samples", "size", "num_shards", "num_streams", "epoch_size"]

#: Stream weights (one dict of Stream arguments per stream) and the dataset's epoch_size. In
#: the "rounded" ones, rounding leaves a sample over, which each library gives to a stream
#: drawn by its own generator.
WEIGHTS: dict[str, tuple[list[dict[str, Any]], int | None]] = {
    "absolute": ([{"repeat": 2}, {"choose": 5}], None),
    "relative": ([{"proportion": 3}, {"proportion": 1}], 40),
    "relative_rounded": ([{"proportion": 2}, {"proportion": 1}], 31),
    "by_size": ([{}, {}], 106),
    "by_size_rounded": ([{}, {}], 30),
    "none": ([{}, {}], None),
}


def keys() -> dict[str, Any]:
    """NumPy-style keys of ``ds[key]`` (a negative-step slice differs on purpose: not here)."""
    return {
        "list": [1, 2],
        "slice": slice(0, 3),
        "open_slice": slice(38, None),
        "arange": np.arange(3),
        "nested": [[1, 2], [45]],
        "array_2d": np.array([[4, 5], [6, 52]]),
        "negative": -1,
        "numpy_int": np.int64(41),
        "empty": [],
    }


def bad_values() -> dict[str, tuple[str, Any]]:
    """``{case: (column encoding, value)}``: values the reference's MDSWriter raises for."""
    return {
        "bytes_str": ("bytes", "x"),
        "str_int": ("str", 1),
        "int_str": ("int", "1"),
        "int_float": ("int", 1.5),
        "int_huge": ("int", 2**70),
        "int8_none": ("int8", None),
        "uint8_300": ("uint8", 300),
        "str_int_str": ("str_int", "1"),
        "str_float_str": ("str_float", "1.0"),
        "str_decimal_float": ("str_decimal", 1.5),
        "json_set": ("json", {1, 2}),
        "pkl_lambda": ("pkl", lambda x: x),
        "ndarray_list": ("ndarray", [1, 2]),
        "ndarray_complex": ("ndarray", np.zeros(2, np.complex64)),
        "ndarray_empty": ("ndarray", np.zeros(0)),
        "ndarray_scalar": ("ndarray", np.array(5)),
        "ndarray_dtype": ("ndarray:uint8", np.zeros(2, np.int32)),
        "ndarray_shape": ("ndarray:uint8:2,2", np.zeros(3, np.uint8)),
        "pil_str": ("pil", "x"),
        "jpeg_none": ("jpeg", None),
        "jpeg_rgba": ("jpeg", Image.new("RGBA", (2, 2))),
        "png_array": ("png", np.zeros((2, 2))),
        "list_pil_image": ("list[pil]", Image.new("RGB", (2, 2))),
        "list_jpeg_bytes": ("list[jpeg]", [b"x"]),
        "jpeg_array_none": ("jpeg_array", None),
    }


def split_bad_samples() -> dict[str, tuple[str, dict[str, str], dict[str, Any]]]:
    """``{case: (writer, columns, sample)}``: samples the reference's text writers raise for."""
    return {
        "json_str_int": ("JSONWriter", {"c": "str"}, {"c": 1}),
        "json_int_str": ("JSONWriter", {"c": "int"}, {"c": "1"}),
        "json_int_float": ("JSONWriter", {"c": "int"}, {"c": 1.5}),
        "json_float_int": ("JSONWriter", {"c": "float"}, {"c": 1}),
        "json_missing": ("JSONWriter", {"c": "str", "d": "int"}, {"c": "x"}),
        "csv_int_none": ("CSVWriter", {"c": "int"}, {"c": None}),
        "csv_missing": ("CSVWriter", {"c": "int"}, {}),
        "tsv_float_str": ("TSVWriter", {"c": "float"}, {"c": "0.5"}),
        "xsv_str_bytes": ("XSVWriter", {"c": "str"}, {"c": b"x"}),
    }


def make_dataset(
    library: Any, job: dict[str, Any], name: str, weights: list[dict[str, Any]], **kwargs: Any
) -> Any:
    """A StreamingDataset of ``library`` (either one) over the job's two remotes."""
    scratch = os.path.join(job["scratch"], name)
    streams = [
        library.Stream(remote=remote, local=os.path.join(scratch, str(number)), **weight)
        for number, (remote, weight) in enumerate(zip(job["remotes"], weights, strict=True))
    ]
    return library.StreamingDataset(streams=streams, batch_size=4, **kwargs)


def ids(samples: Any) -> Any:
    """The ``id`` column of what ``ds[key]`` returned, nested as it is."""
    if isinstance(samples, dict):
        return int(samples["id"])
    return [ids(sample) for sample in samples]


def settled_weights(streams: Any) -> list[list[tuple[float, str]]]:
    """Each stream's ``(value, type name)`` of proportion, repeat and choose."""
    return [
        [(float(getattr(s, key)), type(getattr(s, key)).__name__)
         for key in ("proportion", "repeat", "choose")]
        for s in streams
    ]  # fmt: skip


def shard_facts(shard: Any) -> dict[str, Any]:
    """What either library's ``ds.shards[i]`` says of its shard (read by the same attributes)."""
    raw, zipped = shard.raw_data, shard.zip_data
    return {
        "samples": shard.samples, "len": len(shard), "size": shard.size,
        "column_names": shard.column_names, "column_encodings": shard.column_encodings,
        "column_sizes": shard.column_sizes, "compression": shard.compression,
        "hashes": shard.hashes, "size_limit": shard.size_limit,
        "raw_data": (raw.basename, raw.bytes, dict(raw.hashes)),
        "zip_data": None if zipped is None else (zipped.basename, zipped.bytes,
                                                  dict(zipped.hashes)),
        "raw_size": shard.get_raw_size(), "zip_size": shard.get_zip_size(),
        "max_size": shard.get_max_size(),
        "persistent": [shard.get_persistent_size(keep) for keep in (False, True)],
        "path": os.path.realpath(os.path.join(shard.dirname, shard.split, raw.basename)),
    }  # fmt: skip


def builtin_name(error: BaseException) -> str:
    """``module.name`` of the most derived builtin class (or pickle's) ``error`` is."""
    for cls in type(error).__mro__:
        if cls.__module__ in ("builtins", "_pickle"):
            return f"{cls.__module__}.{cls.__qualname__}"
    raise AssertionError(f"{error!r} is no builtin exception")


def files_of(folder: str) -> list[str]:
    """The shard files in a cache folder (not the index, nor either library's own state)."""
    return sorted(name for name in os.listdir(folder) if name.startswith("shard."))
