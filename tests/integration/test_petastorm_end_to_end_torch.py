"""Petastorm's own torch loader tests (``test_pytorch_dataloader.py``, 0.13.1), ported.

On the same ``synthetic_dataset`` as tests/integration/test_petastorm_end_to_end.py, with
``DataLoader`` and ``decimal_friendly_collate``. ``BatchedDataLoader`` and
``InMemBatchedDataLoader`` are not provided, so their cases are not ported.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
import pytest
import torch

from shardstream.loader.petastorm import (
    DataLoader,
    TransformSpec,
    decimal_friendly_collate,
    make_reader,
)

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)
from .test_petastorm_end_to_end import Synthetic, TestSchema
from .test_petastorm_end_to_end import synthetic_dataset as synthetic_dataset_fixture  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]

BATCHABLE_FIELDS = set(TestSchema.fields.values()) - {
    TestSchema.matrix_nullable, TestSchema.string_array_nullable, TestSchema.matrix_string,
    TestSchema.empty_matrix_string, TestSchema.integer_nullable,
}  # fmt: skip


@pytest.fixture(name="synthetic_dataset", scope="module")
def synthetic(synthetic_dataset_fixture: Synthetic) -> Synthetic:  # noqa: F811
    return synthetic_dataset_fixture


def dummy(url: str, **kwargs: Any) -> Any:
    return make_reader(url, reader_pool_type="dummy", **kwargs)


def thread(url: str, **kwargs: Any) -> Any:
    return make_reader(url, reader_pool_type="thread", **kwargs)


def process(url: str, **kwargs: Any) -> Any:
    return make_reader(url, reader_pool_type="process", workers_count=1, **kwargs)


def _check_simple_reader(loader: Any, expected_data: list[dict[str, Any]],
                         expected_fields: set[Any]) -> None:  # fmt: skip
    def _type(v: Any) -> Any:
        return v.dtype if isinstance(v, np.ndarray) else type(v)

    def _unbatch(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            x_numpy = x.numpy()
            assert x_numpy.shape[0] == 1
            return x_numpy.squeeze(0)
        if isinstance(x, list):
            return x[0]
        raise RuntimeError("Unexpected type while unbatching.")

    names = [f.name for f in expected_fields]
    count = 0
    for actual in loader:
        actual_numpy = {k: _unbatch(v) for k, v in actual.items() if k in names}
        expected_all = next(d for d in expected_data if d["id"] == actual_numpy["id"])
        expected = {k: v for k, v in expected_all.items() if k in names}
        np.testing.assert_equal(actual_numpy, expected)
        # Petastorm compares the actual types with themselves; here with the expected ones,
        # promoted as both promote them for torch.
        promoted = {np.dtype("uint16"): np.dtype("int32"), np.dtype("uint32"): np.dtype("int64"),
                    np.dtype("bool"): np.dtype("uint8")}  # fmt: skip
        assert {k: _type(v) for k, v in actual_numpy.items()} == {
            k: promoted.get(np.dtype(_type(v)), _type(v))
            if _type(v) is not Decimal and not isinstance(v, str)
            else _type(v)
            for k, v in expected.items()
        }
        count += 1
    assert count == len(expected_data)


def _sensor_name_to_int(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "sensor_name": 0}


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_simple_read(synthetic_dataset: Synthetic, reader_factory: Any):
    spec = TransformSpec(_sensor_name_to_int)
    reader = reader_factory(
        synthetic_dataset.url, schema_fields=BATCHABLE_FIELDS, transform_spec=spec
    )
    with DataLoader(reader) as loader:
        _check_simple_reader(loader, synthetic_dataset.data,
                             BATCHABLE_FIELDS - {TestSchema.sensor_name})  # fmt: skip


def test_decimal_friendly_collate_empty_input():
    assert decimal_friendly_collate([{}]) == {}


def test_decimal_friendly_collate_input_has_decimals_in_dictionary():
    actual = decimal_friendly_collate([{"decimal": Decimal("1.0"), "int": 1},
                                       {"decimal": Decimal("1.1"), "int": 2}])  # fmt: skip
    assert len(actual) == 2
    assert actual["decimal"] == [Decimal("1.0"), Decimal("1.1")]
    np.testing.assert_equal([1, 2], actual["int"].numpy())


def test_decimal_friendly_collate_input_has_decimals_in_tuple():
    actual = decimal_friendly_collate(([Decimal("1.0"), 1], [Decimal("1.1"), 2]))
    assert len(actual) == 2
    assert actual[0] == (Decimal("1.0"), Decimal("1.1"))
    np.testing.assert_equal((1, 2), actual[1].numpy())


def test_no_shuffling(synthetic_dataset: Synthetic):
    with DataLoader(dummy(synthetic_dataset.url, schema_fields=["^id$"], workers_count=1,
                          shuffle_row_groups=False)) as loader:  # fmt: skip
        ids = [row["id"][0].numpy() for row in loader]
    np.testing.assert_array_equal([row["id"] for row in synthetic_dataset.data], ids)


def test_with_shuffling_buffer(synthetic_dataset: Synthetic):
    reader = dummy(synthetic_dataset.url, schema_fields=["^id$"], workers_count=1,
                   shuffle_row_groups=False)  # fmt: skip
    with DataLoader(reader, shuffling_queue_capacity=51) as loader:
        ids = [row["id"][0].numpy() for row in loader]
    assert len(ids) == len(synthetic_dataset.data)
    assert sum(np.diff(ids) == 1) < len(synthetic_dataset.data) / 10.0


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_call_iter_on_dataloader_multiple_times(synthetic_dataset: Synthetic, reader_factory: Any):
    with DataLoader(reader_factory(synthetic_dataset.url, schema_fields=[TestSchema.id]),
                    batch_size=2) as loader:  # fmt: skip
        pass1_set: set[int] = set()
        for batch in iter(loader):
            pass1_set |= set(batch["id"].numpy())
        pass2_set: set[int] = set()
        for batch in iter(loader):
            pass2_set |= set(batch["id"].numpy())
        assert pass1_set == pass2_set
        iter3 = iter(loader)
        next(iter3)
        match_str = "You must finish a full pass of Petastorm DataLoader before making another pass"
        with pytest.raises(RuntimeError, match=match_str):
            next(iter(loader))
