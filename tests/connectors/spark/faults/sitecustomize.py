"""A fault for test_distributed.py, loaded by the executors' Python processes (this directory is on their
path): with IVM_FAULT_MARKER set, the first process to start applying micro-batch IVM_FAULT_BATCH in a barrier
stage (an executor's keeper of the shards) kills itself (SIGKILL), once: the marker file says it happened."""

import os

if os.environ.get("IVM_FAULT_MARKER"):
    import signal

    import connectors.spark.distributed as distributed

    _apply = distributed._Job._apply

    def _apply_or_die(self, db, batch_id, *args, **kwargs):
        if batch_id == self.batch_id == int(os.environ["IVM_FAULT_BATCH"]):
            try:
                os.close(os.open(os.environ["IVM_FAULT_MARKER"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return _apply(self, db, batch_id, *args, **kwargs)

    distributed._Job._apply = _apply_or_die
