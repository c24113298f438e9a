"""The Spark Connect cache key's pure parts: the analyzed plan out of explain, Hadoop paths.

The parts that ask a Connect server are tested against one in
``tests/integration/test_spark_connect.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from shardstream.converters.spark_cache_key import _IN_MEMORY_LEAVES
from shardstream.converters.spark_connect_key import (
    analyzed_plan,
    hadoop_path,
    is_connect,
    plan_digest,
    session_bound,
)
from shardstream.errors import ConfigurationError

EXPLAINED = """== Parsed Logical Plan ==
'Filter ('y > 3)
+- 'Project [('id + 1) AS y#15, 'x]
   +- Relation [id#4L,x#5] parquet

== Analyzed Logical Plan ==
y: bigint, x: double
Filter (y#15L > cast(3 as bigint))
+- Project [(id#4L + cast(1 as bigint)) AS y#15L, x#5]
   +- Relation [id#4L,x#5] parquet

== Optimized Logical Plan ==
Project [(id#4L + 1) AS y#15L, x#5]
+- Relation [id#4L,x#5] parquet

== Physical Plan ==
*(1) Project [(id#4L + 1) AS y#15L, x#5]
"""


def test_the_analyzed_section_alone_without_expression_ids():
    plan = analyzed_plan(EXPLAINED)
    assert plan == (
        "y: bigint, x: double\n"
        "Filter (y#L > cast(3 as bigint))\n"
        "+- Project [(id#L + cast(1 as bigint)) AS y#L, x#]\n"
        "   +- Relation [id#L,x#] parquet"
    )


def test_the_same_query_analysed_again_gives_the_same_text():
    renumbered = EXPLAINED.replace("#15", "#215").replace("#4L", "#91L").replace("#5", "#92")
    assert renumbered != EXPLAINED
    assert analyzed_plan(renumbered) == analyzed_plan(EXPLAINED)


def test_another_query_gives_another_text():
    other = EXPLAINED.replace("cast(3 as bigint)", "cast(4 as bigint)")
    assert analyzed_plan(other) != analyzed_plan(EXPLAINED)


def test_the_last_section_may_end_the_text():
    text = "== Analyzed Logical Plan ==\nid: bigint\nRange (0, 5, step=1, splits=Some(2))"
    assert analyzed_plan(text) == "id: bigint\nRange (0, 5, step=1, splits=Some(2))"


def test_no_analyzed_plan_is_refused():
    with pytest.raises(ConfigurationError, match="Analyzed Logical Plan"):
        analyzed_plan("== Physical Plan ==\nLocalTableScan [a#1]")


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("file:///data/part-0.parquet", "file:///data/part-0.parquet"),
        ("file:///data/a%20b%2050%25/p.parquet", "file:///data/a b 50%/p.parquet"),
        ("s3a://bucket/x%5B1%5D/p.parquet", "s3a://bucket/x\\[1\\]/p.parquet"),
        ("file:///d/%7Ba,b%7D*?.parquet", "file:///d/\\{a,b\\}\\*\\?.parquet"),
        ("file:///d/back%5Cslash.parquet", "file:///d/back\\\\slash.parquet"),
    ],
)
def test_hadoop_paths_are_decoded_and_glob_characters_escaped(url: str, path: str):
    assert hadoop_path(url) == path


def test_only_connect_dataframes_count_as_connect():
    class Classic:
        pass

    Connect = type("DataFrame", (), {"__module__": "pyspark.sql.connect.dataframe"})
    assert is_connect(Connect())
    assert not is_connect(Classic())
    assert not is_connect("pyspark.sql.connect.dataframe")


@pytest.mark.parametrize(
    ("plan", "reason"),
    [
        ("id: bigint\nRange (0, 5, step=1, splits=Some(2))", None),
        ("a: bigint\nLocalRelation [a#L]", "in-memory"),
        ("a: bigint\nProject [a#L]\n+- CachedLocalRelation [a#L]", "in-memory"),
        ("Project [c0#L, c1#L, ... 15 more fields]\n+- Range (0, 5)", "cut short"),
        ("Relation [a#L, ... 1 more field] parquet", "cut short"),
    ],
)
def test_plans_the_text_cannot_identify_are_bound_to_the_session(plan: str, reason: str | None):
    found = session_bound(plan, _IN_MEMORY_LEAVES)
    assert (found is None) if reason is None else (reason in (found or ""))


def read_filtered(literal: str, plan_id: int, line: str) -> Any:
    """A Connect plan: a Parquet read, filtered by ``name = literal``, with ids and call sites."""
    proto = pytest.importorskip("pyspark.sql.connect.proto")
    read = proto.Relation()
    read.common.plan_id = plan_id
    read.read.data_source.format = "parquet"
    read.read.data_source.paths.append("/data/source")
    read.read.data_source.options["mergeSchema"] = "false"
    plan = proto.Plan()
    filtered = plan.root.filter
    filtered.input.CopyFrom(read)
    plan.root.common.plan_id = plan_id + 1
    condition = filtered.condition.unresolved_function
    condition.function_name = "=="
    column = condition.arguments.add()
    column.unresolved_attribute.unparsed_identifier = "name"
    column.unresolved_attribute.plan_id = plan_id
    column.common.origin.python_origin.call_site = line
    condition.arguments.add().literal.string = literal
    return plan


def test_plan_digests_ignore_ids_and_call_sites_but_not_literals():
    base = plan_digest(read_filtered("row#1", 3, "job.py:10"))
    assert plan_digest(read_filtered("row#1", 71, "other.py:99")) == base
    assert plan_digest(read_filtered("row#2", 3, "job.py:10")) != base


def test_plan_digests_see_map_and_list_entries():
    plan = read_filtered("x", 3, "a.py:1")
    other = read_filtered("x", 3, "a.py:1")
    other.root.filter.input.read.data_source.options["mergeSchema"] = "true"
    assert plan_digest(plan) != plan_digest(other)
    other = read_filtered("x", 3, "a.py:1")
    other.root.filter.input.read.data_source.paths.append("/data/more")
    assert plan_digest(plan) != plan_digest(other)
