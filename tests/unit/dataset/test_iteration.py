"""The reader's bookkeeping over an epoch plan."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardstream.dataset.iteration import _last_uses


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(
        np.int64,
        st.tuples(st.integers(0, 12), st.integers(1, 6)),
        elements=st.integers(0, 9),
    )
)
def test_each_shard_is_done_after_the_last_row_that_uses_it(shards):
    done = _last_uses(shards)
    released = [shard for row in sorted(done) for shard in done[row]]
    assert sorted(released) == sorted(set(shards.reshape(-1).tolist()))  # each shard once
    for row, finished in done.items():
        for shard in finished:
            assert shard in shards[row]
            assert shard not in shards[row + 1 :]
