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
    """The objects alive now, frozen until :meth:`thaw` (at most once; again after a thaw).

    Kept by a loader for its life: :func:`gc.get_freeze_count` walks every frozen object
    (costly under a program that froze a large heap), so a program's own freeze,
    once seen, is taken to hold and not counted again; this heap then never freezes (and so
    never unfreezes what the program froze, whatever it does later).
    """

    def __init__(self) -> None:
        self._frozen = False
        self._program_froze = False

    def freeze(self) -> None:
        """Freeze every tracked object, unless something is frozen already."""
        global _frozen_here
        if self._frozen or self._program_froze:
            return
        if gc.get_freeze_count():
            # Frozen by the program, not by a heap of this process's (another loader's).
            self._program_froze = not _frozen_here
            return
        gc.freeze()
        self._frozen = True
        _frozen_here += 1

    def thaw(self) -> None:
        """Unfreeze what :meth:`freeze` froze (a no-op otherwise)."""
        global _frozen_here
        if self._frozen:
            self._frozen = False
            _frozen_here -= 1
            gc.unfreeze()


#: Heaps of this process frozen now (their objects are not the program's own freeze).
_frozen_here = 0
