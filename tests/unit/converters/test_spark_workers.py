"""Which interpreter Spark's Python workers run, and the one line a worker's failure becomes.

The rule on its inputs (a master, the session's configuration, the environment); the
translation on pyspark's own exception class. ``tests/test_docs.py`` runs both in real Spark
jobs (the quickstart as pasted, and a worker on a Python without shardstream).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shardstream.converters.spark_workers import (
    check_worker_python,
    worker_import_error,
    worker_python,
)
from shardstream.errors import ConfigurationError

pytest.importorskip("pyspark")
from pyspark.errors import PythonException


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local-cluster[2,1,1024]"])
def test_a_local_master_runs_the_driver_interpreter_when_nobody_chose(master: str) -> None:
    assert worker_python(master, None, {}) == sys.executable
    assert worker_python(master, "", {"PYSPARK_PYTHON": ""}) == sys.executable


def test_the_users_choice_wins_and_the_configuration_before_the_variable() -> None:
    assert worker_python("local[2]", None, {"PYSPARK_PYTHON": "/opt/py"}) == "/opt/py"
    assert worker_python("local[2]", "/conf/py", {"PYSPARK_PYTHON": "/opt/py"}) == "/conf/py"
    assert worker_python("yarn", "/conf/py", {}) == "/conf/py"


@pytest.mark.parametrize("master", ["yarn", "spark://host:7077", "k8s://https://h", "sc://h"])
def test_a_cluster_keeps_its_own_interpreter(master: str) -> None:
    assert worker_python(master, None, {}) is None
    assert worker_python(master, None, {"PYSPARK_PYTHON": "/opt/py"}) == "/opt/py"


WORKER_TRACE = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/venv/src/shardstream/__init__.py", line 16, in <module>
    from shardstream.dataset import LocalDataset
ModuleNotFoundError: No module named 'msgspec'
"""


def test_a_worker_that_cannot_import_becomes_one_line_that_says_what_to_set() -> None:
    error = worker_import_error(PythonException(WORKER_TRACE), session=None)
    assert isinstance(error, ConfigurationError)
    message = str(error)
    assert "\n" not in message
    assert message.startswith("Spark's Python workers cannot import 'msgspec': set PYSPARK_PYTHON")
    assert "spark.pyspark.python" in message
    assert message.endswith(sys.executable)


def test_a_worker_on_another_python_version_says_so() -> None:
    trace = (
        "[PYTHON_VERSION_MISMATCH] Python in worker has different version (3, 10) than that in "
        "driver 3.11, PySpark cannot run with different minor versions.\n"
    )
    message = str(worker_import_error(PythonException(trace), session=None))
    assert "Python in worker has different version (3, 10) than that in driver 3.11" in message
    assert "set PYSPARK_PYTHON" in message


def test_a_worker_interpreter_that_does_not_exist_says_so() -> None:
    # The text of a Py4JJavaError that Spark 4.3 raised with PYSPARK_PYTHON=/nonexistent/python.
    trace = (
        "An error occurred while calling o85.collectToPython.\n: org.apache.spark.SparkException:"
        " Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times, most recent "
        "failure: Lost task 0.0 in stage 0.0 (TID 0) (localhost executor driver): "
        'java.io.IOException: Cannot run program "/nonexistent/python": error=2, No such file '
        "or directory\n\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)\n"
        "\tat org.apache.spark.api.python.PythonWorkerFactory.startDaemon(PythonWorkerFactory"
        ".scala:371)\n"
    )
    message = str(worker_import_error(RuntimeError(trace), session=None))
    assert message.startswith(
        "Spark's Python workers cannot start: /nonexistent/python: No such file or directory: "
        "set PYSPARK_PYTHON"
    )


@pytest.mark.parametrize(
    "error",
    [
        PythonException("An exception was thrown from the Python worker:\nValueError: bad row"),
        RuntimeError("ModuleNotFoundError: No module named 'x' (not a Spark job's failure)"),
        ValueError("a bad argument"),
    ],
)
def test_other_failures_are_left_as_they_came(error: Exception) -> None:
    assert worker_import_error(error, session=None) is None


def test_the_drivers_own_interpreter_is_not_run_again() -> None:
    check_worker_python.cache_clear()
    check_worker_python(sys.executable)  # no subprocess: it is this very interpreter
    assert check_worker_python.cache_info().currsize == 1


def test_an_interpreter_without_shardstream_is_refused_before_any_job(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    with pytest.raises(ConfigurationError) as caught:
        check_worker_python(python)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"Spark's Python workers ({python}) cannot import '")
    assert message.endswith(f"such as this driver's {sys.executable}")
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_an_interpreter_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    python = str(tmp_path / "no-such-python")
    with pytest.raises(ConfigurationError, match=r"cannot start: .*no-such-python"):
        check_worker_python(python)


def test_an_interpreter_of_another_minor_version_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "python-other"  # answers as a Python of another version would
    fake.write_text("#!/bin/sh\necho '(3, 2)'\n")
    fake.chmod(0o755)
    with pytest.raises(ConfigurationError, match=r"run Python \(3, 2\), not the driver's"):
        check_worker_python(str(fake))


def test_a_good_interpreter_passes_and_is_tried_once(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    ours = str(tuple(sys.version_info[:2]))
    fake = tmp_path / "python-good"  # counts its runs, then answers as this Python would
    fake.write_text(f"#!/bin/sh\necho run >> {calls}\necho '{ours}'\n")
    fake.chmod(0o755)
    check_worker_python(str(fake))
    check_worker_python(str(fake))
    assert calls.read_text().splitlines() == ["run"]
