"""Collectives among processes over sockets: how shards in several processes step together.

A ``ShardGroup`` whose shards are spread over processes makes two kinds of collective call, in the same order
in every process: ``all_gather`` (a small message from every process: what each shard would run next, the
rounds of a loop) and ``all_to_all`` (the updates exchanged at the end of a stage, one message per
destination process). A micro-batch makes hundreds of them, so each must cost a round trip, not a scheduler's
poll: ``SocketCollective`` connects every process to process 0, which gathers each call's messages and sends
every process what is for it. Connections are authenticated with a key the processes share
(``multiprocessing.connection``); the only thing the host provides is a way to tell every process where
process 0 listens (``publish``, one call when the collective starts: Spark's ``allGather`` in a barrier stage).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener

__all__ = ["SocketCollective"]


class SocketCollective:
    """Process ``index`` of ``count``; ``publish(text)`` gives every process's text (in process order), and is
    how process 0's address reaches the others; ``host`` is the address process 0 listens on."""

    def __init__(
        self,
        index: int,
        count: int,
        publish: Callable[[str], list[str]],
        authkey: bytes,
        host: str = "127.0.0.1",
    ) -> None:
        if not 0 <= index < count:
            raise ValueError(f"process {index} is not one of 0 .. {count - 1}")
        self.index = index
        self.count = count
        self._peers: list[Connection] = []  # process 0: one per other process, in process order
        self._hub: Connection | None = None  # the others: the connection to process 0
        listener = Listener((host, 0), authkey=authkey) if index == 0 and count > 1 else None
        said = publish("" if listener is None else f"{host} {listener.address[1]}")
        if listener is not None:
            try:
                accepted = {}
                for _ in range(count - 1):
                    conn = listener.accept()
                    accepted[pickle.loads(conn.recv_bytes())] = conn
                self._peers = [accepted[q] for q in range(1, count)]
            finally:
                listener.close()
        elif count > 1:
            address, port = said[0].split()
            self._hub = Client((address, int(port)), authkey=authkey)
            self._hub.send_bytes(pickle.dumps(index))

    def all_gather(self, message: bytes) -> list[bytes]:
        if self.count == 1:
            return [message]
        if self._hub is not None:
            self._hub.send_bytes(message)
            return pickle.loads(self._hub.recv_bytes())
        every = [message] + [p.recv_bytes() for p in self._peers]
        reply = pickle.dumps(every)
        for p in self._peers:
            p.send_bytes(reply)
        return every

    def all_to_all(self, outgoing: list[bytes]) -> list[bytes]:
        if self.count == 1:
            return list(outgoing)
        if self._hub is not None:
            self._hub.send_bytes(pickle.dumps(outgoing))
            return pickle.loads(self._hub.recv_bytes())
        sent = [outgoing] + [pickle.loads(p.recv_bytes()) for p in self._peers]
        for q, p in enumerate(self._peers, start=1):
            p.send_bytes(pickle.dumps([s[q] for s in sent]))
        return [s[0] for s in sent]

    def close(self) -> None:
        for conn in [*self._peers, *([self._hub] if self._hub is not None else [])]:
            conn.close()
        self._peers, self._hub = [], None
