"""One canonical node's epoch order, looked up at chosen positions in memory that fits them.

A worker reads a few of its canonical node's positions (one in 64 on 8 ranks x 8 workers), so
nothing here materialises the node's order. Every random draw is addressable: the span order
and the window widths are ``O(spans)``; the within-span shuffles and py1e shifts of each group
of consecutive spans (about 2**16 samples), and each block's shuffle, come from their own
substream (:class:`~.spans.Substreams`), so any group or block can be drawn alone. Then:

* ``py1s`` and ``py2s`` draw only the groups holding a wanted position.
* ``py1b`` and ``py1br`` draw only the blocks holding one.
* ``py1e`` sweeps the node in windows of shifted position. A sample moves at most ``M`` (the
  largest shift) from its slot, so a window's samples come from the spans within ``M`` of it, and
  the samples shifted below the window are counted from those same spans. A group is drawn once,
  into per-window buckets; each window is sorted alone; windows holding no wanted position
  (found from the spans' extents alone) are skipped and draw nothing. Time stays ``O(node)`` for
  a worker whose positions cover the node; memory is ``O(window + group + wanted positions)``.

The result never depends on which positions are asked for, nor on the window size: py1e orders
samples by ``(floor(key * 2**FRACTION_BITS), slot)``, ``key`` being the shifted position.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import NDArray

from shardstream.sampling.distinct import distinct, distinct_inverse
from shardstream.sampling.intervals import count_at_most
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
_GROUP_SAMPLES = 1 << 16  # at most 2**16 spans a group: span indices fit 16 bits
_FEW_SPANS = 16  # groups of up to this many spans are drawn span by span
_MAX_WINDOW = 1 << 22


class _EpochSpans:
    """A node's spans in one epoch's order, with their draws, made group by group.

    Consecutive spans (in epoch order) are drawn together in groups of about
    :data:`_GROUP_SAMPLES` samples, one substream each, so that many small spans do not cost a
    generator reset each; spans of that size or more are drawn alone.
    """

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
        self.group = max(1, _GROUP_SAMPLES // max(1, self.total // max(1, len(self.sizes))))
        # Slot t of span r holds sample ``t + delta[r]`` when the table's spans are ranges of
        # ids (every shuffle's but py2s's, and given spans'): one addition, no search in it.
        self.firsts: NDArray[np.int64] | None = None  # of the spans, in epoch order
        self.delta: NDArray[np.int64] | None = None
        if table.shard_sizes is None:
            self.firsts = table.firsts[self.order]
            self.delta = self.firsts - self.starts

    def _given(self, found: NDArray[np.int64]) -> NDArray[np.int64]:
        return found if self.table.explicit is None else self.table.explicit[found]

    def ids(self, spans: NDArray[np.int64], offsets: NDArray[np.int64]) -> NDArray[np.int64]:
        """The samples at ``offsets`` (in run order) within the epoch's ``spans``."""
        if self.firsts is None:
            return self.table.at(self.order[spans], offsets)
        found = self.firsts[spans]
        found += offsets
        return self._given(found)

    def group_ids(self, first: int, stop: int, offsets: NDArray[np.int64]) -> NDArray[np.int64]:
        """The samples at ``offsets`` of spans ``first .. stop - 1``, each span's in turn.

        ``offsets`` is taken over (and may be changed).
        """
        sizes = self.sizes[first:stop]
        if self.firsts is None:
            spans = np.repeat(np.arange(first, stop, dtype=np.int64), sizes)
            return self.table.at(self.order[spans], offsets)
        offsets += np.repeat(self.firsts[first:stop], sizes)
        return self._given(offsets)

    def ids_at_slots(self, slots: NDArray[np.int64]) -> NDArray[np.int64]:
        """The samples of the spans in run order at the node's ``slots`` (epoch positions)."""
        index = count_at_most(self.ends, slots)
        if self.delta is None:
            return self.ids(index, slots - self.starts[index])
        found = self.delta[index]
        found += slots
        return self._given(found)

    def locate(self, slots: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The epoch index of the span holding each slot, and the slot's offset in it."""
        spans = count_at_most(self.ends, slots)
        return spans, slots - self.starts[spans]

    def members(self, group: int) -> tuple[int, int]:
        """The epoch indices ``[first, stop)`` of a group's spans."""
        first = group * self.group
        return first, min(first + self.group, len(self.sizes))

    def draw(self, group: int, shifts: bool) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """A group's within-span shuffles, and (py1e) a uniform per slot.

        Slot ``starts[first] + i`` holds sample ``shuffle[i]`` (an offset in run order) of the
        span it lies in. A lone span is shuffled outright; several are each ordered by a uniform
        key per sample.
        """
        first, stop = self.members(group)
        sizes = self.sizes[first:stop]
        count = int(sizes.sum())
        rng = self.draws[group]
        if stop - first <= _FEW_SPANS:  # each span shuffled outright, one after the other
            parts = [rng.permutation(size) for size in sizes.tolist()]
            shuffle = np.concatenate(parts).astype(np.int64, copy=False)
        else:
            # One permutation of the group, then each span's members in the order it put them
            # (a stable sort by span, a radix sort on 16 bits): a uniform shuffle of each span.
            shuffle = rng.permutation(count).astype(np.int64, copy=False)
            span = np.repeat(np.arange(stop - first, dtype=np.uint16), sizes)[shuffle]
            shuffle = shuffle[np.argsort(span, kind="stable")]
            shuffle -= np.repeat(self.starts[first:stop] - self.starts[first], sizes)
        return shuffle, rng.random(count) if shifts else np.empty(0)


def _runs(keys: NDArray[np.int64]) -> list[tuple[int, int]]:
    """``(start, stop)`` of each run of equal values in a sorted array."""
    cuts = [0, *(np.flatnonzero(np.diff(keys)) + 1).tolist(), len(keys)]
    return list(itertools.pairwise(cuts))


def _span_shuffle_ids(spans: _EpochSpans, wanted: NDArray[np.int64]) -> NDArray[np.int64]:
    """py1s/py2s: each span in place, its samples shuffled."""
    index, _ = spans.locate(wanted)
    groups = index // spans.group
    out = np.empty(len(wanted), dtype=np.int64)
    for start, stop in _runs(groups):
        group = int(groups[start])
        shuffle, _ = spans.draw(group, shifts=False)
        first = int(spans.starts[spans.members(group)[0]])
        if stop - start == len(shuffle):  # every slot of the group: as drawn
            out[start:stop] = shuffle
        else:
            out[start:stop] = shuffle[wanted[start:stop] - first]
    return spans.ids(index, out)


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
        if stop - start < len(perm):
            perm = perm[wanted[start:stop] - low]
        perm += low
        slots[start:stop] = perm
    return spans.ids_at_slots(slots)


# A drawn group's samples in one window: (group, rounded keys, sample ids), in slot order.
_Chunk = tuple[int, NDArray[np.int64], NDArray[np.int64]]


class _Shifted:
    """py1e's shifted positions, drawn group by group into the windows they fall in.

    A group of spans is drawn once, when the first window one of its spans may reach is
    computed, and its samples go to per-window buckets; a bucket is dropped once its window is
    past, and a group once all its keys are below the window.
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
        firsts = np.arange(0, len(sizes), spans.group)
        self.group_high = np.maximum.reduceat(self.q_high, firsts) if len(sizes) else self.q_high
        self.shift = 0
        self.scale = scale
        self._ramp = np.empty(0)
        self.drawn = np.zeros(len(sizes), dtype=bool)  # spans whose group is drawn
        self.buckets: dict[int, list[_Chunk]] = {}  # window -> the samples it holds
        self.counts: dict[int, dict[int, int]] = {}  # drawn group -> {window: samples in it}

    def draw(self, group: int) -> None:
        """Draw a group of spans and put its samples in the buckets of their windows.

        Slot ``t`` of span ``r`` holds its sample ``shuffle`` at the shifted position
        ``key = (t + low[r]) + u * (high[r] - low[r])``, ``u`` uniform in ``[0, 1)``.
        """
        shuffle, keys = self.spans.draw(group, shifts=True)
        first, stop = self.spans.members(group)
        scale, sizes = self.scale, self.spans.sizes[first:stop]
        low, high = self.low[first:stop], self.high[first:stop]
        # key * 2**FRACTION_BITS as u * (high - low) * scale + j * scale + (start + low) * scale,
        # j the slot's offset in its span, summed in this fixed order for every window. Every
        # term is >= 0 (low >= -start) and rounding is monotone, so the result lies in
        # [q_low, q_high]; truncation is the floor.
        base = (self.spans.starts[first:stop] + low) * scale
        if stop - first <= _FEW_SPANS:
            end = 0
            for r, size in enumerate(sizes.tolist()):
                start, end = end, end + size
                part = keys[start:end]
                part *= float(high[r] - low[r]) * scale
                part += self.ramp(size)
                part += float(base[r])
        else:
            keys *= np.repeat((high - low) * scale, sizes)
            offsets = np.cumsum(sizes) - sizes
            keys += (np.arange(len(keys)) - np.repeat(offsets, sizes)) * scale
            keys += np.repeat(base, sizes)
        q = keys.astype(np.int64)
        ids = self.spans.group_ids(first, stop, shuffle)
        self.drawn[first:stop] = True
        counts = self.counts[group] = {}
        low_window = int(self.q_low[first:stop].min()) >> self.shift
        high_window = int(self.group_high[group]) >> self.shift
        if low_window == high_window:  # the whole group in one window: no split
            self.buckets.setdefault(low_window, []).append((group, q, ids))
            counts[low_window] = len(q)
            return
        windows = q >> self.shift
        for k in range(low_window, high_window + 1):
            mask = windows == k
            if mask.any():
                chunk = (group, q[mask], ids[mask])
                self.buckets.setdefault(k, []).append(chunk)
                counts[k] = len(chunk[1])

    def ramp(self, size: int) -> NDArray[np.float64]:
        """``arange(size) * scale``, kept for the next span."""
        if len(self._ramp) < size:
            self._ramp = np.arange(size, dtype=np.float64) * self.scale
        return self._ramp[:size]

    def forget_below(self, window: int, q: int) -> None:
        """Drop the buckets before ``window`` and the groups whose keys all lie below ``q``."""
        for k in [k for k in self.buckets if k < window]:
            del self.buckets[k]
        for group in [g for g in self.counts if self.group_high[g] < q]:
            del self.counts[group]
            first, stop = self.spans.members(group)
            self.drawn[first:stop] = False  # counted whole from now on, as spans below


def _sorted_window(q: NDArray[np.int64], width_bits: int) -> NDArray[np.int64]:
    """Indices that order ``q`` (values below ``2**width_bits``) by value, then by index.

    ``q`` is taken over (and may be changed).
    """
    index_bits = max(1, len(q).bit_length())
    # Keys and indices packed in one int64 sort; keys too wide lose their lowest bits there,
    # and the few runs of keys that then tie are put in order after.
    drop = max(0, width_bits + index_bits - 63)
    packed = q >> drop if drop else q
    packed <<= index_bits
    packed |= np.arange(len(q), dtype=np.int64)
    packed.sort()
    if not drop:
        packed &= (1 << index_bits) - 1
        return packed
    order = packed & ((1 << index_bits) - 1)
    packed >>= index_bits
    tied = packed[1:] == packed[:-1]
    if tied.any():  # runs of equal high bits: each ordered by its whole keys, ties by index
        member = np.zeros(len(q), dtype=bool)
        member[1:] |= tied
        member[:-1] |= tied
        at = np.flatnonzero(member)
        run = np.cumsum(~tied)[at - (at > 0)]  # run number, equal within a run of ties
        run[at == 0] = 0
        order[at] = order[at][np.lexsort((order[at], q[order[at]], run))]
    return order


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
        active = np.flatnonzero(~below & ~above)
        for group in distinct(active // spans.group).tolist():
            if group not in shifted.counts:
                shifted.draw(group)
        # Below the window: spans of undrawn groups whole, and what drawn groups put there.
        before = int(sizes[below & ~shifted.drawn].sum())
        for counts in shifted.counts.values():
            before += sum(c for k, c in counts.items() if k < index)
        chunks = sorted(shifted.buckets.pop(index, []), key=lambda chunk: chunk[0])
        if not chunks:
            continue
        q = _joined([chunk[1] for chunk in chunks])  # in slot order, as groups are
        q -= low_q
        order = _sorted_window(q, (window << FRACTION_BITS).bit_length())
        lo, hi = np.searchsorted(wanted, [before, before + len(order)])
        if hi - lo < len(order):  # some of the window's positions
            order = order[wanted[lo:hi] - before]
        np.take(_joined([chunk[2] for chunk in chunks]), order, out=out[lo:hi])
    return out


def _joined(parts: list[NDArray[np.int64]]) -> NDArray[np.int64]:
    """The parts end to end: the part itself when there is one (no copy)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


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
        wanted, inverse = distinct_inverse(positions)
        return wanted.astype(np.int64, copy=False), inverse
    head, tail = positions[:cut], positions[cut:]
    extra = distinct(tail)
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
