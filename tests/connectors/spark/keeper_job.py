"""A job for test_keeper.py, run in a keeper: it counts the tasks its process ran, so a test can tell that
tasks from workers that have ended met the same process and its memory."""

from __future__ import annotations

import os
import sys

from connectors.spark._keeper import run_kept

RUN: list[int] = []  # the tasks this process ran


class Job:
    def __init__(self, state: str, fail: bool = False) -> None:
        self.state, self.fail = state, fail

    def run_here(self, task: int, address: str, rows: list) -> bytes:
        if self.fail:
            raise ValueError(f"task {task} cannot run")
        RUN.append(task)
        return f"{os.getpid()} {RUN} {address} {rows}".encode()


if __name__ == "__main__":  # a worker: run one task in the keeper of its executor, print its report
    from tests.connectors.spark.keeper_job import Job as Named  # (the keeper cannot import ``__main__``)

    state, task, fail = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "fail"
    try:
        print(run_kept(Named(state, fail), task, "127.0.0.1:7", [task]).decode())
    except RuntimeError as err:
        print("failed: " + " | ".join(str(err).splitlines()))
