"""One real local SparkSession for the whole test run, bound to 127.0.0.1.

``local[2,4]``: two worker threads, and a failed task is retried up to 4 times, as on a
cluster (plain ``local[2]`` never retries). Arrow batches are kept small so that a partition
arrives in several batches.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["spark_fixture"]

_ENV = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture(scope="session", name="spark")
def spark_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    saved = {name: os.environ.get(name) for name in _ENV}
    os.environ.update(_ENV)  # read when the JVM and its Python workers start
    from pyspark.sql import SparkSession

    scratch: Path = tmp_path_factory.mktemp("spark-local")
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("shardstream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "16")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", str(scratch))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
