"""TransformSpec with Petastorm's meaning: the output fields, and the function on a batch."""

from __future__ import annotations

import pickle
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch

from shardstream.errors import ConfigurationError
from shardstream.loader import TransformSpec
from shardstream.loader.fields import Field
from shardstream.loader.transform_spec import TransformCollate, apply_transform, transformed_fields

FIELDS = [Field("x", np.dtype("f8"), ()), Field("v", np.dtype("f4"), (None,)),
          Field("name", np.dtype(np.str_), ()), Field("y", np.dtype("i8"), ())]  # fmt: skip
COLUMNS = {"x": "float64", "v": "ndarray:float32", "name": "str", "y": "int64"}
ROWS = [{"x": float(i), "v": np.full(3, i, "f4"), "name": f"r{i}", "y": i} for i in range(4)]
# Petastorm's UnischemaField, duck-typed: name, numpy_dtype, shape, codec, nullable.
UnischemaField = namedtuple("UnischemaField", "name numpy_dtype shape codec nullable")


def names(fields: list[Field]) -> list[str]:
    return [field.name for field in fields]


def test_removed_then_edited_appended_then_selected():
    spec = TransformSpec(edit_fields=[("x", np.float32, (), False), ("z", np.int32, (2,), True)],
                         removed_fields=["name"])  # fmt: skip
    out = transformed_fields(FIELDS, spec)
    assert names(out) == ["v", "y", "x", "z"]  # kept in order, edited ones appended
    assert out[2].dtype == np.float32
    assert out[3] == Field("z", np.dtype("i4"), (2,), True)
    spec.selected_fields = ["z", "v"]
    assert names(transformed_fields(FIELDS, spec)) == ["z", "v"]


def test_unischema_fields_are_edit_fields():
    spec = TransformSpec(edit_fields=[UnischemaField("w", np.uint8, (None, 2), None, False)])
    assert transformed_fields(FIELDS, spec)[-1] == Field("w", np.dtype("u1"), (None, 2))


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (TransformSpec(removed_fields=["nope"]), "removes 'nope'.*x, v, name, y"),
        (TransformSpec(selected_fields=["nope"]), "selects 'nope'"),
    ],
)
def test_unknown_fields_are_named(spec: TransformSpec, match: str):
    with pytest.raises(ConfigurationError, match=match):
        transformed_fields(FIELDS, spec)


def test_bad_edit_field_and_func():
    with pytest.raises(ConfigurationError, match="4-tuple"):
        TransformSpec(edit_fields=[("z", np.int32)])
    with pytest.raises(ConfigurationError, match="callable"):
        TransformSpec(func=3)  # type: ignore[arg-type]


def double(frame: Any) -> Any:  # module level: the collate pickles into workers
    return frame.assign(y=frame.y * 2, s=[v.sum() for v in frame.v]).drop(columns=["name"])


def test_apply_runs_the_function_on_a_dataframe_of_the_batch():
    seen = []

    def func(frame: Any) -> Any:
        seen.append((list(frame.columns), len(frame), type(frame.v.iloc[0])))
        return double(frame)

    spec = TransformSpec(func, edit_fields=[("s", np.float32, (), False)], removed_fields=["name"])
    out_fields = transformed_fields(FIELDS, spec)
    out = apply_transform(spec, ROWS, FIELDS, COLUMNS, out_fields)
    assert seen == [(["x", "v", "name", "y"], 4, np.ndarray)]
    assert list(out) == ["x", "v", "y", "s"]
    assert out["y"].tolist() == [0, 2, 4, 6]
    assert out["s"].dtype == np.float32
    assert out["s"].tolist() == [0, 3, 6, 9]
    assert out["v"].shape == (4, 3)


def test_a_function_that_drops_a_declared_column_is_named():
    spec = TransformSpec(lambda frame: frame.drop(columns=["y"]))
    with pytest.raises(ConfigurationError, match="returned no column 'y'"):
        apply_transform(spec, ROWS, FIELDS, COLUMNS, transformed_fields(FIELDS, spec))
    spec = TransformSpec(lambda frame: None)
    with pytest.raises(ConfigurationError, match="must return a pandas DataFrame"):
        apply_transform(spec, ROWS, FIELDS, COLUMNS, transformed_fields(FIELDS, spec))


def test_collate_pickles_and_makes_tensors():
    spec = TransformSpec(double, [("s", np.float32, (), False)], removed_fields=["name"])
    collate = pickle.loads(pickle.dumps(TransformCollate(spec, FIELDS, COLUMNS)))
    batch = collate(ROWS)
    assert set(batch) == {"x", "v", "y", "s"}
    assert batch["y"].tolist() == [0, 2, 4, 6]
    assert batch["s"].dtype == torch.float32
    kept = TransformCollate(TransformSpec(), FIELDS, COLUMNS)(ROWS)
    assert kept["name"] == ["r0", "r1", "r2", "r3"]  # text stays a list
