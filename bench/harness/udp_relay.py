"""A lossy UDP relay on loopback between two WebRTC peers: delay with jitter, reordering and loss, per direction.

The kernel's ``netem`` is not available on these machines, so the impaired network is this asyncio proxy. Each
datagram is held for ``delay_ms`` plus a uniform jitter in ``[-jitter_ms, +jitter_ms]``, drawn independently per
datagram, so datagrams sent closer together than the jitter's spread overtake each other (reordering), and a
``loss`` fraction is dropped. One seeded ``random.Random`` per direction makes a run repeatable.

**How a call is routed through it.** The relay has two sockets: one the client talks to (``client_facing``) and
one the server talks to (``server_facing``). The client rewrites both descriptions before handing them on:

- its offer (:meth:`UdpRelay.route_offer`): its one IPv4 host candidate becomes ``server_facing`` (the relay
  remembers the real one), every other candidate is dropped;
- the server's answer (:meth:`UdpRelay.route_answer`): the server's IPv4 host candidate becomes ``client_facing``
  (the relay forwards to the real one), every other candidate is dropped.

Each side then knows only the relay's addresses, so every connectivity check, and so the nominated pair, goes
through it: rewriting the answer alone is not enough, because the server would check the client's real host
candidate directly, the client would learn the server's real address from that check as a peer-reflexive
candidate (aioice does, RFC 8445 7.3.1.3) and its aggressive nomination could pick that direct, unimpaired pair.
Datagrams from the client go to the server's real candidate; datagrams from the server go back to whoever last
sent from the client side (at first, the client's real candidate from the offer).

**STUN and the DTLS handshake are delayed but exempt from loss by default** (``lose_handshakes``). The figures
measured through the relay are about media and events once a call is up; a lost connectivity check costs aioice a
500 ms retransmission and a lost DTLS handshake record costs OpenSSL a 1 s timer (doubling), so with 5 % loss
about a third of the calls would start seconds late, at random, which slows the tests and measures nothing they
ask. The SRTP media, RTCP and the data channel's SCTP packets (DTLS application data) are all subject to loss.
Set ``lose_handshakes=True`` to lose those too (call setup then still completes, later).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

Address = tuple[str, int]

MAX_IN_FLIGHT = 20_000
"""Datagrams held at once per direction (seconds of a few calls' media); beyond it a datagram is dropped."""

_CANDIDATE = re.compile(r"^a=candidate:(\S+) (\d+) (\S+) (\d+) (\S+) (\d+) typ (\S+)(.*)$")


@dataclass(frozen=True)
class Impairment:
    """What one direction does to the datagrams it carries."""

    delay_ms: float = 80.0
    jitter_ms: float = 30.0
    """Each datagram's delay is ``delay_ms`` plus a uniform draw in ``[-jitter_ms, +jitter_ms]``."""
    loss: float = 0.05
    """The fraction of (lossable) datagrams dropped."""
    lose_handshakes: bool = False
    """Whether STUN and DTLS handshake records may be dropped too (see the module's docstring)."""


CLEAN = Impairment(delay_ms=0.0, jitter_ms=0.0, loss=0.0)
"""A relay that only forwards (the clean run beside a lossy one, same route)."""


def is_handshake(datagram: bytes) -> bool:
    """A STUN message (first byte 0-3, RFC 7983) or a DTLS record that is not application data (change cipher
    spec 20, alert 21, handshake 22): the packets that set a call up."""
    return bool(datagram) and (datagram[0] <= 3 or datagram[0] in (20, 21, 22))


@dataclass
class LaneCounters:
    """What one direction did."""

    received: int = 0
    forwarded: int = 0
    dropped: int = 0
    reordered: int = 0
    """Datagrams delivered after one that arrived later than they did."""
    spared: int = 0
    """Handshake datagrams the loss draw would have dropped, forwarded because they are exempt."""
    delays_ms: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    """The planned delay of the most recent forwarded datagrams."""


class Lane:
    """One direction of the relay: plans each datagram's fate with its own seeded RNG and delivers it late."""

    def __init__(self, impairment: Impairment, seed: int) -> None:
        self.impairment = impairment
        self.counters = LaneCounters()
        self._rng = random.Random(seed)
        self._arrivals = 0
        self._newest_delivered = -1
        self._in_flight = 0

    def plan(self, datagram: bytes) -> float | None:
        """This datagram's delay in seconds, or None to drop it (counted either way)."""
        self.counters.received += 1
        spec = self.impairment
        lost = self._rng.random() < spec.loss
        delay_ms = max(0.0, spec.delay_ms + self._rng.uniform(-spec.jitter_ms, spec.jitter_ms))
        if lost and is_handshake(datagram) and not spec.lose_handshakes:
            self.counters.spared += 1
            lost = False
        if lost or self._in_flight >= MAX_IN_FLIGHT:
            self.counters.dropped += 1
            return None
        self.counters.delays_ms.append(delay_ms)
        return delay_ms / 1000.0

    def admit(self, datagram: bytes, deliver: Callable[[bytes], None]) -> None:
        """Drop ``datagram`` or call ``deliver(datagram)`` after its planned delay."""
        delay_s = self.plan(datagram)
        if delay_s is None:
            return
        arrival = self._arrivals
        self._arrivals += 1
        self._in_flight += 1
        asyncio.get_running_loop().call_later(delay_s, self._deliver, arrival, datagram, deliver)

    def _deliver(self, arrival: int, datagram: bytes, deliver: Callable[[bytes], None]) -> None:
        self._in_flight -= 1
        if arrival < self._newest_delivered:
            self.counters.reordered += 1
        self._newest_delivered = max(self._newest_delivered, arrival)
        self.counters.forwarded += 1
        with contextlib.suppress(OSError):  # a peer that went away: the datagram is lost, as on a network
            deliver(datagram)


class _Socket(asyncio.DatagramProtocol):
    """One of the relay's two sockets: hands what it receives to the relay with the sender's address."""

    def __init__(self, on_datagram: Callable[[bytes, Address], None]) -> None:
        self.on_datagram = on_datagram
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # the selector's class is not a subclass

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.on_datagram(data, (str(addr[0]), int(addr[1])))


class UdpRelay:
    """A lossy relay between a WebRTC client and server on loopback (see the module's docstring)."""

    def __init__(self, to_server: Impairment = Impairment(), to_client: Impairment | None = None, *,
                 seed: int = 0, host: str = "127.0.0.1") -> None:
        self.to_server = Lane(to_server, seed)
        self.to_client = Lane(to_client if to_client is not None else to_server, seed + 1)
        self.host = host
        self.server: Address | None = None
        """The server's real candidate (from its answer)."""
        self.client: Address | None = None
        """Whoever last sent from the client side (at first, the client's real candidate from its offer)."""
        self._client_socket = _Socket(self._from_client)
        self._server_socket = _Socket(self._from_server)
        self.started_at = 0.0

    async def start(self) -> UdpRelay:
        """Bind both sockets on ``host`` (free ports)."""
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self._client_socket, local_addr=(self.host, 0))
        await loop.create_datagram_endpoint(lambda: self._server_socket, local_addr=(self.host, 0))
        self.started_at = time.monotonic()
        return self

    def close(self) -> None:
        """Close both sockets; datagrams still in flight are lost."""
        for socket in (self._client_socket, self._server_socket):
            if socket.transport is not None:
                socket.transport.close()

    async def __aenter__(self) -> UdpRelay:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        self.close()

    @property
    def client_facing(self) -> Address:
        """The address the client sends to (the server's candidate in the rewritten answer)."""
        return _bound(self._client_socket)

    @property
    def server_facing(self) -> Address:
        """The address the server sends to (the client's candidate in the rewritten offer)."""
        return _bound(self._server_socket)

    def route_offer(self, sdp: str) -> str:
        """The client's offer with its IPv4 host candidate replaced by ``server_facing`` (the real one is where
        the server's datagrams go until the client sends), every other candidate dropped."""
        rewritten, self.client = reroute_candidates(sdp, self.server_facing)
        return rewritten

    def route_answer(self, sdp: str) -> str:
        """The server's answer with its IPv4 host candidate replaced by ``client_facing`` (the real one is where
        the client's datagrams go), every other candidate dropped."""
        rewritten, self.server = reroute_candidates(sdp, self.client_facing)
        return rewritten

    def _from_client(self, data: bytes, sender: Address) -> None:
        self.client = sender
        if self.server is not None and self._server_socket.transport is not None:
            server, transport = self.server, self._server_socket.transport
            self.to_server.admit(data, lambda datagram: _send(transport, datagram, server))

    def _from_server(self, data: bytes, sender: Address) -> None:
        if self.client is not None and self._client_socket.transport is not None:
            client, transport = self.client, self._client_socket.transport
            self.to_client.admit(data, lambda datagram: _send(transport, datagram, client))

    def summary(self) -> str:
        """The counters of both directions, one line."""
        def lane(name: str, counters: LaneCounters) -> str:
            return (f"{name}: {counters.forwarded} forwarded, {counters.dropped} dropped, {counters.reordered} "
                    f"reordered, {counters.spared} handshake packets spared")
        return f"{lane('to server', self.to_server.counters)}; {lane('to client', self.to_client.counters)}"


def _send(transport: asyncio.DatagramTransport, datagram: bytes, to: Address) -> None:
    """Send unless the relay was closed while the datagram was in flight (then it is lost)."""
    if not transport.is_closing():
        transport.sendto(datagram, to)


def _bound(socket: _Socket) -> Address:
    assert socket.transport is not None, "start() the relay first"
    host, port = socket.transport.get_extra_info("sockname")[:2]
    return str(host), int(port)


def reroute_candidates(sdp: str, relay: Address) -> tuple[str, Address]:
    """``sdp`` with its first IPv4 UDP host candidate's address replaced by ``relay`` (in every media section, for
    a bundled description lists it in each) and every other candidate line dropped; and the original address.

    Raises ValueError when the description has no IPv4 UDP host candidate.
    """
    chosen: Address | None = None
    lines = []
    for line in sdp.splitlines():
        match = _CANDIDATE.match(line)
        if match is None:
            lines.append(line)
            continue
        foundation, component, transport, priority, host, port, kind, rest = match.groups()
        address = (host, int(port))
        usable = transport.lower() == "udp" and kind == "host" and ":" not in host
        if chosen is None and usable:
            chosen = address
        if address == chosen:
            lines.append(f"a=candidate:{foundation} {component} {transport} {priority} {relay[0]} {relay[1]} "
                         f"typ {kind}{rest}")
    if chosen is None:
        raise ValueError("the description has no IPv4 UDP host candidate to route through the relay")
    return "\r\n".join(lines) + "\r\n", chosen
