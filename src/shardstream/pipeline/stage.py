"""What a stage of the read pipeline is: ``next()``, ``state()`` and ``reset(state)``.

A stage pulls from the stage before it (its source) and hands one item on per ``next()``, in
the way torchdata's nodes work; ``StopIteration`` ends the stream. Its ``state()`` is small
and plain (ints): where in the plan it stands, counted in device batches handed on, which
resumes its source too. ``reset(state)`` starts the stage (and its sources) again there;
``reset()`` from the start. ``close()`` lets go of what it holds (threads, open files): a
reader may stop early, and must not wait for work ahead.

The stages, in order (each in a module of this package):

- plan (:mod:`~shardstream.pipeline.plan`): the device batches of sample ids to read;
- fetch (:mod:`~shardstream.pipeline.fetch`): each batch located (shard, index in it), its
  shards fetched ahead into the node's cache and opened (:mod:`~shardstream.pipeline.open_shards`);
- decode (:mod:`~shardstream.pipeline.decode`): a batch as samples, as ids, or as columns
  (from mappings, from the files, ahead in a thread: :mod:`~shardstream.pipeline.read_ahead`);
- hand over (:mod:`~shardstream.pipeline.handover`): a batch leaving a DataLoader worker as
  values (packed where large) or as its ids, paired with the read by ids on the loader's side;
- collate: the loader's (``ColumnBatch.collate``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

__all__ = ["Stage", "StageState", "Stepped", "drain"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: A stage's state: plain ints, where it stands in the plan.
StageState = dict[str, int]


class Stage(Protocol[T_co]):
    """One stage of the read pipeline (see the module's docstring for the contract)."""

    def next(self) -> T_co:
        """The next item; ``StopIteration`` at the end."""
        ...

    def state(self) -> StageState:
        """Where the stage stands: ``{"batch": k}``, the device batches handed on."""
        ...

    def reset(self, state: StageState | None = None) -> None:
        """Start again at ``state`` (from the start if ``None``)."""
        ...

    def close(self) -> None:
        """Let go of threads and files; the stage may be reset again after."""
        ...


class Stepped(Generic[T]):
    """A stage whose items come from a generator started at a batch of the plan.

    Subclasses write :meth:`_run` (the items from batch ``start`` on, one a device batch). The
    generator is made on the first :meth:`next` after a reset, so a stage made and never read
    starts nothing.
    """

    def __init__(self) -> None:
        self._start = 0
        self._batches = 0
        self._items: Iterator[T] | None = None

    def _run(self, start: int) -> Iterator[T]:
        raise NotImplementedError

    def next(self) -> T:
        """The next item; ``StopIteration`` at the end."""
        if self._items is None:
            self._items = self._run(self._start)
        item = next(self._items)
        self._batches += 1
        return item

    def state(self) -> StageState:
        """Where the stage stands: ``{"batch": k}``, the device batches handed on."""
        return {"batch": self._start + self._batches}

    def reset(self, state: StageState | None = None) -> None:
        """Start again at ``state`` (from the start if ``None``)."""
        self.close()
        self._start = 0 if state is None else int(state["batch"])
        self._batches = 0

    def close(self) -> None:
        """Let go of threads and files; the stage may be reset again after."""
        if self._items is not None:
            items, self._items = self._items, None
            close = getattr(items, "close", None)
            if close is not None:
                close()
            self._start, self._batches = self._start + self._batches, 0

    def __iter__(self) -> Iterator[T]:
        return drain(self)


def drain(stage: Stage[T]) -> Iterator[T]:
    """The items of ``stage`` as an iterator; the stage is closed when it ends or is dropped."""
    try:
        while True:
            try:
                item = stage.next()
            except StopIteration:
                return
            yield item
    finally:
        stage.close()
