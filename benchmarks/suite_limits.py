"""What bounds each row of the suite that misses its target on the project's machine.

A missed target in ``docs/benchmarks.md`` is listed with the reason this module records for
its kind of row, and what would meet it; a missed row with no reason here is listed as one to
investigate, never explained away. The reasons carry no figures of their own: the
measurements behind each one are in ``benchmarks/README.md``, section "What limits the rows
that miss", and a reason is only as good as those measurements. Nothing here measures or
decides a result: ``Row.met`` alone says whether a target is met.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LIMITS", "LIMITS_SECTION", "Limit", "limit_of"]

#: Where the measurements behind the reasons are, as a link from ``docs/benchmarks.md``.
LIMITS_SECTION = '`benchmarks/README.md` (section "What limits the rows that miss")'


@dataclass(frozen=True)
class Limit:
    """Why rows of one kind miss their target here, and what would meet them.

    Args:
        metric: The rows' metric, as the table shows it.
        workload: Substrings that the row's workload must all contain.
        bound: What limits the row on this machine.
        would: What would meet the target.
    """

    metric: str
    workload: tuple[str, ...]
    bound: str
    would: str

    def matches(self, metric: str, workload: str) -> bool:
        """Whether this reason is about the row of ``metric`` on ``workload``."""
        return metric == self.metric and all(part in workload for part in self.workload)


LIMITS = [
    Limit(
        "peak RSS per process (largest)",
        ("small-1KiB x 1,000,000",),
        bound="shards of small samples are mapped, and a shuffle over the whole dataset touches "
        "every page of it: the mapped page cache (shared, reclaimable) counts in `VmHWM` up to "
        "the dataset's size. Reading the samples instead keeps memory flat, but any read "
        "through the kernel costs more than a mapped read: a `pread` per 1 KiB sample about "
        "three times, and a batch's reads in one io_uring system call no less "
        "(`floors_bench.py`), so the speed rows (met) would miss instead",
        would="a read of small samples out of the page cache as cheap as a mapped one, which "
        "no kernel interface measured here gives. The JSON also records `RssAnon`, the "
        "process's own memory",
    ),
    Limit(
        "peak RSS per process (largest)",
        ("tokens-2048",),
        bound="token shards (4 KiB samples) are mapped, as small samples are, and the pages a "
        "shuffled epoch touches count in `VmHWM` (with workers, in the loader's process, which "
        "reads their batches of token arrays); unmapping a shuffled batch's pages after it "
        "halves the speed, each page mapped again being a fault, and a `pread` per sample "
        "costs more than a mapped read too",
        would="as for 1 KiB samples: many reads per system call",
    ),
    Limit(
        "time to first batch (cold)",
        ("100 shards,",),
        bound="the first batch needs 80-90 of the 100 shards, each fetched into the crash-safe "
        "cache before it is read (a lock file and a temporary created, the temporary renamed "
        "into place, then the shard opened): with 0 workers that is nearly the whole start, "
        "and with 2 the workers fetch theirs after torch has started them. Since this run a "
        "fetch makes fewer file operations (one check of the shard's files instead of three, "
        "no folder creation per file), and the row met its target when measured alone",
        would="still fewer file operations per shard (one lock file per cache folder with "
        "byte-range locks, download slots held open), or the main process fetching the "
        "workers' first shards while torch starts them",
    ),
    Limit(
        "warm-cache iteration",
        ("large-100KiB", "workers 0"),
        bound="each ~100 KiB value is copied out of the page cache into a new `bytes` that its "
        "batch holds, memory the CPU's caches do not have, and in one process that copy "
        "alone takes nearly half of the faster peer's whole time a sample: 2x would leave "
        "almost nothing for the rest of a sample's work (its label, locating it, collation)",
        would="values that are not copied (`zero_copy=True`: memoryviews of mapped shards), "
        "which this benchmark's `bytes` batches do not ask for; or workers (the 2-worker rows "
        "meet it)",
    ),
    Limit(
        "resume latency",
        (),
        bound="with 2 workers, starting torch's DataLoader worker processes alone takes "
        "34-45 ms here (floors_bench.py: a first batch with no data), more than a tenth of "
        "the reference's time, most of it the loader's own process forking them, so even a "
        "first batch read by that process could not come sooner; with 0 workers a resumed "
        "process reads its epoch's node orders back from the cache, kept there by the run "
        "that saved the state (cache/node_orders.py; computing py1e again took 12-17 ms), then "
        "maps the first batch's shards",
        would="with workers, workers already running, which a fresh torch DataLoader does not have",
    ),
    Limit(
        "cold iteration from local S3",
        ("large-100KiB",),
        bound="the epoch waits on the shards: SeaweedFS serves them from the same two cores "
        "that read them, and they arrive in about the time that 2x the reference allows for "
        "the whole epoch",
        would="a server that does not share the readers' cores (on another machine, the "
        "network would be the bound)",
    ),
    Limit(
        "shard download",
        (),
        bound="SeaweedFS serves from the same two cores that download and hash the files: the "
        "server is the ceiling",
        would="a server on other cores or another machine",
    ),
    Limit(
        "Spark conversion (zstd)",
        ("image",),
        bound="most of the time is Spark handing 2 GB of images to Python and zstd compressing "
        "them, the same work the reference does, and the row sits around its target from run "
        "to run",
        would="less of Spark's hand-over (it is the floor of both libraries' time)",
    ),
]


def limit_of(metric: str, workload: str) -> Limit | None:
    """The recorded reason why the row of ``metric`` on ``workload`` misses; None if none."""
    return next((limit for limit in LIMITS if limit.matches(metric, workload)), None)
