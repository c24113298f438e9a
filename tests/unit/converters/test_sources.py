"""The converters from pandas, Hugging Face datasets, JSON Lines, CSV and image folders."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from shardstream import LocalDataset
from shardstream.converters import (
    csv_to_mds,
    hf_to_mds,
    image_folder_to_mds,
    jsonl_to_mds,
    pandas_to_mds,
)
from shardstream.errors import ConfigurationError, SampleEncodingError
from shardstream.format.index import parse_index


def read(folder: Path) -> list[dict[str, Any]]:
    with LocalDataset(folder, cache_dir=folder.parent / f"{folder.name}-cache") as dataset:
        return [dataset[i] for i in range(len(dataset))]


def columns_of(folder: Path) -> Mapping[str, str]:
    return parse_index((folder / "index.json").read_bytes(), source="x")[0].columns


def test_pandas_dataframe(tmp_path: Path):
    frame = pd.DataFrame(
        {
            "id": np.arange(30, dtype=np.int32),
            "score": np.linspace(0, 1, 30),
            "name": [f"n{i}" for i in range(30)],
            "when": pd.date_range("2024-01-01", periods=30, freq="h"),
            "vec": [np.array([i, i + 1], dtype=np.float32) for i in range(30)],
            "kind": pd.Categorical([["a", "b"][i % 2] for i in range(30)]),
        }
    )
    assert pandas_to_mds(frame, str(tmp_path / "ds"), progress=False, size_limit=500) == 30
    assert columns_of(tmp_path / "ds") == {"id": "int32", "score": "float64", "name": "str",
                                           "when": "int64", "vec": "ndarray:float32",
                                           "kind": "str"}  # fmt: skip
    samples = read(tmp_path / "ds")
    assert [s["name"] for s in samples] == list(frame["name"])
    assert samples[2]["when"] == (frame["when"][2] - pd.Timestamp(0)) // pd.Timedelta(1, "us")
    np.testing.assert_array_equal(samples[29]["vec"], [29, 30])
    assert [s["kind"] for s in samples[:3]] == ["a", "b", "a"]
    # pandas' missing value (NaN) is a null.
    frame.loc[7, "score"] = np.nan
    with pytest.raises(
        SampleEncodingError, match="column 'score' is null at row 7 of the DataFrame"
    ):
        pandas_to_mds(frame, str(tmp_path / "nan"), progress=False)
    assert pandas_to_mds(frame, str(tmp_path / "skip"), progress=False, on_null="skip") == 29


def test_jsonl_files_in_order(tmp_path: Path):
    paths = []
    for part in range(2):
        path = tmp_path / f"part{part}.jsonl"
        lines = [{"id": part * 10 + i, "text": f"t{i}", "tags": ["a", "b"][: i % 2 + 1],
                  "meta": {"k": i}, "emb": [0.5, i]} for i in range(10)]  # fmt: skip
        path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        paths.append(path)
    assert jsonl_to_mds(paths, str(tmp_path / "ds"), progress=False) == 20
    assert columns_of(tmp_path / "ds") == {"id": "int64", "text": "str", "tags": "json",
                                           "meta": "json", "emb": "ndarray:float64"}  # fmt: skip
    samples = read(tmp_path / "ds")
    assert [s["id"] for s in samples] == list(range(20))
    assert samples[13]["meta"] == {"k": 3}
    assert samples[13]["tags"] == ["a", "b"]
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"id": 1, "x": 2}\n{"id": 2}\n')
    with pytest.raises(SampleEncodingError, match="column 'x' is null at row 1"):
        jsonl_to_mds(missing, str(tmp_path / "m"), progress=False)
    with pytest.raises(ConfigurationError, match="not a file"):
        jsonl_to_mds(tmp_path / "nope.jsonl", str(tmp_path / "n"), progress=False)
    # Later files are read to the first file's schema.
    (tmp_path / "f1.jsonl").write_text('{"id": 1, "score": 0.5}\n')
    (tmp_path / "f2.jsonl").write_text('{"id": 2, "score": 1}\n')
    (tmp_path / "f3.jsonl").write_text('{"id": 3, "score": "high"}\n')
    files = [tmp_path / "f1.jsonl", tmp_path / "f2.jsonl"]
    assert jsonl_to_mds(files, str(tmp_path / "cast"), progress=False) == 2
    assert [s["score"] for s in read(tmp_path / "cast")] == [0.5, 1.0]
    with pytest.raises(ConfigurationError, match=r"f3\.jsonl: .*'high'.*give schema="):
        jsonl_to_mds([files[0], tmp_path / "f3.jsonl"], str(tmp_path / "bad"), progress=False)
    assert not (tmp_path / "bad" / "index.json").exists()  # no index for a failed write


def test_csv_files_and_tsv(tmp_path: Path):
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text("id,name,score\n1,x,0.5\n2,,1.5\n")
    second.write_text("id,name,score\n3,z,2.5\n")
    assert csv_to_mds([first, second], str(tmp_path / "ds"), progress=False) == 3
    assert columns_of(tmp_path / "ds") == {"id": "int64", "name": "str", "score": "float64"}
    assert [(s["id"], s["name"], s["score"]) for s in read(tmp_path / "ds")] == [
        (1, "x", 0.5), (2, "", 1.5), (3, "z", 2.5)]  # fmt: skip
    tsv = tmp_path / "c.tsv"
    tsv.write_text("id\tscore\n1\t0.5\n2\t\n")
    with pytest.raises(SampleEncodingError, match="column 'score' is null at row 1"):
        csv_to_mds(tsv, str(tmp_path / "t"), delimiter="\t", progress=False)
    tsv.write_text("id\tscore\n1\t\n")  # a column with no value at all has no type
    with pytest.raises(ConfigurationError, match=r"column 'score' has Arrow type null"):
        csv_to_mds(tsv, str(tmp_path / "t"), delimiter="\t", progress=False)


def _png(color: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 3), (color, 0, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_image_folder_labels_classes_in_sorted_order(tmp_path: Path):
    root = tmp_path / "images"
    for name, count in (("dog", 2), ("cat", 3)):
        (root / name).mkdir(parents=True)
        for i in range(count):
            (root / name / f"{i}.png").write_bytes(_png(i))
    (root / "cat" / "notes.txt").write_text("not an image")
    assert image_folder_to_mds(root, str(tmp_path / "ds"), progress=False) == 5
    samples = read(tmp_path / "ds")
    assert [(s["label"], s["class_name"], s["path"]) for s in samples] == [
        (0, "cat", "cat/0.png"), (0, "cat", "cat/1.png"), (0, "cat", "cat/2.png"),
        (1, "dog", "dog/0.png"), (1, "dog", "dog/1.png")]  # fmt: skip
    assert samples[4]["image"] == _png(1)
    assert json.loads((tmp_path / "ds" / "classes.json").read_text()) == {"classes": ["cat", "dog"]}
    decoded = read_images(root, tmp_path / "png", "png")
    assert decoded[1].getpixel((0, 0)) == (1, 0, 0)
    with pytest.raises(ConfigurationError, match="no class sub-folders"):
        image_folder_to_mds(root / "cat", str(tmp_path / "x"), progress=False)


def read_images(root: Path, out: Path, encoding: str) -> list[Any]:
    image_folder_to_mds(root, str(out), image_encoding=encoding, progress=False)
    return [sample["image"] for sample in read(out)]


def test_hugging_face_dataset(tmp_path: Path):
    import datasets

    features = datasets.Features(
        {
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["neg", "pos"]),
            "emb": datasets.Sequence(datasets.Value("float32")),
            "image": datasets.Image(),
        }
    )
    from PIL import Image

    data = {
        "text": [f"t{i}" for i in range(12)],
        "label": [i % 2 for i in range(12)],
        "emb": [[float(i), 1.0] for i in range(12)],
        "image": [Image.open(io.BytesIO(_png(i))) for i in range(12)],
    }
    dataset = datasets.Dataset.from_dict(data, features=features).select(range(11, -1, -2))
    assert hf_to_mds(dataset, str(tmp_path / "ds"), progress=False, batch_rows=4) == 6
    assert columns_of(tmp_path / "ds") == {"text": "str", "label": "int64",
                                           "emb": "ndarray:float32", "image": "bytes"}  # fmt: skip
    samples = read(tmp_path / "ds")
    assert [s["text"] for s in samples] == ["t11", "t9", "t7", "t5", "t3", "t1"]
    assert all(s["label"] == 1 for s in samples)
    decoded = Image.open(io.BytesIO(samples[0]["image"]))
    assert decoded.getpixel((0, 0)) == (11, 0, 0)
    with pytest.raises(ConfigurationError, match="pick a split"):
        hf_to_mds(datasets.DatasetDict({"train": dataset}), str(tmp_path / "x"))
