"""The loader's heap kept out of the garbage collector's full passes while its workers fork.

A process that has imported torch and loaded an index of thousands of shards holds a few
hundred thousand objects the cyclic garbage collector tracks. A forked DataLoader worker
inherits them, and its first full collection (which the parent's recent allocations make
due within its first batch) walks every one of them: it writes each object's header, so the
kernel copies every page of the parent's heap into the worker on the way, and it holds the
GIL meanwhile, so the worker's range requests stand still. Each worker pays that, and the
loader's process once more, on the same cores, before the first batch.

So the objects alive when the workers fork are frozen (:func:`gc.freeze`), as Python's
documentation advises for a process that forks without exec: a worker never walks its
parent's objects (they stay frozen there for its life, shared with the parent, not copied),
and the loader's process unfreezes them once its first batch is in, so that its own cyclic
garbage is collected as before. Only where nothing is frozen already: a program that froze
objects itself keeps its own arrangement, which an unfreeze would undo.
"""

from __future__ import annotations

import gc

__all__ = ["FrozenHeap"]


class FrozenHeap:
    """The objects alive now, frozen until :meth:`thaw` (at most once; again after a thaw)."""

    def __init__(self) -> None:
        self._frozen = False

    def freeze(self) -> None:
        """Freeze every tracked object, unless something is frozen already."""
        if self._frozen or gc.get_freeze_count():
            return
        gc.freeze()
        self._frozen = True

    def thaw(self) -> None:
        """Unfreeze what :meth:`freeze` froze (a no-op otherwise)."""
        if self._frozen:
            self._frozen = False
            gc.unfreeze()
