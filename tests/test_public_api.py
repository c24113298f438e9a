from __future__ import annotations

import importlib
import json
import pkgutil
import re
import subprocess
import sys

import pytest

import shardstream

PUBLIC = [
    "CSVWriter",
    "Encoding",
    "JSONWriter",
    "LocalDataset",
    "MDSWriter",
    "ReadPolicy",
    "Stream",
    "StreamRegistry",
    "StreamingDataLoader",
    "StreamingDataset",
    "TSVWriter",
    "XSVWriter",
    "__version__",
    "dataframe_to_mds",
    "get_encoding",
    "install_streaming_alias",
    "make_spark_converter",
    "merge_index",
    "register_encoding",
    "streams_registry",
]
HEAVY = ["torch", "pyarrow", "PIL", "zstandard", "brotli", "snappy"]


def all_modules() -> list[str]:
    names = [shardstream.__name__]
    names += [info.name for info in pkgutil.walk_packages(shardstream.__path__, "shardstream.")]
    return sorted(names)


def isort_key(name: str) -> tuple[int, list[object]]:
    """The order ruff's RUF022 (isort-style) wants in ``__all__``.

    CONSTANTS first, then Classes, then everything else, each in natural order (runs of digits
    compare as numbers).
    """
    if len(name) > 1 and name.isupper():
        kind = 0
    elif name[:1].isupper():
        kind = 1
    else:
        kind = 2
    natural = [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
    return kind, natural


def test_public_names_are_pinned():
    assert shardstream.__all__ == PUBLIC
    for name in PUBLIC:
        assert hasattr(shardstream, name)


def test_public_classes_show_as_shardstream():
    names = ("Encoding", "LocalDataset", "MDSWriter", "Stream", "StreamingDataset")
    for name in (*names, "CSVWriter", "JSONWriter", "TSVWriter", "XSVWriter"):
        assert getattr(shardstream, name).__module__ == "shardstream"


def test_version_is_a_string():
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", shardstream.__version__)


def test_isort_key_orders_like_ruff():
    names = ["b", "A", "CONST", "a10", "a2", "Z", "_x"]
    assert sorted(names, key=isort_key) == ["CONST", "A", "Z", "_x", "a2", "a10", "b"]


@pytest.mark.parametrize("module_name", all_modules())
def test_every_module_declares_a_sorted_all(module_name: str):
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{module_name} has no __all__"
    assert isinstance(exported, (list, tuple))
    assert len(set(exported)) == len(exported)
    assert list(exported) == sorted(exported, key=isort_key)
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == []


def heavy_modules_after(imports: str) -> list[str]:
    """The heavy modules in ``sys.modules`` of a fresh interpreter after ``import <imports>``."""
    code = (
        f"import json, sys, {imports}; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_import_is_light():
    assert heavy_modules_after("shardstream") == []


def test_the_check_for_heavy_modules_can_fail():
    assert heavy_modules_after("zstandard, shardstream") == ["zstandard"]


PETASTORM = [
    "BatchedDataLoader",
    "CompressedImageCodec",
    "CompressedNdarrayCodec",
    "ConverterDataLoader",
    "DataLoader",
    "InMemBatchedDataLoader",
    "NdarrayCodec",
    "PredicateBase",
    "Reader",
    "ScalarCodec",
    "SparkDatasetConverter",
    "TransformSpec",
    "Unischema",
    "UnischemaField",
    "decimal_friendly_collate",
    "dict_to_spark_row",
    "edit_field",
    "in_intersection",
    "in_lambda",
    "in_negate",
    "in_pseudorandom_split",
    "in_reduce",
    "in_set",
    "make_batch_reader",
    "make_petastorm_dataset",
    "make_reader",
    "make_spark_converter",
    "materialize_dataset",
    "register_delete_dir_handler",
    "tf_tensors",
    "transform_schema",
]


def test_petastorms_names_are_pinned_in_one_module():
    from shardstream.loader import petastorm

    assert petastorm.__all__ == PETASTORM
    for name in PETASTORM:
        assert hasattr(petastorm, name)
