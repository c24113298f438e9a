"""The waits between looks at a lock file another process holds: soon at first, then less often."""

from __future__ import annotations

import itertools
import time
from concurrent.futures import CancelledError

import pytest

from shardstream.cache.polling import FIRST_S, FRESH_S, MOST_S, SOON_S, Backoff
from shardstream.storage import cancel
from shardstream.storage.cancel import CancelScope


def _pauses(monkeypatch: pytest.MonkeyPatch, count: int) -> list[tuple[float, float]]:
    """``(when, pause)`` of ``count`` looks, on a clock that only the pauses move."""
    clock = [1000.0]
    seen: list[tuple[float, float]] = []

    def pause(seconds: float) -> None:
        seen.append((clock[0] - 1000.0, seconds))
        clock[0] += seconds

    monkeypatch.setattr(cancel, "pause", pause)
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    backoff = Backoff()
    for _ in range(count):
        backoff.pause()
    return seen


def test_a_fresh_wait_looks_again_within_a_few_milliseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _pauses(monkeypatch, 200)
    assert seen[0][1] == FIRST_S
    assert [p for _, p in seen[:4]] == [FIRST_S, 2 * FIRST_S, 4 * FIRST_S, 8 * FIRST_S]
    fresh = [p for when, p in seen if when < FRESH_S]
    assert max(fresh) <= SOON_S  # a lock freed meanwhile is seen at most this late
    assert len(fresh) >= FRESH_S / SOON_S


def test_a_long_wait_looks_less_often_up_to_the_most(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _pauses(monkeypatch, 200)
    late = [p for when, p in seen if when > FRESH_S + 1.0]
    assert late
    assert set(late) == {MOST_S}
    assert all(b >= a for (_, a), (_, b) in itertools.pairwise(seen))  # never sooner


def test_a_cancelled_reader_stops_waiting() -> None:
    """The pause is the scope's: a reader that stopped early raises instead of looking again."""
    scope = CancelScope()
    backoff = Backoff()
    scope.run(backoff.pause)
    scope.cancel()
    with pytest.raises(CancelledError):
        scope.run(backoff.pause)
