"""The loader's heap frozen while its workers fork: their collections never walk it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from tests.forked import in_forked_child

from shardstream.loader.frozen_heap import FrozenHeap


@pytest.fixture(autouse=True)
def nothing_frozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_freeze_moves_every_object_out_of_collections_and_thaw_moves_them_back():
    frozen = FrozenHeap()
    frozen.freeze()
    assert gc.get_freeze_count() > 0
    # A forked child inherits the frozen heap: its full collections never walk it.
    assert int(in_forked_child(lambda: str(gc.get_freeze_count()))) > 0
    frozen.freeze()  # again: a no-op
    frozen.thaw()
    assert gc.get_freeze_count() == 0
    frozen.thaw()  # again: a no-op
    assert gc.get_freeze_count() == 0


def _tracked(thing: object) -> bool:
    """Whether the collector walks ``thing``: frozen objects are in none of its generations."""
    return any(found is thing for found in gc.get_objects())


def test_a_program_that_froze_objects_itself_keeps_them_frozen():
    mine = ["a program's own object"]
    gc.freeze()
    assert not _tracked(mine)
    frozen = FrozenHeap()
    frozen.freeze()
    frozen.thaw()
    # Not unfrozen behind the program's back (the count itself drifts as frozen objects die).
    assert not _tracked(mine)
    gc.unfreeze()
    assert _tracked(mine)


def test_a_program_s_own_freeze_is_counted_once_and_then_left_alone():
    # Counting frozen objects walks them all (tens of milliseconds an epoch under a program
    # that froze a million): a program's freeze, once seen, is not counted again, and this
    # heap never freezes, so never unfreezes the program's objects behind its back.
    frozen = FrozenHeap()
    gc.freeze()
    frozen.freeze()
    frozen.thaw()
    gc.unfreeze()  # the program's own choice, later
    frozen.freeze()
    assert gc.get_freeze_count() == 0  # not counted again: nothing frozen by this heap
    frozen.thaw()


def test_another_loader_s_frozen_heap_is_not_taken_for_the_program_s_freeze():
    first, second = FrozenHeap(), FrozenHeap()
    first.freeze()
    second.freeze()  # frozen already, by a heap of this process: nothing to do now
    first.thaw()
    second.freeze()  # the next time, nothing is frozen: it freezes
    assert gc.get_freeze_count() > 0
    second.thaw()
    assert gc.get_freeze_count() == 0
