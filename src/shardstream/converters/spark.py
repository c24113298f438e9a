"""``dataframe_to_mds``: a Spark DataFrame to one MDS dataset, every task writing its own part.

How a write goes:

1. The driver infers ``columns`` from the DataFrame's Arrow schema (see
   :mod:`shardstream.converters.arrow_types`; ML vectors become ``array<double>`` first) unless
   ``mds_kwargs`` gives them, and checks that the destination is empty.
2. Each Spark task streams its partition's Arrow batches (``mapInArrow``) into an
   :class:`~shardstream.MDSWriter` whose ``out`` is the sub-folder
   ``part-<partition>-<task attempt id>-<job token>`` of the destination: a local (or FUSE)
   folder, or any URL the writer publishes to (``s3://``, ``gs://``, ...). It returns one row:
   its partition, its sub-folder and its sample count.
3. The driver merges the indexes of exactly the sub-folders named in the rows it received,
   in partition order, and publishes ``index.json`` last.

Attempt safety: Spark hands the driver one result per partition, from the attempt that
succeeded first. A failed attempt, or a speculative copy that lost, wrote to a sub-folder of
its own (attempt ids are unique in a job, the token to each job), which the merged index never
names, so no row is lost or counted twice. A speculative copy that Spark has not yet stopped
when the job ends may still write a folder afterwards: the index never names it either.

Rewrites: on a store, a job is all or nothing as an ``MDSWriter`` is
(:mod:`shardstream.writer.publish`): no sub-folder of an earlier job is written to, and until
the merged ``index.json`` is published readers see the old dataset whole. Then the sub-folders
and shards the index does not name (failed attempts, earlier jobs) are deleted. Locally, the
destination is emptied first (``exist_ok=True``) and failed attempts' folders are deleted.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from shardstream._optional import require
from shardstream.converters.arrow_samples import NULL_POLICIES, BatchConverter, OnNull
from shardstream.converters.arrow_types import arrow_module
from shardstream.converters.batches import BatchUDF, prepare_mds_kwargs, write_batches
from shardstream.converters.delta import delta_to_mds, table_and_version
from shardstream.converters.spark_cache_key import cast_floats
from shardstream.converters.spark_types import arrow_schema, vectors_as_arrays
from shardstream.converters.spark_workers import use_worker_python, worker_import_error
from shardstream.errors import ConfigurationError, DatasetExistsError
from shardstream.storage import is_remote, local_path, open_store
from shardstream.writer.merge import merge_partitions
from shardstream.writer.publish import (
    SPARK_FOLDER,
    check_destination,
    new_write_token,
    remove_unnamed,
)

__all__ = ["dataframe_to_mds"]

logger = logging.getLogger(__name__)

_RESULT_SCHEMA = "partition int, folder string, samples long, skipped long"


def dataframe_to_mds(
    dataframe: Any,
    merge_index: bool = True,
    mds_kwargs: Mapping[str, Any] | None = None,
    udf_iterable: BatchUDF | None = None,
    udf_kwargs: Mapping[str, Any] | None = None,
    *,
    on_null: OnNull = "error",
    progress: bool = True,
    float_dtype: str | None = None,
) -> tuple[str, str]:
    """Write a Spark DataFrame as one MDS dataset, each task writing its partition's shards.

    Args:
        dataframe: A ``pyspark.sql.DataFrame``, or a ``deltalake.DeltaTable`` (at the version
            it was opened at): that version's rows are read without Spark, as the Delta stream
            reads them, and ``index.json`` records the table and version under ``"source"``.
        merge_index: Merge the partitions' indexes into one ``index.json`` at ``out``. When
            False, each ``part-*`` sub-folder holds its own index (and failed attempts'
            folders, which have none, are still removed from a local ``out``).
        mds_kwargs: Keyword arguments of :class:`~shardstream.MDSWriter`. ``out`` is required:
            a local folder, a URL, or a ``(local, remote)`` pair. ``columns`` defaults to the
            encodings inferred from the schema, ``compression`` to ``"zstd"``; ``exist_ok``
            lets a non-empty destination be used (a local one is emptied first; on a store,
            earlier files are deleted only after the new index is published).
        udf_iterable: ``udf_iterable(pandas_df, **udf_kwargs)`` is called per Arrow batch of
            each partition and yields the sample dicts to write (``columns`` is then required).
        udf_kwargs: Keyword arguments of ``udf_iterable``.
        on_null: ``"error"`` (default: a null fails the job, naming column, row and partition)
            or ``"skip"`` (rows holding a null are not written). Not applied to UDF output.
        progress: Show a progress bar of finished tasks on the driver.
        float_dtype: ``'float32'`` casts every float and double column (arrays and ML vectors
            included) to float32, as torch models expect; ``'float64'`` to double; ``None``
            (default) keeps each column's type. As ``make_spark_converter``'s ``dtype``.

    Returns:
        ``(local, remote)`` as the reference returns them: the local folder (``""`` when
        ``out`` is a URL) and the remote URL (``""`` when ``out`` is local).

    Raises:
        ConfigurationError: Bad arguments, a column type with no encoding, or Spark's Python
            workers cannot import shardstream (the message says what to set).
        DatasetExistsError: ``out`` is not empty and ``exist_ok`` is not set.
        SampleEncodingError: (inside the Spark job's error) a null or a value its column's
            encoding cannot hold.

    Example:
        df = spark.read.parquet("s3://bucket/raw/")
        out = {"out": "s3://bucket/my-ds", "compression": "zstd"}
        local, remote = dataframe_to_mds(df.repartition(8), mds_kwargs=out)
    """
    if dataframe is None:
        raise ConfigurationError("dataframe_to_mds needs a DataFrame, got None")
    if on_null not in NULL_POLICIES:
        raise ConfigurationError(f"on_null must be one of {NULL_POLICIES}, got {on_null!r}")
    if float_dtype not in ("float32", "float64", None):
        raise ConfigurationError(
            f"float_dtype must be 'float32', 'float64' or None, got {float_dtype!r}"
        )
    table = table_and_version(dataframe)
    if table is not None:
        if float_dtype is not None:
            raise ConfigurationError(
                "float_dtype applies to Spark DataFrames; a Delta table's floats are written "
                "as its schema has them"
            )
        return _delta_table(table, mds_kwargs, udf_iterable, on_null, progress)
    require("pyspark.sql", extra="spark", purpose="dataframe_to_mds")
    use_worker_python(dataframe)
    dataframe = vectors_as_arrays(cast_floats(dataframe, float_dtype))
    schema = arrow_schema(dataframe.schema)
    kwargs = prepare_mds_kwargs(mds_kwargs, schema, has_udf=udf_iterable is not None)
    if udf_iterable is None:  # a column or type/encoding mismatch fails here, before any task
        BatchConverter(schema, kwargs["columns"], on_null=on_null)
    local, remote = _destination(kwargs.pop("out"))
    _prepare_destination(local, remote, exist_ok=bool(kwargs.pop("exist_ok", False)))
    kwargs.pop("progress_bar", None)
    token = new_write_token()
    task = _PartitionTask(
        local, remote, kwargs, on_null, udf_iterable, dict(udf_kwargs or {}), token
    )
    rows = _collect(dataframe.mapInArrow(task, _RESULT_SCHEMA), progress)
    results = sorted((row["partition"], row["folder"], row["samples"]) for row in rows)
    partitions = [partition for partition, _, _ in results]
    if len(set(partitions)) != len(partitions):  # Spark keeps one result per partition
        raise RuntimeError(f"Spark returned a partition twice: {partitions}")
    winners = [folder for _, folder, samples in results if samples]
    skipped = sum(row["skipped"] for row in rows)
    total = sum(samples for _, _, samples in results)
    _remove_local_losers(local, set(winners))
    if skipped:
        logger.warning("dataframe_to_mds skipped %d rows holding a null (on_null='skip')", skipped)
    if not winners:
        raise ConfigurationError(
            "the DataFrame has no rows to write (after skipping nulls): check its filters, "
            "or fill its nulls instead of on_null='skip'"
        )
    if merge_index:
        merge_partitions(remote or local or "", winners, local=local if remote else None)
    if remote is not None:  # after the index is published: readers still read the old one
        remove_unnamed(open_store(remote), _kept(set(winners), token, merge_index=merge_index))
    logger.info(
        "dataframe_to_mds wrote %d samples from %d partitions to %s",
        total,
        len(winners),
        remote or local,
    )
    return local or "", remote or ""


@dataclass(frozen=True)
class _PartitionTask:
    """What each Spark task runs (pickled to the executors): write one partition's shards."""

    local: str | None
    remote: str | None
    writer_kwargs: dict[str, Any]
    on_null: OnNull
    udf_iterable: BatchUDF | None
    udf_kwargs: dict[str, Any]
    token: str

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        pa = arrow_module()
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "runs inside a Spark task"
        partition = context.partitionId()
        folder = f"part-{partition:05d}-{context.taskAttemptId()}-{self.token}"
        first = next(batches, None)
        samples = skipped = 0
        if first is not None:
            out: Any = (
                (os.path.join(self.local, folder), f"{self.remote.rstrip('/')}/{folder}")
                if self.local and self.remote
                else f"{self.remote.rstrip('/')}/{folder}"
                if self.remote
                else os.path.join(self.local or "", folder)
            )
            summary = write_batches(
                _chain(first, batches),
                first.schema,
                {**self.writer_kwargs, "out": out},
                on_null=self.on_null,
                where=f"Spark partition {partition}",
                udf_iterable=self.udf_iterable,
                udf_kwargs=self.udf_kwargs,
            )
            samples, skipped = summary.samples, summary.skipped
        yield pa.RecordBatch.from_pydict(
            {
                "partition": pa.array([partition], pa.int32()),
                "folder": pa.array([folder if samples else ""], pa.string()),
                "samples": pa.array([samples], pa.int64()),
                "skipped": pa.array([skipped], pa.int64()),
            }
        )


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _delta_table(
    table: tuple[str, int | None],
    mds_kwargs: Mapping[str, Any] | None,
    udf_iterable: BatchUDF | None,
    on_null: OnNull,
    progress: bool,
) -> tuple[str, str]:
    """``dataframe_to_mds`` of a ``deltalake.DeltaTable``: its version, read as the stream does."""
    if udf_iterable is not None:
        raise ConfigurationError(
            "udf_iterable applies to Spark DataFrames; for a Delta table, write the samples "
            "yourself with MDSWriter, or read the table with Spark"
        )
    kwargs = dict(mds_kwargs or {})
    if "out" not in kwargs:
        raise ConfigurationError(
            "mds_kwargs needs 'out': a folder, a URL or a (local, remote) pair"
        )
    out = kwargs.pop("out")
    local, remote = _destination(out)
    uri, version = table
    delta_to_mds(uri, out, version=version, on_null=on_null, progress=progress, **kwargs)
    return local or "", remote or ""


def _destination(out: Any) -> tuple[str | None, str | None]:
    """``(local folder or None, remote URL or None)`` of ``mds_kwargs['out']``."""
    if isinstance(out, (tuple, list)):
        if len(out) != 2 or is_remote(os.fspath(out[0])):
            raise ConfigurationError(
                f"out must be a folder, a URL or a (local folder, remote URL) pair, got {out!r}"
            )
        return local_path(os.fspath(out[0])), os.fspath(out[1]).rstrip("/")
    text = os.fspath(out)
    if is_remote(text):
        return None, text.rstrip("/")
    return local_path(text), None


def _prepare_destination(local: str | None, remote: str | None, *, exist_ok: bool) -> None:
    if remote is not None:  # first: refusing must not have emptied the local folder
        check_destination(open_store(remote), exist_ok=exist_ok, hint="exist_ok=True in mds_kwargs")
    if local is not None and os.path.isdir(local) and os.listdir(local):
        if not exist_ok:
            raise DatasetExistsError(
                f"output folder {local} is not empty; pass exist_ok=True in mds_kwargs to "
                f"replace its contents, or choose an empty folder"
            )
        logger.warning("deleting the contents of %s (exist_ok=True)", local)
        shutil.rmtree(local)


def _remove_local_losers(local: str | None, winners: set[str]) -> None:
    """Delete the local sub-folders of attempts that did not count."""
    if local is not None and os.path.isdir(local):
        for name in sorted(os.listdir(local)):
            if SPARK_FOLDER.fullmatch(name) and name not in winners:
                logger.info("removing %s: a failed or superseded task attempt", name)
                shutil.rmtree(os.path.join(local, name), ignore_errors=True)


def _kept(winners: set[str], token: str, *, merge_index: bool) -> Callable[[str], bool]:
    """Which of the store's files to keep once the job's index is published.

    The winners' sub-folders; without a merged index, which names nothing, also every file
    that is not in a sub-folder of this job (an earlier dataset's files stay then).
    """

    def keep(key: str) -> bool:
        folder = key.split("/", 1)[0]
        if folder in winners:
            return True
        match = SPARK_FOLDER.fullmatch(folder)
        return not merge_index and not (match is not None and match.group(3) == token)

    return keep


def _collect(dataframe: Any, progress: bool) -> list[Any]:
    """``dataframe.collect()``, a worker that cannot import shardstream said in one line."""
    try:
        return _collect_with_progress(dataframe, progress)
    except Exception as exc:
        error = worker_import_error(exc, dataframe)
        if error is None:
            raise
        raise error from None  # the worker's and the JVM's traces say nothing more to act on


def _collect_with_progress(dataframe: Any, progress: bool) -> list[Any]:
    """``dataframe.collect()``, with a bar of finished tasks on the driver when possible."""
    try:
        context = dataframe.sparkSession.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: no progress bar
        context = None
    if not progress or context is None:
        return list(dataframe.collect())
    from tqdm.auto import tqdm

    group = f"shardstream-{uuid.uuid4().hex}"
    previous = context.getLocalProperty("spark.jobGroup.id")
    context.setJobGroup(group, "shardstream dataframe_to_mds")
    done = threading.Event()
    bar = tqdm(desc="dataframe_to_mds", unit="task", dynamic_ncols=True)
    poller = threading.Thread(
        target=_poll_tasks, args=(context, group, bar, done), name="shardstream-progress"
    )
    poller.daemon = True
    poller.start()
    try:
        rows = list(dataframe.collect())
        done.set()
        poller.join()
        _show_tasks(context, group, bar)
        bar.update(max(0, (bar.total or bar.n) - bar.n))  # a stage Spark skipped is done too
        return rows
    finally:
        done.set()
        poller.join()
        bar.close()
        context.setLocalProperty("spark.jobGroup.id", previous)


def _poll_tasks(context: Any, group: str, bar: Any, done: threading.Event) -> None:
    try:
        while not done.wait(0.5):
            _show_tasks(context, group, bar)
    except Exception:  # a progress bar must never fail the write
        logger.debug("could not read Spark's task progress", exc_info=True)


def _show_tasks(context: Any, group: str, bar: Any) -> None:
    tracker = context.statusTracker()
    total = finished = 0
    for job in _each(tracker.getJobIdsForGroup(group), tracker.getJobInfo):
        for stage in _each(job.stageIds, tracker.getStageInfo):
            total += stage.numTasks
            finished += stage.numCompletedTasks
    if total and bar.total != total:
        bar.total = total
    if finished > bar.n:
        bar.update(finished - bar.n)


def _each(ids: Iterable[int], lookup: Callable[[int], Any]) -> Iterator[Any]:
    for item in ids:
        info = lookup(item)
        if info is not None:
            yield info
