"""Stream mixing: how many samples each stream gives an epoch, and which ones.

Each stream is weighted by at most one of ``proportion`` (relative), ``repeat`` (a multiple of
the stream) or ``choose`` (a sample count). :func:`stream_choices` turns the weights into
samples per stream; :func:`resample` turns those into the epoch's *units*: whole shards, each
repeated as often as the weight says, plus shards of which only a random subset is used for
the fractional part. Units are what the shuffle and the partition see as "shards"; a unit's
samples map back to dataset sample ids with :meth:`EpochUnits.sample_ids`, one unit at a time,
so nobody materialises the epoch.

With ``sampling_method='balanced'`` the fractional part is drawn again every epoch; with
``'fixed'`` it is the same in every epoch. It is taken ``sampling_granularity`` samples of a
shard at a time, from shards in a random order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.distinct import distinct
from shardstream.sampling.spans import make_rng

__all__ = [
    "EpochUnits",
    "StreamWeight",
    "derived_weights",
    "parse_epoch_size",
    "resample",
    "stream_choices",
]

TAG_SHORTFALL = 11  # [seed, TAG]: streams that get one more sample after rounding.
TAG_GRANULES = 12  # [seed, epoch, stream, TAG] or [seed, stream, TAG] (fixed): shard order.
TAG_SUBSET = 13  # [seed, epoch, shard, TAG] or [seed, shard, TAG] (fixed): a shard's subset.
_FIXED = 1 << 63  # stands in for the epoch in 'fixed' sampling (never a real epoch number)

_ABBREVIATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_epoch_size(value: int | str | None) -> int | None:
    """``epoch_size`` as a sample count: an int, or a decimal abbreviation (``'100k'``, ``'1.5m'``).

    Raises:
        ConfigurationError: Not a non-negative count or abbreviation.
    """
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _ABBREVIATION.match(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigurationError(
            f"epoch_size={value!r} is not a sample count: write an integer or a number with k, "
            f"m, b or t (thousands, millions, billions, trillions), e.g. '100k'"
        )
    return int(float(match.group(1)) * _SCALE[match.group(2).lower()])


@dataclass(frozen=True)
class StreamWeight:
    """How much of one stream an epoch takes: at most one of the three, or none.

    Args:
        proportion: A relative weight (normalised over the streams), >= 0.
        repeat: A multiple of the stream's size, >= 0 (``0.5`` is half, ``2`` twice).
        choose: An exact number of samples, >= 0.
    """

    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self) -> None:
        given = [
            name for name in ("proportion", "repeat", "choose") if getattr(self, name) is not None
        ]
        if len(given) > 1:
            raise ConfigurationError(
                f"a stream takes at most one of proportion, repeat and choose; got {given}"
            )
        for name in given:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigurationError(f"{name} must be a number >= 0, got {value!r}")
        if self.choose is not None and not isinstance(self.choose, int):
            raise ConfigurationError(f"choose must be an integer, got {self.choose!r}")

    @property
    def relative(self) -> bool:
        """True for a proportion."""
        return self.proportion is not None


def stream_choices(
    stream_sizes: Sequence[int],
    weights: Sequence[StreamWeight],
    *,
    epoch_size: int | None,
    seed: int,
) -> NDArray[np.int64]:
    """Samples each stream contributes to every epoch.

    Proportions split ``epoch_size`` (default: the streams' total) by weight; ``repeat`` and
    ``choose`` are absolute and do not mix with proportions or with ``epoch_size``. Without
    weights, ``epoch_size`` is split by stream size. Rounding down leaves a shortfall of a few
    samples, given one each to streams picked at random (seeded by ``seed`` alone).

    Raises:
        ConfigurationError: Relative and absolute weights are mixed, an absolute weight comes
            with ``epoch_size``, or the proportions add up to zero.
    """
    sizes = np.asarray(stream_sizes, np.int64)
    if len(weights) != len(sizes):
        raise ConfigurationError(
            f"{len(weights)} weights for {len(sizes)} streams: give one weight per stream"
        )
    relative = [weight.relative for weight in weights]
    if any(relative) and not all(relative):
        raise ConfigurationError(
            "streams mix proportion with repeat/choose (or none): give every stream a "
            "proportion, or none of them"
        )
    absolute = [w.repeat is not None or w.choose is not None for w in weights]
    if any(absolute) and epoch_size is not None:
        raise ConfigurationError(
            f"epoch_size={epoch_size!r} cannot be combined with repeat or choose: drop "
            "epoch_size, or give the streams proportions instead"
        )
    shares = _relative_shares(sizes, weights, epoch_size)
    if shares is None:
        return np.array(
            [
                w.choose if w.choose is not None
                else int(w.repeat * size) if w.repeat is not None
                else size
                for w, size in zip(weights, sizes.tolist(), strict=True)
            ],
            np.int64,
        )  # fmt: skip
    if shares.sum() <= 0:
        raise ConfigurationError(
            f"the streams' proportions (or sizes) add up to zero ({shares.tolist()}): give at "
            "least one stream a proportion > 0 (or samples)"
        )
    total = int(sizes.sum()) if epoch_size is None else epoch_size
    exact = total * shares / shares.sum()
    choices: NDArray[np.int64] = np.floor(exact).astype(np.int64)
    shortfall = total - int(choices.sum())
    if shortfall:
        lucky = make_rng(seed, TAG_SHORTFALL).choice(len(sizes), shortfall, replace=False)
        choices[lucky] += 1
    return choices


def derived_weights(
    stream_sizes: Sequence[int],
    weights: Sequence[StreamWeight],
    choices: NDArray[np.int64],
    *,
    epoch_size: int | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Each stream's proportion and repeat, derived as the reference writes them back.

    The proportion is the stream's share of the weights: the given proportions normalised,
    the streams' sizes normalised when only ``epoch_size`` is given, else its share of the
    epoch's samples. The repeat is ``choices / size``. Streams are not empty (checked first).

    Example:
        >>> weights = [StreamWeight(repeat=2), StreamWeight(choose=5)]
        >>> proportion, repeat = derived_weights([20, 7], weights, np.array([40, 5]),
        ...                                      epoch_size=None)
        >>> proportion.round(3).tolist(), repeat.round(3).tolist()
        ([0.889, 0.111], [2.0, 0.714])
    """
    sizes = np.asarray(stream_sizes, np.int64)
    shares = _relative_shares(sizes, weights, epoch_size)
    if shares is None:
        shares = choices.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # no weight at all: NaN, as 0/0 is
        proportions: NDArray[np.float64] = shares / shares.sum()
        repeats: NDArray[np.float64] = choices / sizes
    return proportions, repeats


def _relative_shares(
    sizes: NDArray[np.int64], weights: Sequence[StreamWeight], epoch_size: int | None
) -> NDArray[np.float64] | None:
    """What splits the epoch by weight (``None``: absolute weights, or none).

    The proportions, or the streams' sizes when only ``epoch_size`` is given.
    """
    if weights and all(weight.relative for weight in weights):
        return np.array([w.proportion for w in weights], np.float64)
    if epoch_size is not None:
        return sizes.astype(np.float64)
    return None


@dataclass(frozen=True, eq=False)
class EpochUnits:
    """The epoch's units: what the shuffle and the partition treat as shards.

    A unit is a whole shard, or a random subset of one (at most one subset per shard and epoch).
    Epoch positions ("big ids") run over the units end to end.

    Attributes:
        sizes: Samples in each unit.
        shards: The (dataset-wide) shard each unit comes from.
        subset: Whether each unit is a random subset of its shard.
        shard_sizes: Samples in every shard of the dataset, streams end to end.
        seed: The run's seed.
        draw: The epoch the subsets were drawn for (a fixed marker for ``'fixed'`` sampling).
        streams: The stream each unit comes from (``None``: all from stream 0).
    """

    sizes: NDArray[np.int64]
    shards: NDArray[np.int64]
    subset: NDArray[np.bool_]
    shard_sizes: NDArray[np.int64]
    seed: int = 0
    draw: int = 0
    streams: NDArray[np.int64] | None = None

    @property
    def stream_of_unit(self) -> NDArray[np.int64]:
        """The stream of each unit."""
        if self.streams is None:
            return np.zeros(len(self.sizes), np.int64)
        return self.streams

    def of_stream(self, stream: int) -> EpochUnits:
        """The units of one stream only (sample ids stay dataset-wide)."""
        mask = self.stream_of_unit == stream
        return replace(self, sizes=self.sizes[mask], shards=self.shards[mask],
                       subset=self.subset[mask], streams=self.stream_of_unit[mask])  # fmt: skip

    @classmethod
    def whole(cls, shard_sizes: NDArray[np.int64]) -> EpochUnits:
        """Every shard once, whole: an epoch of one unweighted stream."""
        sizes = np.asarray(shard_sizes, np.int64)
        return cls(sizes, np.arange(len(sizes), dtype=np.int64), np.zeros(len(sizes), bool), sizes)

    @property
    def epoch_size(self) -> int:
        """Samples in the epoch."""
        return int(self.sizes.sum())

    def subset_offsets(self, unit: int) -> NDArray[np.int64]:
        """The sorted offsets, within its shard, of a subset unit's samples."""
        shard = int(self.shards[unit])
        rng = make_rng(self.seed, self.draw, shard, TAG_SUBSET)
        chosen = rng.choice(int(self.shard_sizes[shard]), int(self.sizes[unit]), replace=False)
        return np.sort(chosen).astype(np.int64)

    @property
    def positions_are_ids(self) -> bool:
        """Whether epoch positions are sample ids: every shard once, whole, in dataset order."""
        return (
            len(self.sizes) == len(self.shard_sizes)
            and not self.subset.any()
            and np.array_equal(self.shards, np.arange(len(self.shards)))
            and np.array_equal(self.sizes, self.shard_sizes)
        )

    def sample_ids(self, big: NDArray[np.int64]) -> NDArray[np.int64]:
        """Dataset sample ids of epoch positions ``big`` (any shape)."""
        if self.positions_are_ids:
            return np.array(big, dtype=np.int64)
        ends = np.cumsum(self.sizes)
        unit = np.searchsorted(ends, big, side="right")
        offset = big - (ends[unit] - self.sizes[unit])
        bases = np.cumsum(self.shard_sizes) - self.shard_sizes
        ids: NDArray[np.int64] = bases[self.shards[unit]] + offset
        picked = self.subset[unit]
        for index in distinct(unit[picked]).tolist():  # only the subsets these positions touch
            where = unit == index
            ids[where] = bases[self.shards[index]] + self.subset_offsets(index)[offset[where]]
        return ids


def resample(
    stream_shard_sizes: Sequence[NDArray[np.int64]],
    choices: NDArray[np.int64],
    *,
    seed: int,
    epoch: int,
    sampling_method: str = "balanced",
    sampling_granularity: int = 1,
) -> EpochUnits:
    """Lay out an epoch that takes ``choices[i]`` samples from stream ``i``.

    A stream taken ``k`` times whole (plus a fraction) gives each of its shards ``k`` whole
    units; the fraction is drawn ``sampling_granularity`` samples of a shard at a time, from the
    shards in a random order, and becomes whole units (a shard taken entirely) or subset units.

    Raises:
        ConfigurationError: A bad method or granularity, or samples asked of an empty stream.
    """
    if sampling_method not in ("balanced", "fixed"):
        raise ConfigurationError(
            f"sampling_method={sampling_method!r}; use 'balanced' (drawn again every epoch) or "
            f"'fixed' (the same draw every epoch)"
        )
    if not isinstance(sampling_granularity, int) or sampling_granularity < 1:
        raise ConfigurationError(
            f"sampling_granularity must be a positive integer, got {sampling_granularity!r}"
        )
    draw = epoch if sampling_method == "balanced" else _FIXED
    all_sizes = _join([np.asarray(s, np.int64) for s in stream_shard_sizes], np.int64)
    sizes_parts: list[NDArray[Any]] = []
    shard_parts: list[NDArray[Any]] = []
    subset_parts: list[NDArray[Any]] = []
    stream_parts: list[NDArray[Any]] = []
    first = 0
    for stream, (shard_sizes, choice) in enumerate(
        zip(stream_shard_sizes, choices.tolist(), strict=True)
    ):
        sizes = np.asarray(shard_sizes, np.int64)
        total = int(sizes.sum())
        if total == 0:
            if choice:
                raise ConfigurationError(
                    f"stream {stream} is empty but {choice} samples were asked"
                )
            first += len(sizes)
            continue
        whole, rest = divmod(choice, total)
        taken = _granules(
            sizes, rest, sampling_granularity, make_rng(seed, draw, stream, TAG_GRANULES)
        )
        extra_whole = (taken == sizes) & (sizes > 0)
        copies = whole + extra_whole.astype(np.int64)
        ids = np.arange(first, first + len(sizes), dtype=np.int64)
        sizes_parts.append(np.repeat(sizes, copies))
        shard_parts.append(np.repeat(ids, copies))
        subset_parts.append(np.zeros(int(copies.sum()), bool))
        stream_parts.append(np.full(int(copies.sum()), stream, np.int64))
        partial = (taken > 0) & ~extra_whole
        sizes_parts.append(taken[partial])
        shard_parts.append(ids[partial])
        subset_parts.append(np.ones(int(partial.sum()), bool))
        stream_parts.append(np.full(int(partial.sum()), stream, np.int64))
        first += len(sizes)

    order = np.argsort(_join(shard_parts, np.int64), kind="stable")  # a shard's units together
    return EpochUnits(
        sizes=_join(sizes_parts, np.int64)[order],
        shards=_join(shard_parts, np.int64)[order],
        subset=_join(subset_parts, np.bool_)[order],
        shard_sizes=all_sizes,
        seed=seed,
        draw=draw,
        streams=_join(stream_parts, np.int64)[order],
    )


def _join(parts: Sequence[NDArray[Any]], dtype: type) -> NDArray[Any]:
    return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype)


def _granules(
    sizes: NDArray[np.int64], count: int, granularity: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """Samples taken from each shard to make up ``count``, a granule per shard per round."""
    taken = np.zeros(len(sizes), np.int64)
    order = rng.permutation(len(sizes))
    left = count
    while left > 0:
        give = np.minimum(granularity, sizes[order] - taken[order])
        reached = np.cumsum(give)
        if reached[-1] <= left:
            taken[order] += give
            left -= int(reached[-1])
            continue
        last = int(np.searchsorted(reached, left))  # the shard whose granule finishes the count
        give[last] -= int(reached[last]) - left
        give[last + 1 :] = 0
        taken[order] += give
        left = 0
    return taken
