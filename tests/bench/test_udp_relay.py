"""The lossy UDP relay: its delay, jitter, loss and reordering per direction, the SDP rewrite that routes a call
through it, and two plain aiortc peers holding a call through it."""

from __future__ import annotations

import asyncio
import statistics
import struct
import time
from typing import cast

import pytest

from bench.harness.udp_relay import Impairment, Lane, UdpRelay, is_handshake, reroute_candidates

RTP = b"\x80\x6f" + bytes(100)
STUN = b"\x00\x01" + bytes(18)
DTLS_HANDSHAKE = b"\x16\xfe\xfd" + bytes(20)
DTLS_DATA = b"\x17\xfe\xfd" + bytes(20)


def test_delay_is_80_ms_with_a_uniform_30_ms_jitter() -> None:
    lane = Lane(Impairment(), seed=7)
    delays = [1000 * d for _ in range(20_000) if (d := lane.plan(RTP)) is not None]
    assert 50.0 <= min(delays) < 51.0 and 109.0 < max(delays) <= 110.0
    assert statistics.fmean(delays) == pytest.approx(80.0, abs=0.5)
    assert statistics.pstdev(delays) == pytest.approx(30.0 / 3**0.5, abs=0.5)  # uniform, not a bell
    quartiles = statistics.quantiles(delays, n=4)
    assert quartiles == pytest.approx([65.0, 80.0, 95.0], abs=1.0)


def test_five_percent_of_media_is_dropped_and_counted() -> None:
    lane = Lane(Impairment(), seed=3)
    fates = [lane.plan(RTP) for _ in range(20_000)]
    dropped = sum(fate is None for fate in fates)
    assert 0.045 <= dropped / 20_000 <= 0.055
    assert lane.counters.dropped == dropped and lane.counters.received == 20_000


def test_the_seed_decides_the_fates() -> None:
    def fates(seed: int) -> list[float | None]:
        lane = Lane(Impairment(), seed)
        return [lane.plan(RTP) for _ in range(500)]

    assert fates(11) == fates(11)
    assert fates(11) != fates(12)


def test_call_setup_packets_are_spared_the_loss_unless_asked() -> None:
    assert is_handshake(STUN) and is_handshake(DTLS_HANDSHAKE) and is_handshake(b"\x14\xfe\xfd")
    assert not is_handshake(DTLS_DATA) and not is_handshake(RTP) and not is_handshake(b"")
    spared = Lane(Impairment(loss=0.5), seed=1)
    assert all(spared.plan(packet) is not None for packet in (STUN, DTLS_HANDSHAKE) * 200)
    assert 150 <= spared.counters.spared <= 250
    assert sum(spared.plan(DTLS_DATA) is None for _ in range(400)) >= 150  # the data channel's packets are lost
    lossy = Lane(Impairment(loss=0.5, lose_handshakes=True), seed=1)
    assert sum(lossy.plan(STUN) is None for _ in range(400)) >= 150


OFFER = (
    "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n"
    "m=audio 5000 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 192.0.2.9\r\na=mid:0\r\n"
    "a=candidate:a 1 udp 2130706431 192.0.2.9 5000 typ host\r\n"
    "a=candidate:b 1 udp 2130706431 fd00::9 5001 typ host\r\n"
    "a=candidate:c 1 udp 1694498815 198.51.100.1 6000 typ srflx raddr 192.0.2.9 rport 5000\r\n"
    "a=end-of-candidates\r\n"
    "m=application 5000 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:1\r\n"
    "a=candidate:a 1 udp 2130706431 192.0.2.9 5000 typ host\r\n"
    "a=candidate:b 1 udp 2130706431 fd00::9 5001 typ host\r\n"
)


def test_the_rewrite_leaves_one_candidate_pointing_at_the_relay_in_every_section() -> None:
    rewritten, original = reroute_candidates(OFFER, ("127.0.0.1", 40000))
    assert original == ("192.0.2.9", 5000)
    candidates = [line for line in rewritten.splitlines() if line.startswith("a=candidate:")]
    assert candidates == ["a=candidate:a 1 udp 2130706431 127.0.0.1 40000 typ host"] * 2
    assert "a=end-of-candidates" in rewritten and "m=application" in rewritten
    with pytest.raises(ValueError, match="no IPv4 UDP host candidate"):
        reroute_candidates(OFFER.replace("typ host", "typ relay"), ("127.0.0.1", 1))


class _Peer(asyncio.DatagramProtocol):
    """A plain UDP endpoint that logs (sequence number, one-way delay ms) of what it receives."""

    def __init__(self) -> None:
        self.received: list[tuple[int, float]] = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # the selector's class is not a subclass

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        sequence, sent = struct.unpack("!Id", data[2:14])
        self.received.append((sequence, 1000 * (time.monotonic() - sent)))


async def _peer() -> tuple[_Peer, tuple[str, int]]:
    peer = _Peer()
    await asyncio.get_running_loop().create_datagram_endpoint(lambda: peer, local_addr=("127.0.0.1", 0))
    assert peer.transport is not None
    host, port = peer.transport.get_extra_info("sockname")[:2]
    return peer, (host, port)


def _inversions(sequences: list[int]) -> int:
    newest, count = -1, 0
    for sequence in sequences:
        count += sequence < newest
        newest = max(newest, sequence)
    return count


async def test_both_directions_are_delayed_reordered_and_thinned_through_the_sockets() -> None:
    client, client_at = await _peer()
    server, server_at = await _peer()
    async with UdpRelay(Impairment(loss=0.1), seed=5) as relay:
        relay.route_offer(OFFER.replace("192.0.2.9 5000", f"{client_at[0]} {client_at[1]}"))
        relay.route_answer(OFFER.replace("192.0.2.9 5000", f"{server_at[0]} {server_at[1]}"))
        assert (relay.client, relay.server) == (client_at, server_at)
        assert client.transport is not None and server.transport is not None
        for sequence in range(300):  # 2 ms apart: a 60 ms jitter spread reorders them
            stamp = struct.pack("!Id", sequence, time.monotonic())
            client.transport.sendto(b"\x80\x00" + stamp, relay.client_facing)
            server.transport.sendto(b"\x80\x00" + stamp, relay.server_facing)
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.3)
        for peer, lane in ((server, relay.to_server), (client, relay.to_client)):
            counters = lane.counters
            assert counters.received == 300 and counters.forwarded + counters.dropped == 300
            assert len(peer.received) == counters.forwarded and 10 <= counters.dropped <= 50
            delays = [delay for _sequence, delay in peer.received]
            assert min(delays) >= 49.0 and max(delays) <= 250.0  # 110 ms at most, plus a loaded machine's lateness
            assert statistics.median(delays) == pytest.approx(80.0, abs=20.0)
            inversions = _inversions([sequence for sequence, _delay in peer.received])
            assert counters.reordered == inversions and inversions >= 30
        assert "dropped" in relay.summary()


async def test_two_aiortc_peers_hold_a_call_through_the_relay_alone() -> None:
    from aiortc import RTCPeerConnection, RTCSessionDescription
    from aiortc.mediastreams import AudioStreamTrack, MediaStreamError, MediaStreamTrack

    client, server = RTCPeerConnection(), RTCPeerConnection()
    frames = {"client": 0, "server": 0}
    echoes: list[str] = []

    async def count(track: MediaStreamTrack, who: str) -> None:
        try:
            while True:
                await track.recv()
                frames[who] += 1
        except MediaStreamError:
            return

    @server.on("datachannel")
    def _channel(channel: object) -> None:
        channel.on("message", lambda message: channel.send(f"echo {message}"))  # type: ignore[attr-defined]

    server.on("track", lambda track: asyncio.ensure_future(count(track, "server")))
    client.on("track", lambda track: asyncio.ensure_future(count(track, "client")))
    channel = client.createDataChannel("oai-events")
    channel.on("message", echoes.append)
    client.addTrack(AudioStreamTrack())
    async with UdpRelay(seed=2) as relay:
        try:
            await client.setLocalDescription(await client.createOffer())
            offer = relay.route_offer(client.localDescription.sdp)
            await server.setRemoteDescription(RTCSessionDescription(offer, "offer"))
            server.addTrack(AudioStreamTrack())
            await server.setLocalDescription(await server.createAnswer())
            answer = relay.route_answer(server.localDescription.sdp)
            await client.setRemoteDescription(RTCSessionDescription(answer, "answer"))
            await _wait_for(lambda: channel.readyState == "open", 15.0)
            for index in range(40):
                channel.send(f"event {index}")
                await asyncio.sleep(0.02)
            await _wait_for(lambda: len(echoes) == 40 and min(frames.values()) >= 50, 15.0)
            assert _nominated_remote(client) == relay.client_facing  # each side reaches only the relay
            assert _nominated_remote(server) == relay.server_facing
        finally:
            await client.close()
            await server.close()
    assert echoes == [f"echo event {index}" for index in range(40)]  # SCTP redelivers what the relay dropped
    to_server, to_client = relay.to_server.counters, relay.to_client.counters
    assert to_server.forwarded >= 50 and to_client.forwarded >= 50
    assert to_server.dropped + to_client.dropped > 0 and to_server.reordered + to_client.reordered > 0


def _nominated_remote(peer: object) -> tuple[str, int]:
    ice = peer.getTransceivers()[0].sender.transport.transport  # type: ignore[attr-defined]
    pair = ice._connection._nominated[1]  # aioice's nominated pair of component 1
    return (str(pair.remote_addr[0]), int(pair.remote_addr[1]))


async def _wait_for(condition: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.02)
