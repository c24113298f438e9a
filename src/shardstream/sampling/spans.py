"""Canonical nodes and their spans: the run-level layout every span-based shuffle starts from.

Once per run the shards are put in a random order (it depends on the seed only, never on the
epoch), and the resulting sequence of samples is cut into ``num_canonical_nodes`` contiguous,
near-equal ranges. A shard that straddles a boundary is split in two; each piece is a *span*.
A canonical node owns its spans for the whole run; each epoch only reorders them.

Randomness: every random decision takes its own :class:`numpy.random.Generator`, built from a
:class:`numpy.random.SeedSequence` whose entropy is a fixed-width tuple of unsigned 64-bit words
ending in a purpose tag (see the ``TAG_*`` constants). The global numpy RNG is never used, and
seed and epoch are never added together, so ``(seed, epoch)`` pairs cannot collide. Draws made
per span or per block come from :class:`Substreams`, so each can be made alone.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

# Imported with the package, not inside the first epoch plan of a process (numpy 2 loads
# numpy.random on first access, which a resumed run would wait for).
from numpy.random import PCG64, Generator, SeedSequence, default_rng
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.distinct import distinct

__all__ = [
    "SPAN_ALGORITHMS",
    "TAG_BLOCKS",
    "TAG_BLOCK_SHUFFLE",
    "TAG_NAIVE",
    "TAG_NAIVE_KEYS",
    "TAG_SHARD_ORDER",
    "TAG_SHARD_SAMPLES",
    "TAG_SHIFTS",
    "TAG_SPAN_DRAWS",
    "TAG_SPAN_ORDER",
    "TAG_SPAN_SAMPLES",
    "WORD",
    "NodeSpans",
    "SpanTable",
    "Substreams",
    "canonical_node_bounds",
    "canonical_node_spans",
    "make_rng",
]

# Purpose tags, the last entropy word of each generator. Entropy layouts:
TAG_SHARD_ORDER = 1  # [seed, TAG]: the run's shard order.
TAG_SHARD_SAMPLES = 2  # [seed, shard, TAG]: py2s's run-level shuffle of one shard's samples.
TAG_NAIVE = 3  # retired (naive drew its permutation outright); never reuse.
TAG_SPAN_ORDER = 4  # [seed, epoch, node, TAG]: the order of a canonical node's spans.
TAG_SPAN_SAMPLES = 5  # retired (one generator for a whole node's spans); never reuse.
TAG_BLOCKS = 6  # [seed, epoch, node, TAG]: py1br's block sizes.
TAG_SHIFTS = 7  # [seed, epoch, node, TAG]: py1e's window width of each span.
TAG_SPAN_DRAWS = 8  # [seed, epoch, node, TAG], substream per span: its shuffle, py1e's shifts.
TAG_BLOCK_SHUFFLE = 9  # [seed, epoch, node, TAG], substream per block: py1b/py1br's shuffle.
TAG_NAIVE_KEYS = 10  # [seed, epoch, TAG]: the round keys of naive's keyed permutation.

#: Seeds and epochs are unsigned 64-bit words.
WORD = 1 << 64
#: The shuffles that work per canonical node, on its spans.
SPAN_ALGORITHMS = ("py1b", "py1br", "py1e", "py1s", "py2s")


def make_rng(*words: int) -> Generator:
    """A generator seeded by ``SeedSequence(words)``, each word taken as one unsigned 64-bit int.

    Fixed-width words keep tuples unambiguous: Python ints of different sizes would otherwise
    be split into a varying number of 32-bit words, so ``(2**32, 1)`` could meet ``(0, 1, 1)``.
    """
    return default_rng(SeedSequence(np.array(words, dtype=np.uint64)))


class Substreams:
    """Generators addressable by index: disjoint stretches of one seeded PCG64 stream.

    ``Substreams(*words)[i]`` is the stream of ``PCG64(SeedSequence(words))`` advanced by
    ``i * 2**40`` outputs, so item ``i`` can be drawn alone, in any order, without drawing the
    items before it. Each item draws fewer than 4 outputs per sample (a permutation, then
    uniforms), so items of fewer than ``2**38`` samples never overlap. Resetting a generator
    costs about a tenth of seeding a fresh one, which matters with many small items.
    """

    STRIDE = 1 << 40

    def __init__(self, *words: int) -> None:
        entropy = SeedSequence(np.array(words, dtype=np.uint64))
        self._bits = PCG64(entropy)
        self._start = self._bits.state
        self._generator = Generator(self._bits)

    def __getitem__(self, index: int) -> Generator:
        """The generator of item ``index``, valid until the next lookup (it is reused)."""
        self._bits.state = self._start
        self._bits.advance(index * self.STRIDE)
        return self._generator


def check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high)``, or a :class:`ConfigurationError` that names it."""
    number = int(value) if isinstance(value, (int, np.integer)) else None
    if number is None or isinstance(value, bool) or number < low or (high and number >= high):
        bound = f"in {low}..{high - 1}" if high else f">= {low}"
        raise ConfigurationError(f"{name} must be an integer {bound}, got {value!r}")
    return number


def check_shard_sizes(shard_sizes: object) -> NDArray[np.int64]:
    """The shard sizes as a 1-D int64 array, or a :class:`ConfigurationError` saying what is off."""
    sizes = np.asarray(shard_sizes)
    if sizes.ndim != 1 or (sizes.size and sizes.dtype.kind not in "iu"):
        raise ConfigurationError(
            "shard_sizes must be a 1-D array of integers (samples per shard, in dataset order), "
            f"got dtype {sizes.dtype} with shape {sizes.shape}"
        )
    sizes = sizes.astype(np.int64)
    if sizes.size and sizes.min() < 0:
        shard = int(np.argmin(sizes))
        raise ConfigurationError(
            f"shard_sizes must be non-negative, got {int(sizes[shard])} for shard {shard}"
        )
    return sizes


def canonical_node_bounds(total: int, num_canonical_nodes: int) -> NDArray[np.int64]:
    """Where each canonical node's epoch positions begin and end.

    Args:
        total: Samples in the epoch.
        num_canonical_nodes: Canonical nodes (NCN).

    Returns:
        ``NCN + 1`` int64 boundaries ``b``: node ``c`` owns positions ``[b[c], b[c + 1])``, with
        ``b[c] = total * c // NCN``.

    Raises:
        ConfigurationError: ``total`` is negative or ``num_canonical_nodes`` is below 1.

    Example:
        >>> canonical_node_bounds(10, 3).tolist()
        [0, 3, 6, 10]
    """
    total = check_int("total", total, 0)
    ncn = check_int("num_canonical_nodes", num_canonical_nodes, 1)
    return np.array([total * c // ncn for c in range(ncn + 1)], dtype=np.int64)


@dataclass(frozen=True, eq=False)
class NodeSpans:
    """The spans one canonical node owns for a whole run, in the run's shard order.

    Args:
        node: The canonical node's index.
        samples: Global sample ids of the node's spans, span after span (int64).
        sizes: Samples in each span, all positive, summing to ``len(samples)`` (int64).
        shards: The shard each span comes from (int64).
    """

    node: int
    samples: NDArray[np.int64]
    sizes: NDArray[np.int64]
    shards: NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class RunLayout:
    """The run's shard order and where each shard lies, in that order and in the dataset."""

    order: NDArray[np.int64]  # shard ids in run order
    starts: NDArray[np.int64]  # first run-order position of each shard in ``order``
    sizes: NDArray[np.int64]  # size of each shard in ``order``
    bases: NDArray[np.int64]  # global id of sample 0 of each shard in ``order``
    bounds: NDArray[np.int64]  # canonical node boundaries


def run_layout(shard_sizes: NDArray[np.int64], num_canonical_nodes: int, seed: int) -> RunLayout:
    """Shuffle the shard order for the run and lay the shards end to end (validated inputs)."""
    order = make_rng(seed, TAG_SHARD_ORDER).permutation(len(shard_sizes)).astype(np.int64)
    bases = np.cumsum(shard_sizes) - shard_sizes
    sizes = shard_sizes[order]
    starts = np.cumsum(sizes) - sizes
    bounds = canonical_node_bounds(int(shard_sizes.sum()), num_canonical_nodes)
    return RunLayout(order, starts, sizes, bases[order], bounds)


@dataclass(frozen=True, eq=False)
class SpanTable:
    """A canonical node's spans without their samples: any span is cut out when asked for.

    A node's samples take ``O(node)`` memory; the table takes ``O(spans)``, so a worker that
    needs a few positions of the node never holds the rest.

    Args:
        node: The canonical node's index.
        sizes: Samples in each span, in run order, all positive.
        firsts: Global id of each span's first sample (spans of shards kept in order); with
            ``explicit``, where each span begins in it instead.
        explicit: The spans' samples end to end, when given outright.
        shard_sizes: With ``py2s``, the size of each span's shard (``None`` otherwise).
        offsets: With ``py2s``, where each span begins inside its shard.
        bases: With ``py2s``, the global id of sample 0 of each span's shard.
        shards: The shard each span comes from.
        seed: With ``py2s``, the run's seed (each shard is shuffled once per run).
    """

    node: int
    sizes: NDArray[np.int64]
    firsts: NDArray[np.int64]
    shards: NDArray[np.int64]
    explicit: NDArray[np.int64] | None = None
    shard_sizes: NDArray[np.int64] | None = None
    offsets: NDArray[np.int64] | None = None
    bases: NDArray[np.int64] | None = None
    seed: int = 0

    @classmethod
    def of(cls, spans: NodeSpans) -> SpanTable:
        """The table of spans whose samples are given outright."""
        starts = np.cumsum(spans.sizes) - spans.sizes
        return cls(spans.node, spans.sizes, starts, spans.shards, explicit=spans.samples)

    @property
    def total(self) -> int:
        """Samples in the node."""
        return int(self.sizes.sum())

    def span(self, index: int) -> NDArray[np.int64]:
        """Span ``index``'s samples, in run order (before any epoch shuffle)."""
        size = int(self.sizes[index])
        if self.explicit is not None:
            start = int(self.firsts[index])
            return self.explicit[start : start + size]
        if self.shard_sizes is not None and self.offsets is not None and self.bases is not None:
            shard = int(self.shards[index])
            rng = make_rng(self.seed, shard, TAG_SHARD_SAMPLES)
            offset = int(self.offsets[index])
            within = rng.permutation(int(self.shard_sizes[index]))[offset : offset + size]
            return within.astype(np.int64) + int(self.bases[index])
        return np.arange(size, dtype=np.int64) + int(self.firsts[index])

    def at(self, spans: NDArray[np.int64], offsets: NDArray[np.int64]) -> NDArray[np.int64]:
        """The samples at ``offsets`` within ``spans`` (equal-length arrays), in run order."""
        if self.explicit is not None:
            given: NDArray[np.int64] = self.explicit[self.firsts[spans] + offsets]
            return given
        if self.shard_sizes is None:
            contiguous: NDArray[np.int64] = self.firsts[spans] + offsets
            return contiguous
        result = np.empty(len(spans), dtype=np.int64)
        cuts = np.flatnonzero(spans[1:] != spans[:-1]) + 1
        heads = spans[np.concatenate([[0], cuts])] if len(spans) else spans
        if len(distinct(heads)) == len(heads):  # each span in one run (a node's sorted slots)
            bounds = [0, *cuts.tolist(), len(spans)]
            for (start, stop), span in zip(itertools.pairwise(bounds), heads.tolist(), strict=True):
                result[start:stop] = self.span(span)[offsets[start:stop]]
            return result
        by_span = np.argsort(spans, kind="stable")
        ordered = spans[by_span]
        cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        for start, stop in itertools.pairwise([0, *cuts.tolist(), len(ordered)]):
            where = by_span[start:stop]  # one shard shuffle per span asked about
            result[where] = self.span(int(ordered[start]))[offsets[where]]
        return result

    def samples(self) -> NDArray[np.int64]:
        """Every span's samples, end to end (``O(node)`` memory)."""
        if self.explicit is not None:
            return self.explicit
        if self.shard_sizes is None:
            starts = np.cumsum(self.sizes) - self.sizes
            ids: NDArray[np.int64] = np.repeat(self.firsts - starts, self.sizes)
            return ids + np.arange(self.total, dtype=np.int64)
        parts = [self.span(index) for index in range(len(self.sizes))]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)


def node_span_table(layout: RunLayout, node: int, seed: int, split_shuffled: bool) -> SpanTable:
    """Canonical node ``node``'s spans, as a table (validated inputs); ``O(spans)`` memory."""
    low, high = int(layout.bounds[node]), int(layout.bounds[node + 1])
    first = int(np.searchsorted(layout.starts + layout.sizes, low, side="right"))
    stop = int(np.searchsorted(layout.starts, high, side="left"))
    pick = np.arange(first, stop)
    begins = np.maximum(layout.starts[pick], low)
    sizes = np.minimum(layout.starts[pick] + layout.sizes[pick], high) - begins
    keep = sizes > 0
    pick, begins, sizes = pick[keep], begins[keep], sizes[keep]
    offsets = begins - layout.starts[pick]  # where each span begins inside its shard
    shards = layout.order[pick]
    if split_shuffled:
        return SpanTable(node, sizes, layout.bases[pick] + offsets, shards,
                         shard_sizes=layout.sizes[pick], offsets=offsets,
                         bases=layout.bases[pick], seed=seed)  # fmt: skip
    return SpanTable(node, sizes, layout.bases[pick] + offsets, shards)


def node_spans(layout: RunLayout, node: int, seed: int, split_shuffled: bool) -> NodeSpans:
    """Cut canonical node ``node``'s spans out of the run layout (validated inputs)."""
    table = node_span_table(layout, node, seed, split_shuffled)
    return NodeSpans(node, table.samples(), table.sizes, table.shards)


def canonical_node_spans(
    algo: str, shard_sizes: NDArray[np.int64], num_canonical_nodes: int, seed: int, node: int
) -> NodeSpans:
    """The spans canonical node ``node`` owns for the run, as shuffle ``algo`` sees them.

    Depends on the seed but not on the epoch. ``py2s`` also shuffles each shard's samples once
    per run before the shards are split; the other span-based algorithms keep them in order.

    Args:
        algo: A span-based shuffle: ``py1b``, ``py1br``, ``py1e``, ``py1s`` or ``py2s``.
        shard_sizes: Samples per shard, in dataset order.
        num_canonical_nodes: Canonical nodes (NCN).
        seed: The run's shuffle seed, in ``0 .. 2**64 - 1``.
        node: The canonical node, in ``0 .. NCN - 1``.

    Returns:
        The node's spans; their samples fill exactly the node's positions (see
        :func:`canonical_node_bounds`).

    Raises:
        ConfigurationError: ``algo`` has no spans (``naive``, unknown) or an argument is invalid.
    """
    if algo not in SPAN_ALGORITHMS:
        raise ConfigurationError(
            f"shuffle algorithm {algo!r} has no canonical-node spans; "
            f"use one of {', '.join(SPAN_ALGORITHMS)}"
        )
    sizes = check_shard_sizes(shard_sizes)
    ncn = check_int("num_canonical_nodes", num_canonical_nodes, 1)
    seed = check_int("seed", seed, 0, WORD)
    node = check_int("node", node, 0, ncn)
    return node_spans(run_layout(sizes, ncn, seed), node, seed, algo == "py2s")
