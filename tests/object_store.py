"""An S3 API on loopback (moto's server) for tests of databases and outputs on an object store."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

import pyarrow.fs as pafs

BUCKET = "ivm-test"


class S3Server:
    """moto's S3 server on a free loopback port, with the environment pointing pyarrow (and child processes)
    at it and one bucket made; ``uri()`` is a new, empty place in that bucket."""

    def __enter__(self) -> S3Server:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.05)
        self.env = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }
        self._saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        fs = pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{self.port}", scheme="http", allow_bucket_creation=True
        )
        fs.create_dir(BUCKET)
        self.fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http")
        return self

    def uri(self) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"

    def __exit__(self, *exc) -> None:
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.proc.terminate()
        self.proc.wait(timeout=30)
