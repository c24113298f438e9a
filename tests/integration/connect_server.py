"""A local Spark Connect server for the tests, in a process of its own.

``python connect_server.py PORT SCRATCH`` starts the Connect server that pyspark ships (its
jar, no network) as ``SparkSession.builder.remote("local[2]")`` does: a local Spark whose
``SparkConnectPlugin`` serves gRPC, here on 127.0.0.1:PORT (``remote("local")`` would take the
fixed default port, which parallel test runs would share). Clients present the token in
``SPARK_CONNECT_AUTHENTICATE_TOKEN``. Prints ``ready`` once the port accepts connections, and
stops when its standard input closes. A process of its own, because a Connect server cannot
start in a process that holds a classic session.
"""

from __future__ import annotations

import socket
import sys
import time


def main() -> None:
    port, scratch = sys.argv[1], sys.argv[2]
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("shardstream-connect-tests")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.sql.artifact.isolation.enabled", "true")
        .config("spark.sql.artifact.isolation.alwaysApplyClassloader", "true")
        .config("spark.connect.grpc.binding.port", port)
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", scratch)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", int(port))) == 0:
                break
        time.sleep(0.2)
    print("ready", flush=True)
    sys.stdin.read()  # until the test run closes it
    spark.stop()


if __name__ == "__main__":
    main()
