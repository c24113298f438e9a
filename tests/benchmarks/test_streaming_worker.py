"""The streaming benchmark's checker: it must catch every kind of wrong sample it claims to."""

from __future__ import annotations

import numpy as np
import pytest
from benchmarks.streaming_worker import Checker, Payloads


@pytest.fixture
def payloads() -> Payloads:
    return Payloads(samples=50, size=64, jitter=16, seed=3)


def _batch(payloads: Payloads, labels: list[int]) -> dict[str, object]:
    return {"data": [payloads.payload(i) for i in labels], "label": np.array(labels)}


def test_right_samples_pass_and_each_label_is_counted(payloads: Payloads) -> None:
    checker = Checker(payloads)
    assert checker.batch(_batch(payloads, list(range(0, 50, 2)))) == 25
    assert checker.batch(_batch(payloads, list(range(1, 50, 2)))) == 25
    result = checker.end_epoch()
    assert result["passed"] is True
    assert (result["missing_labels"], result["sample_failures"]) == (0, 0)


@pytest.mark.parametrize("damage", ["label", "last byte", "first byte", "shorter", "longer"])
def test_each_kind_of_damage_fails_one_sample(payloads: Payloads, damage: str) -> None:
    batch = _batch(payloads, [4, 7, 9])
    value = bytearray(batch["data"][1])  # type: ignore[index]
    if damage == "label":
        value[:8] = (8).to_bytes(8, "little")
    elif damage == "last byte":
        value[-1] ^= 1
    elif damage == "first byte":
        value[0] ^= 1
    elif damage == "shorter":
        value = value[:-1]
    else:
        value += b"x"
    batch["data"][1] = bytes(value)  # type: ignore[index]
    checker = Checker(payloads)
    checker.batch(batch)
    assert checker.failures == 1


def test_a_sample_under_another_label_fails(payloads: Payloads) -> None:
    batch = _batch(payloads, [4, 7, 9])
    batch["label"] = np.array([4, 9, 7])  # data of 7 and 9 swapped against their labels
    checker = Checker(payloads)
    checker.batch(batch)
    assert checker.failures == 2


def test_tiny_values_fail_without_an_index_error(payloads: Payloads) -> None:
    checker = Checker(payloads)
    checker.batch({"data": [b"", b"abc"], "label": np.array([0, 1])})
    assert checker.failures == 2
