"""The Reader: stopped and reset as Petastorm's, and resumed from its state dict."""

from __future__ import annotations

from typing import Any

import pytest
from tests.petastorm_data import write_hello

from shardstream.errors import ConfigurationError
from shardstream.loader.petastorm import in_lambda, make_batch_reader, make_reader

ROWS = 60


@pytest.fixture(scope="module")
def hello(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_hello(tmp_path_factory.mktemp("petastorm") / "hello", ROWS))


def ids(rows: list[Any]) -> list[int]:
    return [int(row.id) for row in rows]


def batch_ids(batches: list[Any]) -> list[int]:
    return [int(i) for batch in batches for i in batch.id]


def test_stop_ends_reading_and_reset_reads_again(hello: str):
    reader = make_reader(hello, schema_fields=["id"])
    next(reader)
    with pytest.raises(NotImplementedError, match="still reading"):
        reader.reset()
    rest = list(reader)
    assert len(rest) == ROWS - 1
    assert reader.last_row_consumed
    reader.reset()
    assert sorted(ids(list(reader))) == list(range(ROWS))
    reader.stop()
    reader.join()
    with pytest.raises(RuntimeError, match="stopped"):
        next(reader)


@pytest.mark.parametrize(("make", "taken"), [(make_reader, 23), (make_batch_reader, 4)])
def test_a_state_dict_resumes_a_new_reader_where_the_old_stopped(hello: str, make: Any, taken: int):
    options = {"schema_fields": ["id"], "num_epochs": 2, "seed": 11, "predicate":
               in_lambda(["id"], lambda i: i % 4 != 1)}  # fmt: skip
    with make(hello, **options) as reader:
        whole = list(reader)
    with make(hello, **options) as reader:
        first = [next(reader) for _ in range(taken)]
        state = reader.state_dict()
    with make(hello, **options) as reader:
        reader.load_state_dict(state)
        rest = list(reader)
    flat = ids if make is make_reader else batch_ids
    assert flat(first + rest) == flat(whole)


def test_a_state_dict_loads_before_the_first_row_only(hello: str):
    with make_reader(hello, schema_fields=["id"]) as reader:
        state = reader.state_dict()
        next(reader)
        with pytest.raises(ConfigurationError, match="before its first row"):
            reader.load_state_dict(state)
    with make_reader(hello, schema_fields=["id"]) as reader:
        with pytest.raises(ConfigurationError, match=r"Reader\.state_dict"):
            reader.load_state_dict({"epoch": 0})
        assert reader.diagnostics == {}
        assert reader.ngram is None


def test_many_threads_share_one_reader_and_each_row_goes_to_one(hello: str):
    # Petastorm's test_multithreaded_reads: next() from several threads at once.
    import threading

    taken: list[int] = []
    errors: list[BaseException] = []

    def drain(reader: Any) -> None:
        try:
            taken.extend(int(row.id) for row in reader)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    with make_reader(hello, schema_fields=["id"], num_epochs=2) as reader:
        threads = [threading.Thread(target=drain, args=(reader,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert sorted(taken) == sorted(list(range(ROWS)) * 2)
