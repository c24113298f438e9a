"""What keys a Spark Connect DataFrame's materialized copy: what the Connect server tells.

A Connect DataFrame has no JVM plan on the client, so the key's material comes from the server:

* the analyzed logical plan, as the server's ``explain`` prints it (every field: the session's
  ``spark.sql.debug.maxToStringFields`` is raised while it prints), with expression ids
  (``#12``) erased, since the server numbers them anew at each analysis;
* a digest of the plan the client sends, without what differs between sessions for the same
  query (the ids the client gives its DataFrames, the call sites it records): the text
  prints string literals bare, so ``tag = 'a#1'`` and ``tag = 'a#2'`` read alike there once
  ids are erased, and the client's plan tells them apart;
* every source file (``DataFrame.inputFiles()``) with its size and modification time, listed
  by the server through Spark's ``binaryFile`` source (it reads no content), since the files
  are where the server reads them, which the client may not see;
* the schema, the session time zone and the conversion options, as for classic DataFrames.

``DataFrame.semanticHash()`` is not stable across Connect servers (the same Parquet read
hashes differently after a restart), so it joins the key only where the plan text cannot
identify the data: in-memory rows (``createDataFrame``), keyed to the Connect session as
classic ones are to the Spark application, and a plan printed with fields cut short.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any
from urllib.parse import unquote

from shardstream.errors import ConfigurationError

__all__ = [
    "analyzed_plan",
    "client_plan_digest",
    "connect_material",
    "hadoop_path",
    "is_connect",
    "plan_digest",
    "server_file_stats",
    "session_bound",
]

logger = logging.getLogger(__name__)

_MAX_FIELDS_CONF = "spark.sql.debug.maxToStringFields"
_MAX_FIELDS = 2**31 - 1
_EXPRESSION_ID = re.compile(r"#\d+")
_CUT_FIELDS = re.compile(r"\.\.\. \d+ more fields?")
_ANALYZED = re.compile(r"== Analyzed Logical Plan ==\n(.*?)(?:\n== [A-Za-z ]+ ==\n|\Z)", re.S)
_GLOB = re.compile(r"([\\{}\[\]*?])")
#: Plan fields that differ between sessions for the same query: DataFrame ids, call sites.
_VOLATILE_FIELDS = frozenset({"plan_id", "common"})


def is_connect(dataframe: Any) -> bool:
    """Whether ``dataframe`` is a Spark Connect DataFrame (no JVM on the client)."""
    return type(dataframe).__module__.startswith("pyspark.sql.connect.")


def analyzed_plan(explained: str) -> str:
    """The analyzed plan out of ``explain(mode="extended")``'s text, expression ids erased.

    Raises:
        ConfigurationError: The text has no analyzed plan (a server that explains otherwise).
    """
    match = _ANALYZED.search(explained)
    if match is None:
        raise ConfigurationError(
            "the Spark Connect server's explain output has no '== Analyzed Logical Plan ==' "
            "section to key the converter's cache by; write the DataFrame with dataframe_to_mds "
            "instead"
        )
    return _EXPRESSION_ID.sub("#", match[1].strip())


def hadoop_path(url: str) -> str:
    """``inputFiles()``'s URI as a path Spark's readers take: decoded, glob characters escaped."""
    return _GLOB.sub(r"\\\1", unquote(url))


def client_plan_digest(dataframe: Any) -> str:
    """SHA-256 of the plan the client sends for ``dataframe`` (see :func:`plan_digest`)."""
    return plan_digest(dataframe._plan.to_proto(dataframe._session.client))


def plan_digest(plan: Any) -> str:
    """SHA-256 of a Connect plan message without its volatile fields (``plan`` is cleared).

    The ids the client gives each DataFrame (``plan_id``) and the call sites it records
    (``common``) differ between sessions for the same query; everything else is kept.
    """
    _strip_volatile(plan)
    return hashlib.sha256(plan.SerializeToString(deterministic=True)).hexdigest()


def _strip_volatile(message: Any) -> None:
    """Clear ``_VOLATILE_FIELDS`` in ``message`` and every message inside it."""
    for field, value in message.ListFields():
        if field.name in _VOLATILE_FIELDS:
            message.ClearField(field.name)
        elif field.message_type is None:
            continue
        elif field.message_type.GetOptions().map_entry:
            values = field.message_type.fields_by_name["value"]
            if values.message_type is not None:
                for item in value.values():
                    _strip_volatile(item)
        elif hasattr(value, "ListFields"):
            _strip_volatile(value)
        else:  # a repeated field of messages
            for item in value:
                _strip_volatile(item)


def server_file_stats(session: Any, urls: list[str]) -> list[list[Any]]:
    """``[path, size, modification time in ms]`` of each file as the server sees it, sorted.

    One Spark job lists them all (``binaryFile`` without its content column reads no data).

    Raises:
        ConfigurationError: A file is gone since the DataFrame was read.
    """
    if not urls:
        return []
    listing = session.read.format("binaryFile").load([hadoop_path(url) for url in urls])
    try:
        rows = listing.selectExpr("path", "length", "unix_millis(modificationTime)").collect()
    except Exception as exc:
        raise ConfigurationError(
            f"the Spark Connect server cannot list the DataFrame's {len(urls)} source files "
            f"(first: {urls[0]}): {str(exc).splitlines()[0]}; they were moved or deleted since "
            "the DataFrame was read: read the source again"
        ) from exc
    return sorted([str(row[0]), int(row[1]), int(row[2])] for row in rows)


def session_bound(plan: str, in_memory_leaves: re.Pattern[str]) -> str | None:
    """Why ``plan``'s text cannot identify its data (then keyed to the session), or None."""
    if in_memory_leaves.search(plan):
        return "reads in-memory rows (createDataFrame)"
    if _CUT_FIELDS.search(plan):
        return "was printed with fields cut short"
    return None


def connect_material(dataframe: Any, in_memory_leaves: re.Pattern[str]) -> dict[str, Any]:
    """The key material of a Connect DataFrame: plan, files, and when needed its session.

    Args:
        dataframe: A Spark Connect DataFrame.
        in_memory_leaves: Matches the plan leaves whose rows the plan's text does not show.

    Returns:
        ``plan``, ``client_plan`` (see :func:`client_plan_digest`), ``schema``,
        ``time_zone``, ``files`` (the URIs), ``stats`` (see :func:`server_file_stats`) and,
        for in-memory rows or a cut plan, ``session`` (the Connect session id and the
        semantic hash).
    """
    session = dataframe.sparkSession
    plan = analyzed_plan(_explain(dataframe))
    files = sorted(str(url) for url in dataframe.inputFiles())
    material: dict[str, Any] = {
        "api": "connect",
        "plan": plan,
        "client_plan": client_plan_digest(dataframe),
        "schema": dataframe.schema.json(),
        "time_zone": session.conf.get("spark.sql.session.timeZone"),  # what casts assume
        "files": files,
        "stats": server_file_stats(session, files),
    }
    reason = session_bound(plan, in_memory_leaves)
    if reason is not None:
        material["session"] = [str(session.session_id), int(dataframe.semanticHash())]
        logger.info(
            "the DataFrame's plan %s: its cache is keyed to this Spark Connect session (%s)",
            reason,
            material["session"][0],
        )
    return material


def _explain(dataframe: Any) -> str:
    """``explain(mode="extended")``'s text, every field printed (the conf put back after)."""
    conf = dataframe.sparkSession.conf
    previous, raised = None, False
    try:  # a server that refuses it (serverless): a cut plan is keyed to the session instead
        previous = conf.get(_MAX_FIELDS_CONF, None)
        conf.set(_MAX_FIELDS_CONF, str(_MAX_FIELDS))
        raised = True
    except Exception:
        logger.debug("could not raise %s", _MAX_FIELDS_CONF, exc_info=True)
    try:
        return str(dataframe._explain_string(mode="extended"))
    finally:
        if raised and previous is None:
            conf.unset(_MAX_FIELDS_CONF)
        elif raised:
            conf.set(_MAX_FIELDS_CONF, previous)
