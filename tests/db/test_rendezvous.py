"""The rendezvous where the processes of a run learn one another's texts (``ivm.engine.collective``): every
process gets every text in process order; a run that failed is retired, and a process of it that comes late
is refused, so it never meets the processes of the next run; retiring waits for the run's processes to be
gone."""

from __future__ import annotations

import socket
import threading

import pytest

from ivm.engine.collective import Meeting, Rendezvous, SocketCollective


def _join(meet: Rendezvous, token: str, index: int, text: str, out: dict, keep: bool = False) -> Meeting:
    meeting = Meeting(meet.address, meet.authkey, token, index)
    try:
        out[index] = meeting.publish(text)
    except RuntimeError as err:
        out[index] = err
    if not keep:
        meeting.close()
    return meeting


def _arrived(meet: Rendezvous, token: str, count: int) -> None:
    """Wait until ``count`` processes joined run ``token``."""
    with meet._lock:
        assert meet._lock.wait_for(lambda: len(meet._runs[token].texts) >= count, timeout=30)


def _run(meet: Rendezvous, token: str, texts: list[str]) -> dict:
    """Process ``i`` of run ``token`` publishing ``texts[i]``, all at once: what each got."""
    out: dict = {}
    threads = [threading.Thread(target=_join, args=(meet, token, i, t, out)) for i, t in enumerate(texts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


@pytest.fixture
def meet():
    rendezvous = Rendezvous()
    yield rendezvous
    rendezvous.close()


def test_every_process_of_a_run_gets_every_text_in_process_order(meet):
    token = meet.open(3)
    assert _run(meet, token, ["a", "b", "c"]) == {0: ["a", "b", "c"], 1: ["a", "b", "c"], 2: ["a", "b", "c"]}
    assert meet.retire(token, wait=30)
    # a second run of the same processes meets apart from the first
    again = meet.open(2)
    assert _run(meet, again, ["x", "y"]) == {0: ["x", "y"], 1: ["x", "y"]}


def test_a_process_of_a_retired_run_is_refused_and_never_meets_the_next_run(meet):
    failed = meet.open(2)
    out: dict = {}
    waiting = threading.Thread(target=_join, args=(meet, failed, 0, "stale", out))
    waiting.start()  # process 0 of the failed run came; process 1 never will
    _arrived(meet, failed, 1)
    meet.retire(failed)
    waiting.join(30)
    assert isinstance(out[0], RuntimeError) and "retired before all its processes came" in str(out[0])
    assert meet.retire(failed, wait=30)
    late: dict = {}
    _join(meet, failed, 1, "late", late)
    assert isinstance(late[1], RuntimeError) and "retired" in str(late[1])
    nxt = meet.open(2)
    assert _run(meet, nxt, ["p", "q"]) == {0: ["p", "q"], 1: ["p", "q"]}


def test_retiring_waits_for_the_processes_of_the_run_to_be_gone(meet):
    token = meet.open(1)
    out: dict = {}
    meeting = _join(meet, token, 0, "only", out, keep=True)  # still at work
    assert out == {0: ["only"]}
    assert not meet.retire(token, wait=0.2)
    closer = threading.Timer(0.1, meeting.close)
    closer.start()
    assert meet.retire(token, wait=30)
    closer.join()


def test_a_process_twice_in_one_run_is_refused(meet):
    token = meet.open(2)
    first: dict = {}
    t = threading.Thread(target=_join, args=(meet, token, 0, "one", first))
    t.start()
    _arrived(meet, token, 1)
    second: dict = {}
    _join(meet, token, 0, "again", second)
    assert isinstance(second[0], RuntimeError) and "twice" in str(second[0])
    _join(meet, token, 1, "two", {})
    t.join(30)
    assert first == {0: ["one", "two"]}


def test_a_client_without_the_key_is_refused_and_the_rendezvous_goes_on():
    from multiprocessing import AuthenticationError

    meet = Rendezvous()
    try:
        token = meet.open(1)
        with pytest.raises(AuthenticationError):
            Meeting(meet.address, b"not the key", token, 0)
        out: dict = {}
        _join(meet, token, 0, "keyed", out)  # the rendezvous still serves
        assert out == {0: ["keyed"]}
    finally:
        meet.close()


def test_collective_connections_send_at_once():
    """A collective call must not wait on the peer's delayed acknowledgement: Nagle's algorithm is off on
    every connection between processes."""
    said: list[str] = [""] * 3
    barrier = threading.Barrier(3)

    def publisher(i: int):
        def publish(text: str) -> list[str]:
            said[i] = text
            barrier.wait(30)
            return list(said)

        return publish

    made: dict[int, SocketCollective] = {}
    threads = [
        threading.Thread(target=lambda i=i: made.__setitem__(i, SocketCollective(i, 3, publisher(i), b"key")))
        for i in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    conns = [c for made_ in made.values() for c in made_._peers if c is not None]
    assert len(conns) == 6  # a connection between every two processes, seen from both ends
    try:
        for conn in conns:
            sock = socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM)
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            sock.close()
    finally:
        for c in made.values():
            c.close()
