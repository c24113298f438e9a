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


def test_a_program_that_froze_objects_itself_keeps_them_frozen():
    gc.freeze()
    mine = gc.get_freeze_count()
    frozen = FrozenHeap()
    frozen.freeze()
    frozen.thaw()
    assert gc.get_freeze_count() == mine  # not unfrozen behind the program's back
