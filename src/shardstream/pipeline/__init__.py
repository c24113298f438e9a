"""The read pipeline: how planned sample ids become batches.

A batch travels through small stages, each of which a reader drives with ``next()`` and can
save and restore with ``state()`` and ``reset(state)`` (:mod:`shardstream.pipeline.stage`).
The read policy (:class:`~shardstream.pipeline.policy.ReadPolicy`) picks the stages once per
stream and epoch; every pipeline it can pick yields the same samples in the same order.
"""

__all__: list[str] = []
