"""Which interpreter Spark's Python workers run for shardstream's jobs, and what their failure says.

The rule, applied by :func:`use_worker_python` wherever shardstream is handed (or creates) a
SparkSession, before it builds a job:

1. ``spark.pyspark.python``, when the session's configuration sets it (Spark documents it as
   taking precedence over the variable; a driver started as a plain ``python script.py`` does
   not apply it by itself, so shardstream does);
2. else ``PYSPARK_PYTHON``, when set (Spark already reads it);
3. else, on a local master (``local``, ``local[N]``, ``local-cluster[...]``), the driver's own
   interpreter, ``sys.executable``: the workers run on this machine, and the one interpreter
   known to have shardstream is the one running it. Spark's own default, ``python3`` on the
   ``PATH``, is a different interpreter whenever a venv is not activated;
4. else (a cluster) Spark's own choice: the executors' interpreter is the cluster's.

A Spark Connect session runs its workers on the server, whose interpreter the server chose: it
is left alone. On a local master the chosen interpreter runs on this machine, so it is tried
once per process before the first job (:func:`check_worker_python`): one that cannot import
shardstream, or runs another Python version, is refused in one line before Spark logs a task's
failure. Elsewhere, when the workers cannot import what the job needs (a wrong
``PYSPARK_PYTHON``), :func:`worker_import_error` turns the Spark job's failure, pages of a
worker's and the JVM's traces, into one line that says what to set.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess
import sys
from typing import Any

from shardstream.errors import ConfigurationError

__all__ = ["check_worker_python", "use_worker_python", "worker_import_error", "worker_python"]

logger = logging.getLogger(__name__)

#: The configuration key and the variable a user chooses the workers' interpreter with.
CONF_KEY = "spark.pyspark.python"
ENV_KEY = "PYSPARK_PYTHON"

_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
_VERSION_MISMATCH = re.compile(r"Python in worker has different version[^\n]*")
_CANNOT_START = re.compile(r'Cannot run program "([^"]+)": error=\d+, ([^\n]+)')
# What a worker imports to run shardstream's jobs (the writer's batch function and its codecs).
_WORKER_IMPORT = "import sys; import shardstream.converters.batches; print(sys.version_info[:2])"
_CHECK_TIMEOUT_S = 120.0


def worker_python(master: str, conf_choice: str | None, env: dict[str, str]) -> str | None:
    """The interpreter the rule gives, or ``None`` to leave Spark's own choice (a cluster)."""
    if conf_choice:
        return conf_choice
    if env.get(ENV_KEY):
        return env[ENV_KEY]
    if master.startswith("local"):
        return sys.executable
    return None


def use_worker_python(session: Any) -> None:
    """Make a classic session's Python workers run the interpreter :func:`worker_python` gives.

    Sets the SparkContext's ``pythonExec``, which Spark reads when a job's Python function is
    built; a Spark Connect session (no SparkContext here) is left as it is.
    """
    context = _spark_context(session)
    if context is None or not hasattr(context, "pythonExec"):
        return
    master = str(context.master)
    chosen = worker_python(master, context.getConf().get(CONF_KEY), dict(os.environ))
    if chosen is not None and chosen != context.pythonExec:
        logger.info(
            "Spark's Python workers run %s (%s)", chosen, _reason(chosen, context, os.environ)
        )
        context.pythonExec = chosen
    if master.startswith("local"):
        check_worker_python(str(context.pythonExec))


@functools.cache
def check_worker_python(python: str) -> None:
    """Refuse, in one line, a local worker interpreter that cannot run shardstream's jobs.

    Runs ``python`` once per process and interpreter (a fraction of a second: the imports a
    worker makes), so that a wrong choice is said before any Spark job rather than after a
    task's failure has filled the log.

    Raises:
        ConfigurationError: ``python`` does not start, cannot import shardstream (or what it
            needs), or is another minor version than the driver's.
    """
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return  # not realpath: a venv's python links to an interpreter without the venv's packages
    try:
        done = subprocess.run(  # noqa: S603 - the interpreter the user's settings name
            [python, "-c", _WORKER_IMPORT],
            capture_output=True,
            text=True,
            timeout=_CHECK_TIMEOUT_S,
            check=False,
        )
    except OSError as exc:
        raise _say(python, f"cannot start: {python}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        logger.warning("%s did not import shardstream in %.0f s", python, _CHECK_TIMEOUT_S)
        return  # a slow machine is not a wrong interpreter: the job says more if it is
    if done.returncode != 0:
        missing = _MISSING_MODULE.findall(done.stderr)
        problem = f"cannot import {missing[-1]!r}" if missing else "cannot import shardstream"
        raise _say(python, problem) from None
    version = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    ours = str(tuple(sys.version_info[:2]))
    if version != ours:
        raise _say(python, f"run Python {version}, not the driver's {ours}") from None


def worker_import_error(exc: BaseException, session: Any) -> ConfigurationError | None:
    """One line saying what to set when ``exc`` is a Spark job's worker that could not import.

    ``None`` when ``exc`` is another failure (a bad value, a store error): the caller re-raises
    it as it came.
    """
    problem = _worker_problem(str(exc), type(exc).__name__)
    if problem is None:
        return None
    context = _spark_context(session)
    runs = getattr(context, "pythonExec", None) if context is not None else None
    return _say(runs, problem)


def _say(python: str | None, problem: str) -> ConfigurationError:
    """The one line: which interpreter, what stopped it, and what to set."""
    workers = f"Spark's Python workers ({python})" if python else "Spark's Python workers"
    return ConfigurationError(
        f"{workers} {problem}: set {ENV_KEY} (or {CONF_KEY}) to a Python that has "
        f"shardstream installed, such as this driver's {sys.executable}"
    )


def _worker_problem(text: str, kind: str) -> str | None:
    """What stopped the workers, from the job's error text; ``None`` if it was not that."""
    start = _CANNOT_START.search(text)
    if start is not None and "PythonWorkerFactory" in text:  # the interpreter does not exist
        return f"cannot start: {start.group(1)}: {start.group(2).strip()}"
    if "Python worker" not in text and "PythonException" not in kind:
        return None
    missing = _MISSING_MODULE.findall(text)
    if missing:
        return f"cannot import {missing[-1]!r}"
    mismatch = _VERSION_MISMATCH.search(text)
    return mismatch.group(0).rstrip(".") if mismatch is not None else None


def _spark_context(session: Any) -> Any:
    """The classic SparkContext of a SparkSession or a DataFrame; ``None`` on Spark Connect."""
    session = getattr(session, "sparkSession", session)
    try:
        return session.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect raises its own error for sparkContext
        return None


def _reason(chosen: str, context: Any, env: os._Environ[str]) -> str:
    if context.getConf().get(CONF_KEY):
        return CONF_KEY
    if env.get(ENV_KEY):
        return ENV_KEY
    return f"the driver's interpreter, on master {context.master}"
