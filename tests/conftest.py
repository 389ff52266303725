"""Fixtures every test directory may use."""

from __future__ import annotations

import pytest

from tests.object_store import S3Server


@pytest.fixture(scope="session")
def s3():
    """An S3 API served on loopback for the session (see ``tests.object_store``)."""
    with S3Server() as server:
        yield server
