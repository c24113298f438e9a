from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shardstream.sampling.distinct import distinct, distinct_inverse, first_occurrences

_ARRAYS = st.lists(st.integers(-(2**62), 2**62), max_size=200).map(
    lambda values: np.array(values, dtype=np.int64)
)


@given(values=_ARRAYS)
def test_distinct_is_np_unique(values: np.ndarray) -> None:
    assert np.array_equal(distinct(values), np.unique(values))


@given(values=_ARRAYS, rows=st.integers(1, 4))
def test_first_occurrences_is_np_unique_with_index(values: np.ndarray, rows: int) -> None:
    shaped = values[: len(values) // rows * rows].reshape(rows, -1)
    expected = np.unique(shaped, return_index=True)
    for got, want in zip(first_occurrences(shaped), expected, strict=True):
        assert np.array_equal(got, want)


@given(
    values=st.lists(st.integers(-3, 40), max_size=300).map(lambda v: np.array(v, np.int64)),
    order=st.sampled_from(["as drawn", "sorted", "reversed"]),
)
def test_first_occurrences_of_few_values_in_any_order_is_np_unique_with_index(
    values: np.ndarray, order: str
) -> None:
    # Shards of a plan: few distinct values, often in order or (last uses) in reverse.
    if order != "as drawn":
        values = np.sort(values)[:: 1 if order == "sorted" else -1]
    expected = np.unique(values, return_index=True)
    for got, want in zip(first_occurrences(values), expected, strict=True):
        assert np.array_equal(got, want)
        assert got.dtype == want.dtype


@given(values=_ARRAYS)
def test_distinct_inverse_is_np_unique_with_inverse(values: np.ndarray) -> None:
    wanted, inverse = distinct_inverse(values)
    expected, expected_inverse = np.unique(values, return_inverse=True)
    assert np.array_equal(wanted, expected)
    assert np.array_equal(inverse, expected_inverse)
    assert inverse.dtype == np.int64


def test_planning_an_epoch_does_not_import_numpy_ma() -> None:
    # np.unique imports numpy.ma on first use; a plan must not pay that in a start-up.
    script = (
        "import sys, numpy as np\n"
        "from shardstream.sampling import EpochPlan, ShuffleConfig, Topology\n"
        "plan = EpochPlan.for_worker(np.array([7, 5, 9] * 40 + [3]), "
        "topology=Topology(ranks_per_node=4), num_canonical_nodes=2, global_batch_size=8, "
        "epoch=1, shuffle=ShuffleConfig(True))\n"
        "assert plan.padding == 1\n"
        "print('numpy.ma' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_first_occurrences_of_values_further_apart_than_an_int64_holds():
    # Their difference overflows int64 and turns negative: not a sequence in reverse order.
    values = np.array([-(2**62), 2**62], dtype=np.int64)
    got = first_occurrences(values)
    assert [a.tolist() for a in got] == [[-(2**62), 2**62], [0, 1]]


@given(
    span=st.integers(1, 12),
    late=st.sampled_from(["none", "a new value", "a value of the range"]),
    gaps=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(400, 3000),
)
def test_first_occurrences_of_many_draws_of_few_values_is_np_unique_with_index(
    span: int, late: str, gaps: bool, seed: int, size: int
) -> None:
    # A shuffled plan's shards: each value comes up early (in a short head), or one only late.
    rng = np.random.default_rng(seed)
    pool = np.arange(span, dtype=np.int64) * (3 if gaps else 1) + 100
    values = rng.choice(pool, size)
    if late == "a new value":
        values[-1] = 7  # below every other value: outside the head's range
    elif late == "a value of the range" and span > 1:
        values[values == pool[1]] = pool[0]
        values[-2] = pool[1]  # inside the range, first seen at the end
    for shaped in (values, values[::-1]):
        expected = np.unique(shaped, return_index=True)
        for got, want in zip(first_occurrences(shaped), expected, strict=True):
            assert np.array_equal(got, want)
            assert got.dtype == want.dtype
