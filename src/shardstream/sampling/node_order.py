"""One canonical node's epoch order, looked up at chosen positions in memory that fits them.

A worker reads a few of its canonical node's positions (one in 64 on 8 ranks x 8 workers), so
nothing here materialises the node's order. Every random draw is addressable: the span order
and the window widths are ``O(spans)``, and each span's within-span shuffle and py1e shifts, and
each block's shuffle, come from their own substream (:class:`~.spans.Substreams`), so any span
or block can be drawn alone. Then:

* ``py1s`` and ``py2s`` draw only the spans holding a wanted position.
* ``py1b`` and ``py1br`` draw only the blocks holding one.
* ``py1e`` sweeps the node in windows of shifted position. A sample moves at most ``M`` (the
  largest shift) from its slot, so a window's samples come from the spans within ``M`` of it, and
  the samples shifted below the window are counted from those same spans. A span is drawn once,
  into per-window buckets; each window is sorted alone; windows holding no wanted position
  (found from the spans' extents alone) are skipped and draw nothing.
  Time stays ``O(node)`` for a worker whose positions cover the node; memory is ``O(window +
  wanted positions)``.

The result never depends on which positions are asked for, nor on the window size: py1e orders
samples by ``(floor(key * 2**FRACTION_BITS), slot)``, ``key`` being the shifted position.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import NDArray

from shardstream.sampling.spans import (
    TAG_BLOCK_SHUFFLE,
    TAG_BLOCKS,
    TAG_SHIFTS,
    TAG_SPAN_DRAWS,
    TAG_SPAN_ORDER,
    SpanTable,
    Substreams,
    make_rng,
)

__all__ = ["FRACTION_BITS", "node_ids"]

#: py1e sorts shifted positions rounded down to a multiple of ``2**-FRACTION_BITS``; samples
#: that round alike keep their slot order.
FRACTION_BITS = 20
_MIN_WINDOW = 1 << 16
_MAX_WINDOW = 1 << 22


class _EpochSpans:
    """A node's spans in one epoch's order, with their per-span draws."""

    def __init__(self, table: SpanTable, seed: int, epoch: int) -> None:
        self.table = table
        self.words = (seed, epoch, table.node)
        rng = make_rng(seed, epoch, table.node, TAG_SPAN_ORDER)
        self.order = rng.permutation(len(table.sizes)).astype(np.int64)
        self.sizes = table.sizes[self.order]
        self.ends = np.cumsum(self.sizes)
        self.starts = self.ends - self.sizes
        self.total = int(self.ends[-1]) if len(self.ends) else 0
        self.draws = Substreams(seed, epoch, table.node, TAG_SPAN_DRAWS)

    def locate(self, slots: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The epoch index of the span holding each slot, and the slot's offset in it."""
        spans = np.searchsorted(self.ends, slots, side="right").astype(np.int64)
        return spans, slots - self.starts[spans]

    def draw(self, span: int, shifts: bool) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """Span ``span``'s (epoch index) within-span shuffle, and (py1e) a uniform per slot.

        Slot ``j`` of the span holds the span's sample ``shuffle[j]`` (in run order).
        """
        size = int(self.sizes[span])
        rng = self.draws[int(self.order[span])]
        shuffle = rng.permutation(size).astype(np.int64, copy=False)
        return shuffle, rng.random(size) if shifts else np.empty(0)


def _runs(keys: NDArray[np.int64]) -> list[tuple[int, int]]:
    """``(start, stop)`` of each run of equal values in a sorted array."""
    cuts = [0, *(np.flatnonzero(np.diff(keys)) + 1).tolist(), len(keys)]
    return list(itertools.pairwise(cuts))


def _span_shuffle_ids(spans: _EpochSpans, wanted: NDArray[np.int64]) -> NDArray[np.int64]:
    """py1s/py2s: each span in place, its samples shuffled."""
    index, offset = spans.locate(wanted)
    out = np.empty(len(wanted), dtype=np.int64)
    for start, stop in _runs(index):
        shuffle, _ = spans.draw(int(index[start]), shifts=False)
        out[start:stop] = shuffle[offset[start:stop]]
    return spans.table.at(spans.order[index], out)


def random_blocks(n: int, block_size: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """py1br: block sizes drawn from ``[0.75B, 1.25B)``, the first cut short by a stagger."""
    low = max(1, 3 * block_size // 4)
    high = max(low + 1, 5 * block_size // 4)
    stagger = int(rng.integers(0, low))
    widths = rng.integers(low, high, size=n // low + 2)
    widths[0] -= stagger  # still >= 1, as stagger < low <= widths[0]
    ends = np.cumsum(widths)
    ends = ends[: int(np.searchsorted(ends, n)) + 1]
    ends[-1] = n
    return np.diff(ends, prepend=0).astype(np.int64)


def _block_ids(
    spans: _EpochSpans, wanted: NDArray[np.int64], block_size: int, staggered: bool
) -> NDArray[np.int64]:
    """py1b/py1br: spans in epoch order, samples shuffled within consecutive blocks."""
    n = spans.total
    if staggered:
        rng = make_rng(*spans.words, TAG_BLOCKS)
        ends = np.cumsum(random_blocks(n, block_size, rng))
    else:
        ends = np.minimum(np.arange(1, -(-n // block_size) + 1, dtype=np.int64) * block_size, n)
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    block = np.searchsorted(ends, wanted, side="right")
    shuffles = Substreams(*spans.words, TAG_BLOCK_SHUFFLE)
    slots = np.empty(len(wanted), dtype=np.int64)
    for start, stop in _runs(block):
        k = int(block[start])
        low = int(starts[k])
        perm = shuffles[k].permutation(int(ends[k]) - low)
        slots[start:stop] = low + perm[wanted[start:stop] - low]
    index, offset = spans.locate(slots)
    return spans.table.at(spans.order[index], offset)


class _Shifted:
    """py1e's shifted positions, drawn span by span into the windows they fall in.

    A span is drawn once, when the first window it may reach is computed, and its samples go to
    per-window buckets; a bucket is dropped once its window is past.
    """

    def __init__(self, spans: _EpochSpans, block_size: int) -> None:
        self.spans = spans
        n, sizes, starts = spans.total, spans.sizes, spans.starts
        rng = make_rng(*spans.words, TAG_SHIFTS)
        widths = rng.integers(3 * block_size // 4, 5 * block_size // 4, size=len(sizes))
        cutoffs = np.maximum(widths - sizes, 0) / 2
        self.low = np.maximum(-cutoffs, -starts)  # shifts keep the span inside the node
        self.high = np.minimum(cutoffs, n - starts - sizes)
        scale = float(1 << FRACTION_BITS)
        # Every key of span r lies in [starts + low, ends - 1 + high], rounding included.
        self.q_low = np.floor((starts + self.low) * scale).astype(np.int64)
        self.q_high = np.floor((spans.ends - 1 + self.high) * scale).astype(np.int64)
        self.reach = float(max(-self.low.min(), self.high.max())) if len(sizes) else 0.0
        self.shift = 0
        self.scale = scale
        self._ramp = np.empty(0)
        # window -> [(span, rounded keys, within-span shuffle)] of the samples it holds
        self.buckets: dict[int, list[tuple[int, NDArray[np.int64], NDArray[np.int64]]]] = {}
        self.counts: dict[int, dict[int, int]] = {}  # drawn span -> {window: samples in it}

    def draw(self, r: int) -> None:
        """Draw span ``r`` and put its samples in the buckets of their windows.

        Slot ``t`` of the span holds its sample ``shuffle[t - start]`` at shifted position
        ``key = (t + low) + u * (high - low)``, ``u`` uniform in ``[0, 1)``.
        """
        shuffle, keys = self.spans.draw(r, shifts=True)
        low, high = float(self.low[r]), float(self.high[r])
        # key * 2**FRACTION_BITS as u * (high - low) * scale + j * scale + (start + low) * scale,
        # summed in this fixed order for every window. Every term is >= 0 (low >= -start) and
        # rounding is monotone, so the result lies in [q_low, q_high]; truncation is the floor.
        keys *= (high - low) * self.scale
        keys += self.ramp(len(keys))
        keys += (float(self.spans.starts[r]) + low) * self.scale
        q = keys.astype(np.int64)
        first, last = int(self.q_low[r]) >> self.shift, int(self.q_high[r]) >> self.shift
        counts = self.counts[r] = {}
        if first == last:
            chunks = [(first, q, shuffle)]
        else:
            windows = q >> self.shift
            chunks = []
            for k in range(first, last + 1):
                mask = windows == k
                chunks.append((k, q[mask], shuffle[mask]))
        for k, keys_k, shuffle_k in chunks:
            if len(keys_k):
                self.buckets.setdefault(k, []).append((r, keys_k, shuffle_k))
                counts[k] = len(keys_k)

    def ramp(self, size: int) -> NDArray[np.float64]:
        """``arange(size) * scale``, kept for the next span."""
        if len(self._ramp) < size:
            self._ramp = np.arange(size, dtype=np.float64) * self.scale
        return self._ramp[:size]

    def forget_below(self, window: int, q: int) -> None:
        """Drop the buckets before ``window`` and the spans whose keys all lie below ``q``."""
        for k in [k for k in self.buckets if k < window]:
            del self.buckets[k]
        for r in [r for r in self.counts if self.q_high[r] < q]:
            del self.counts[r]


def _sorted_window(q: NDArray[np.int64], width_bits: int) -> NDArray[np.int64]:
    """Indices that order ``q`` (values below ``2**width_bits``) by value, then by index."""
    index_bits = max(1, len(q).bit_length())
    if width_bits + index_bits > 63:
        return np.argsort(q, kind="stable")
    packed = (q << index_bits) | np.arange(len(q), dtype=np.int64)
    packed.sort()
    packed &= (1 << index_bits) - 1
    return packed


def _py1e_ids(
    spans: _EpochSpans, wanted: NDArray[np.int64], block_size: int, window: int | None
) -> NDArray[np.int64]:
    """py1e: every span's samples shifted at random within about a block, then sorted."""
    shifted = _Shifted(spans, block_size)
    n, sizes = spans.total, spans.sizes
    if window is None:  # above twice the largest shift: a span's samples fall in 1 to 3 windows
        window = 1 << max(1, int(np.ceil(2 * shifted.reach))).bit_length()
        window = min(max(window, _MIN_WINDOW), _MAX_WINDOW)
    bits = max(0, window.bit_length() - 1)
    window = 1 << bits
    shifted.shift = FRACTION_BITS + bits
    out = np.empty(len(wanted), dtype=np.int64)
    for index, first in enumerate(range(0, n, window)):
        low_q = first << FRACTION_BITS
        high_q = low_q + (window << FRACTION_BITS)
        shifted.forget_below(index, low_q)
        below = shifted.q_high < low_q
        above = shifted.q_low >= high_q
        # The window's samples land in [before, after): bounds from the spans' extents alone.
        before = int(sizes[below].sum())
        after = n - int(sizes[above].sum())
        lo, hi = np.searchsorted(wanted, [before, after])
        if lo == hi:
            continue
        for r in np.flatnonzero(~below & ~above).tolist():
            if r not in shifted.counts:
                shifted.draw(r)
            before += sum(c for k, c in shifted.counts[r].items() if k < index)
        chunks = sorted(shifted.buckets.pop(index, []), key=lambda chunk: chunk[0])
        if not chunks:
            continue
        q = np.concatenate([chunk[1] for chunk in chunks])  # in slot order, as spans are
        q -= low_q
        order = _sorted_window(q, (window << FRACTION_BITS).bit_length())
        lo, hi = np.searchsorted(wanted, [before, before + len(order)])
        picked = order[wanted[lo:hi] - before]
        lengths = [len(chunk[1]) for chunk in chunks]
        owners = np.array([chunk[0] for chunk in chunks], dtype=np.int64)
        if 8 * len(picked) < len(q):  # a few positions: find their chunks
            span_of = owners[np.searchsorted(np.cumsum(lengths), picked, side="right")]
        else:
            span_of = np.repeat(owners, lengths)[picked]
        shuffles = np.concatenate([chunk[2] for chunk in chunks])
        out[lo:hi] = spans.table.at(spans.order[span_of], shuffles[picked])
    return out


def _distinct(
    positions: NDArray[np.int64],
) -> tuple[NDArray[np.int64], NDArray[np.int64] | None]:
    """The distinct positions, sorted, and where each given one is among them.

    ``None`` stands for "as given": positions already strictly increasing. A worker's are, but
    for its padding: a short tail that wraps to the epoch's first positions, merged in linear
    time here.
    """
    breaks = np.flatnonzero(positions[1:] <= positions[:-1])
    if not len(breaks):
        return positions, None
    cut = int(breaks[0]) + 1
    if len(positions) - cut > len(positions) // 4:  # no long increasing head: sort it all
        wanted, inverse = np.unique(positions, return_inverse=True)
        return wanted.astype(np.int64, copy=False), inverse.astype(np.int64, copy=False)
    head, tail = positions[:cut], positions[cut:]
    extra = np.unique(tail)
    found = np.minimum(np.searchsorted(head, extra), cut - 1)
    fresh = extra[head[found] != extra]  # tail values the head lacks
    wanted = np.insert(head, np.searchsorted(head, fresh), fresh)
    inverse = np.empty(len(positions), dtype=np.int64)
    inverse[:cut] = np.arange(cut) + np.searchsorted(fresh, head)
    inverse[cut:] = np.searchsorted(wanted, tail)
    return wanted, inverse


def node_ids(
    algo: str,
    table: SpanTable,
    seed: int,
    epoch: int,
    block_size: int,
    positions: NDArray[np.int64],
    window: int | None = None,
) -> NDArray[np.int64]:
    """The global sample ids at ``positions`` (any shape) of a canonical node's epoch order.

    Args:
        algo: A span-based shuffle: ``py1b``, ``py1br``, ``py1e``, ``py1s`` or ``py2s``.
        table: The node's spans.
        seed: The run's shuffle seed (validated).
        epoch: The epoch (validated).
        block_size: Shuffle block size ``B`` (validated; ignored by ``py1s`` and ``py2s``).
        positions: Positions within the node, ``0 .. len(node) - 1``, in any order, repeats
            allowed.
        window: py1e's window, in positions, rounded down to a power of two (``None``: above
            twice the largest shift, within ``2**16 .. 2**22``). It trades memory for time and
            never changes the result.

    Returns:
        An int64 array shaped like ``positions``.
    """
    flat = np.asarray(positions, dtype=np.int64).ravel()
    if not len(flat):
        return np.empty(np.shape(positions), dtype=np.int64)
    wanted, inverse = _distinct(flat)
    spans = _EpochSpans(table, seed, epoch)
    if algo in ("py1s", "py2s"):
        ids = _span_shuffle_ids(spans, wanted)
    elif algo == "py1e":
        ids = _py1e_ids(spans, wanted, block_size, window)
    else:
        ids = _block_ids(spans, wanted, block_size, staggered=algo == "py1br")
    if inverse is not None:
        ids = ids[inverse]
    return ids.reshape(np.shape(positions))
