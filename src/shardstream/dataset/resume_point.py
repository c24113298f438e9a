"""Where a job stands, as the read pipeline's state: an epoch and the rank's batches read.

A state dict's place is the reference's ``(epoch, sample_in_epoch)`` and the pipeline's own
state, ``stages``: ``{"batch": k}``, the device batches of the rank read this epoch (one a
global step; :mod:`shardstream.pipeline.stage`). A resumed epoch lays its steps out as a fresh
one does and starts each worker's pipeline with ``reset(state)`` at its first batch not read:
nothing is replayed and nothing is skipped by a computation of its own.

A rank's device batches go round-robin to its DataLoader workers from the first one read, so
after ``k`` batches worker ``w`` of ``W`` reads the batches worker ``(k + w) % W`` of a fresh
epoch would, from its batch ``(k + w) // W`` (:meth:`ResumePoint.for_worker`).

``random`` batching resumes at any sample, not only at a step's start: its steps are then laid
out from the sample the resume point falls in (``offset``, less than a global batch) and the
stages reset to the step the point falls in. The other methods resume at the start of the step
the point falls in, as the reference does. At another global batch size (``random`` batching
on another number of ranks) the saved batches are other batches: the place goes through
``sample_in_epoch``, which every state holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shardstream.cache import EpochStart
from shardstream.errors import ConfigurationError
from shardstream.pipeline.stage import StageState

__all__ = ["Position", "ResumePoint", "saved_stages"]


@dataclass(frozen=True)
class Position:
    """Where a job stands: the epoch, and the samples of it consumed over every rank.

    The state dict's ``epoch`` and ``sample_in_epoch``: all it says of reading itself, the
    rest being the data and the settings it was read with.
    """

    epoch: int
    sample_in_epoch: int

    def stages(self, global_batch: int, epoch_size: int) -> StageState | None:
        """The rank's pipeline state at this place: the global steps read (``None``: unsized).

        At the epoch's end (``epoch_size`` samples or more, with repeats) the last step counts
        though it may be short.
        """
        if global_batch < 1:
            return None
        steps, within = divmod(self.sample_in_epoch, global_batch)
        return {"batch": steps + (within > 0 and self.sample_in_epoch >= epoch_size)}


@dataclass(frozen=True)
class ResumePoint:
    """Where an epoch's pipeline starts: its steps' layout and the rank's stage state.

    Attributes:
        epoch: The epoch.
        offset: The sample the epoch's steps are laid out from: ``0``, or (``random``
            batching resumed within a step) where in a step the resume point lies.
        batch: The rank's device batches read already (global steps after ``offset``).
    """

    epoch: int
    offset: int
    batch: int

    @classmethod
    def of(cls, start: EpochStart, global_batch: int, batching_method: str) -> ResumePoint:
        """The resume point of ``start`` for steps of ``global_batch`` samples."""
        step, within = divmod(start.drop_first, max(1, global_batch))
        return cls(start.epoch, within if batching_method == "random" else 0, step)

    @property
    def layout(self) -> EpochStart:
        """The epoch as the plan lays it out: from its start, or from ``offset``."""
        return EpochStart(self.epoch, self.offset)

    def for_worker(self, worker: int, workers: int) -> tuple[int, StageState]:
        """The worker of a fresh epoch whose batches ``worker`` reads, and where it resets."""
        step = self.batch + worker
        return step % workers, {"batch": step // workers}


def saved_stages(obj: Mapping[str, Any], position: Position, epoch_size: int) -> StageState | None:
    """The state dict's ``stages``, checked against its place (in an epoch of ``epoch_size``).

    Raises:
        ConfigurationError: ``stages`` is not ``{"batch": k}``, or names another place than
            ``sample_in_epoch`` at the state's ``global_batch_size``.
    """
    stages = obj.get("stages")
    if stages is None:
        return None
    batch = stages.get("batch") if isinstance(stages, Mapping) else None
    if (
        not isinstance(batch, int)
        or isinstance(batch, bool)
        or batch < 0
        or set(stages) != {"batch"}
    ):
        raise ConfigurationError(
            f"the state dict's stages is {stages!r}; it must be {{'batch': k}} with k an "
            "integer >= 0: pass what state_dict() returned, unchanged"
        )
    size = obj.get("global_batch_size")
    if isinstance(size, int) and not isinstance(size, bool) and size >= 1:
        steps = position.stages(size, epoch_size)
        if steps is not None and batch != steps["batch"]:
            raise ConfigurationError(
                f"the state dict's stages is {dict(stages)!r}, but its sample_in_epoch "
                f"{position.sample_in_epoch} is {steps['batch']} global batches of {size}: "
                "the two places disagree; pass what state_dict() returned, unchanged"
            )
    return {"batch": batch}
