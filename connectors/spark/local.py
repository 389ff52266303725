"""A Spark session on this machine (``local[n]``, bound to the loopback address, no UI), for the tests and
the benchmark."""

from __future__ import annotations

import os
import sys

__all__ = ["local_session", "cluster_session"]


def local_session(app: str = "ivm", cores: int = 2, shuffle_partitions: int = 2, memory: str = "2g"):
    """A ``SparkSession`` running in this process's JVM with ``cores`` threads and ``memory`` of heap (the
    active session if there is one: the JVM's settings are fixed when it starts)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.driver.memory", memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.ansi.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cluster_session(
    app: str = "ivm", executors: int = 2, cores: int = 1, memory_mb: int = 1024, driver_memory: str = "1g"
):
    """A ``SparkSession`` on a cluster of ``executors`` separate executor processes of ``cores`` cores and
    ``memory_mb`` of heap each, started by Spark's own launcher on this machine (``local-cluster``), loopback
    only, no UI; their Python workers run this interpreter and import this project."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = root if not path else f"{root}{os.pathsep}{path}"
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local-cluster[{executors},{cores},{memory_mb}]")
        .appName(app)
        .config("spark.driver.memory", driver_memory)
        .config("spark.executor.memory", f"{memory_mb}m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.executorEnv.SPARK_LOCAL_IP", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(executors * cores))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.ansi.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
