import pytest


@pytest.fixture(scope="session")
def spark():
    from connectors.spark.local import local_session

    session = local_session("ivm-tests")
    yield session
    session.stop()
