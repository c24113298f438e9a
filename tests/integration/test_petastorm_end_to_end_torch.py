"""Petastorm's own torch loader tests (``test_pytorch_dataloader.py``, 0.13.1), ported.

On the same ``synthetic_dataset`` as tests/integration/test_petastorm_end_to_end.py (and the
``scalar_dataset`` of tests/integration/test_petastorm_parquet_reader.py), with ``DataLoader``,
``BatchedDataLoader``, ``InMemBatchedDataLoader`` and ``decimal_friendly_collate``. The tests of
Petastorm's private ``_sanitize_pytorch_types`` run on ``promoted``, its counterpart here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
import pytest
import torch

from shardstream.loader.petastorm import (
    BatchedDataLoader,
    DataLoader,
    InMemBatchedDataLoader,
    TransformSpec,
    decimal_friendly_collate,
    make_batch_reader,
    make_reader,
)
from shardstream.loader.petastorm.batched import load_rows
from shardstream.loader.petastorm.pytorch import promoted

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)
from .test_petastorm_end_to_end import Synthetic, TestSchema
from .test_petastorm_end_to_end import synthetic_dataset as synthetic_dataset_fixture  # noqa: F401
from .test_petastorm_parquet_reader import Dataset
from .test_petastorm_parquet_reader import scalar_dataset as scalar_dataset_fixture  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]

BATCHABLE_FIELDS = set(TestSchema.fields.values()) - {
    TestSchema.matrix_nullable, TestSchema.string_array_nullable, TestSchema.matrix_string,
    TestSchema.empty_matrix_string, TestSchema.integer_nullable,
}  # fmt: skip
TORCH_BATCHABLE_FIELDS = BATCHABLE_FIELDS - {TestSchema.decimal, TestSchema.partition_key}
BASIC_DATA_LOADERS = [DataLoader, BatchedDataLoader]


@pytest.fixture(name="scalar_dataset", scope="module")
def scalar(scalar_dataset_fixture: Dataset) -> Dataset:  # noqa: F811
    return scalar_dataset_fixture


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


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
@pytest.mark.parametrize("loader_factory", [BatchedDataLoader, InMemBatchedDataLoader])
def test_simple_read_batched(synthetic_dataset: Synthetic, reader_factory: Any,
                             loader_factory: Any):  # fmt: skip
    # Petastorm's body makes a BatchedDataLoader whatever loader_factory is; here each is used.
    spec = TransformSpec(_sensor_name_to_int)
    reader = reader_factory(synthetic_dataset.url, schema_fields=TORCH_BATCHABLE_FIELDS,
                            transform_spec=spec)  # fmt: skip
    with loader_factory(reader) as loader:
        _check_simple_reader(loader, synthetic_dataset.data,
                             TORCH_BATCHABLE_FIELDS - {TestSchema.sensor_name})  # fmt: skip


def test_sanitize_pytorch_types_int8():
    value = promoted("a", np.asarray([-1, 1], dtype=np.int8))
    np.testing.assert_array_equal(value, [-1, 1])
    assert value.dtype == np.int8


@pytest.mark.parametrize(
    "numpy_dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64]
)
def test_torch_tensorable_types(numpy_dtype: Any):
    value = np.zeros((2, 2), dtype=numpy_dtype)
    torchable = True
    try:
        torch.Tensor(value)
    except TypeError:
        torchable = False
    tensor_and_back = torch.as_tensor(promoted("value", value)).numpy()
    if tensor_and_back.dtype != value.dtype:
        assert tensor_and_back.dtype.itemsize > value.dtype.itemsize
        # Petastorm asserts that only what torch cannot hold is promoted. torch 2.3 and later
        # hold uint16 and uint32 (with few operations), which both still promote, so
        # Petastorm's own test fails there as well: those two are left out of the assertion.
        if numpy_dtype not in (np.uint16, np.uint32):
            assert not torchable, f"promoted {numpy_dtype}, which a Tensor takes as it is"


def test_no_shuffling_batched(synthetic_dataset: Synthetic):
    # test_no_shuffling's BatchedDataLoader case.
    with BatchedDataLoader(dummy(synthetic_dataset.url, schema_fields=["^id$"], workers_count=1,
                                 shuffle_row_groups=False)) as loader:  # fmt: skip
        ids = [row["id"][0].numpy() for row in loader]
    np.testing.assert_array_equal([row["id"] for row in synthetic_dataset.data], ids)


@pytest.mark.parametrize("epochs", [1, 3])
def test_no_shuffling_inmem(synthetic_dataset: Synthetic, epochs: int):
    reader = dummy(synthetic_dataset.url, schema_fields=["^id$"], workers_count=1,
                   shuffle_row_groups=False)  # fmt: skip
    with InMemBatchedDataLoader(reader, num_epochs=epochs, rows_capacity=100) as loader:
        ids = [row["id"][0].numpy() for row in loader]
    np.testing.assert_array_equal([row["id"] for row in synthetic_dataset.data] * epochs, ids)


def test_with_shuffling_buffer_batched(synthetic_dataset: Synthetic):
    # test_with_shuffling_buffer's BatchedDataLoader case.
    reader = dummy(synthetic_dataset.url, schema_fields=["^id$"], workers_count=1,
                   shuffle_row_groups=False)  # fmt: skip
    with BatchedDataLoader(reader, shuffling_queue_capacity=51) as loader:
        ids = [row["id"][0].numpy() for row in loader]
    assert len(ids) == len(synthetic_dataset.data)
    assert sum(np.diff(ids) == 1) < len(synthetic_dataset.data) / 10.0


def test_with_shuffling_buffer_inmem(synthetic_dataset: Synthetic):
    reader = dummy(synthetic_dataset.url, schema_fields=["^id$"], workers_count=1,
                   shuffle_row_groups=False)  # fmt: skip
    with InMemBatchedDataLoader(reader, rows_capacity=100, shuffle=True) as loader:
        ids = [row["id"][0].numpy() for row in loader]
    assert len(ids) == len(synthetic_dataset.data)
    assert sum(np.diff(ids) == 1) < len(synthetic_dataset.data) / 10.0


def _pytorch_compatible_fields(scalar_dataset: Dataset) -> list[str]:
    return [k for k, v in scalar_dataset.data[0].items()
            if not isinstance(v, (np.datetime64, np.str_))]  # fmt: skip


@pytest.mark.parametrize("shuffling_queue_capacity", [0, 3, 11, 1000])
@pytest.mark.parametrize("data_loader_type", BASIC_DATA_LOADERS)
def test_with_batch_reader(scalar_dataset: Dataset, shuffling_queue_capacity: int,
                           data_loader_type: Any):  # fmt: skip
    fields = _pytorch_compatible_fields(scalar_dataset)
    reader = make_batch_reader(scalar_dataset.url, schema_fields=fields)
    with data_loader_type(reader, batch_size=3,
                          shuffling_queue_capacity=shuffling_queue_capacity) as loader:  # fmt: skip
        batches = list(loader)
    assert len(scalar_dataset.data) == sum(batch["id"].shape[0] for batch in batches)
    assert len(scalar_dataset.data) == sum(b["int_fixed_size_list"].shape[0] for b in batches)
    assert batches[0]["int_fixed_size_list"].shape[1] == len(
        scalar_dataset.data[0]["int_fixed_size_list"]
    )


@pytest.mark.parametrize("shuffle", [False, True])
def test_with_batch_reader_inmem(scalar_dataset: Dataset, shuffle: bool):
    fields = _pytorch_compatible_fields(scalar_dataset)
    reader = make_batch_reader(scalar_dataset.url, schema_fields=fields)
    with InMemBatchedDataLoader(reader, batch_size=3, shuffle=shuffle, rows_capacity=100) as loader:
        batches = list(loader)
    assert len(scalar_dataset.data) == sum(batch["id"].shape[0] for batch in batches)
    assert len(scalar_dataset.data) == sum(b["int_fixed_size_list"].shape[0] for b in batches)
    assert batches[0]["int_fixed_size_list"].shape[1] == len(
        scalar_dataset.data[0]["int_fixed_size_list"]
    )


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_call_iter_on_dataloader_multiple_times_batched(synthetic_dataset: Synthetic,
                                                        reader_factory: Any):  # fmt: skip
    # test_call_iter_on_dataloader_multiple_times's BatchedDataLoader case.
    with BatchedDataLoader(reader_factory(synthetic_dataset.url, schema_fields=[TestSchema.id]),
                           batch_size=2) as loader:  # fmt: skip
        pass1_set = {int(i) for batch in iter(loader) for i in batch["id"]}
        pass2_set = {int(i) for batch in iter(loader) for i in batch["id"]}
        assert pass1_set == pass2_set
        iter3 = iter(loader)
        next(iter3)
        match_str = "You must finish a full pass of Petastorm DataLoader before making another pass"
        with pytest.raises(RuntimeError, match=match_str):
            next(iter(loader))


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_call_iter_on_dataloader_multiple_times_inmem(synthetic_dataset: Synthetic,
                                                      reader_factory: Any):  # fmt: skip
    reader = reader_factory(synthetic_dataset.url, schema_fields=[TestSchema.id])
    with InMemBatchedDataLoader(reader, batch_size=2, rows_capacity=100, shuffle=False) as loader:
        iter1 = iter(loader)
        next(iter1)
        iter2 = iter(loader)
        with pytest.raises(RuntimeError, match="InMemBatchedDataLoader couldn't be used multiple"):
            next(iter2)


@pytest.mark.parametrize("capacity", [10, 100, 200])
def test_load_rows_into_mem(synthetic_dataset: Synthetic, capacity: int):
    # Petastorm's private _load_rows_into_mem is load_rows here, with the same results.
    fields = [TestSchema.id, TestSchema.id_float, TestSchema.id_odd]
    with dummy(synthetic_dataset.url, schema_fields=fields) as reader:
        keys, buffer = load_rows(reader, torch.as_tensor, capacity)
        assert len(buffer[0]) == min(capacity, len(synthetic_dataset.data))
        assert keys[:3] == ["id", "id_float", "id_odd"]
        assert reader.stopped


@pytest.mark.timeout(60)
def test_inmem_batched_dataloader_exit_without_hang(synthetic_dataset: Synthetic):
    for _ in range(5):
        reader = dummy(synthetic_dataset.url, schema_fields=["^id$"])
        with reader, InMemBatchedDataLoader(reader) as _:
            assert reader.stopped


def test_inmem_batched_dataloader_shuffle_per_epoch(synthetic_dataset: Synthetic):
    epochs = 3
    results: list[list[int]] = []
    with InMemBatchedDataLoader(dummy(synthetic_dataset.url, schema_fields=["^id$"]),
                                batch_size=10, rows_capacity=100, num_epochs=epochs,
                                shuffle=True) as loader:  # fmt: skip
        it = iter(loader)
        results.extend([int(i) for _ in range(10) for i in next(it)["id"]] for _ in range(epochs))
        with pytest.raises(StopIteration):
            next(it)
    first, second, third = results
    assert first != second
    assert set(first) == set(second)
    assert first != third
    assert second != third
    assert set(first) == set(third) == set(second)
