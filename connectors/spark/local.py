"""A Spark session on this machine (``local[n]``, bound to the loopback address, no UI), for the tests and
the benchmark."""

from __future__ import annotations

import os

__all__ = ["local_session"]


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
