"""One call as ``bench.latency.webrtc`` sees it, whatever carries it: a real-time microphone, the server's events
and the agent's audio, each with its arrival time, so both transports are measured by the same code.

- :class:`WebSocketLink`: ``/v1/realtime``, appends of 20 ms pcm16, the audio as ``response.output_audio.delta``;
- :class:`WebRtcLink`: ``/v1/realtime/calls`` through ``bench/harness/webrtc_peer.py`` (Opus both ways, the events
  on the ``oai-events`` data channel), optionally through the lossy relay (``bench/harness/udp_relay.py``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from bargein.server.webrtc.opus import FecDecoder, load_libopus
from bench.harness.realtime_harness import CHUNK_SAMPLES, WIRE_RATE, Microphone

AudioFrame = tuple[float, int, float]
"""(arrival, peak |sample| as int16, ms of audio) of each piece of agent audio, in arrival order."""


@dataclass
class Received:
    """What came back on a call, with monotonic arrival times."""

    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    audio: list[AudioFrame] = field(default_factory=list)
    packets: list[AudioFrame] | None = None
    """Over WebRTC, the reply's RTP packets as they reached the client, before its jitter buffer, each with the peak
    of its own audio (the packet decoded on arrival by a libopus decoder of the benchmark's); None over the
    WebSocket, where the audio is the packet. (A packet's size no longer tells: with in-band FEC on, libopus codes
    20 ms of silence into about 30 bytes.)"""

    @property
    def wire(self) -> list[AudioFrame]:
        """The audio as it came off the network: the RTP packets where there are any, else the frames."""
        return self.audio if self.packets is None else self.packets

    def events_of(self, kind: str, after: float = 0.0) -> list[tuple[float, dict[str, Any]]]:
        """The events of type ``kind`` that arrived after ``after``."""
        return [(at, event) for at, event in self.events if event.get("type") == kind and at > after]

    async def wait_event(self, kind: str, after: float = 0.0, timeout_s: float = 10.0,
                         where: Any = None) -> tuple[float, dict[str, Any]]:
        """The first event of type ``kind`` after ``after`` (and matching ``where(event)``); TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while True:
            for at, event in self.events_of(kind, after):
                if where is None or where(event):
                    return at, event
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {kind} within {timeout_s:g} s")
            await asyncio.sleep(0.01)


class Link(Protocol):
    """One call: a microphone streaming in real time, what came back, and a way to send an event."""

    mic: Microphone
    received: Received

    async def send(self, event: dict[str, Any]) -> None:
        """Send a client event."""
        ...

    async def close(self) -> None:
        """Hang up."""
        ...


def pcm_frames(pcm16: bytes, arrival: float, rate: int = 24_000, frame_ms: float = 20.0) -> list[AudioFrame]:
    """``pcm16`` cut into ``frame_ms`` frames, each with its peak, all arriving at ``arrival``."""
    samples = np.abs(np.frombuffer(pcm16[:len(pcm16) // 2 * 2], dtype="<i2").astype(np.int32))
    step = int(rate * frame_ms / 1000)
    return [(arrival, int(samples[i:i + step].max(initial=0)), 1000 * len(samples[i:i + step]) / rate)
            for i in range(0, len(samples), step)]


class WebSocketLink:
    """A Realtime WebSocket session (``websockets``), pcm16 24 kHz both ways."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.received = Received()
        self.mic = Microphone(self._append)
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self.mic.run())]

    @classmethod
    async def open(cls, host_port: str) -> WebSocketLink:
        """Connect with the bargein events on and start streaming silence."""
        from websockets.asyncio.client import connect

        ws = await connect(f"ws://{host_port}/v1/realtime?model=bench&bargein_events=1", max_size=None)
        return cls(ws)

    async def _append(self, chunk: bytes) -> None:
        assert len(chunk) == 2 * CHUNK_SAMPLES
        await self.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                       "audio": base64.b64encode(chunk).decode()}))

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self.ws:
                at = time.monotonic()
                event = json.loads(raw)
                if event.get("type") == "response.output_audio.delta":
                    self.received.audio.extend(pcm_frames(base64.b64decode(event["delta"]), at))
                    event = {"type": event["type"], "response_id": event.get("response_id")}
                self.received.events.append((at, event))

    async def send(self, event: dict[str, Any]) -> None:
        """Send a client event."""
        await self.ws.send(json.dumps(event))

    async def close(self) -> None:
        """Stop the microphone and close the socket."""
        self.mic.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()


class PeerMicrophone:
    """The :class:`~bench.harness.realtime_harness.Microphone` interface over the WebRTC peer's microphone track:
    each clip played gets a range of stream positions of its own, and a position's send time is the clip's first
    sample's plus its offset at the real-time pace the track keeps."""

    CLIP_SPAN = 1 << 32

    def __init__(self, peer: Any, rate: int) -> None:
        self.peer = peer
        self.rate = rate
        self._started: list[asyncio.Future[float]] = []

    def play(self, pcm: bytes) -> int:
        """Queue a clip; returns its first position."""
        self._started.append(self.peer.say(pcm))
        return (len(self._started) - 1) * self.CLIP_SPAN

    async def wait_sent(self, sample: int) -> float:
        """When position ``sample`` was (or will be) sent."""
        clip, offset = divmod(sample, self.CLIP_SPAN)
        started = await asyncio.wait_for(asyncio.shield(self._started[clip]), 30.0)  # a dead call sends nothing
        await asyncio.sleep(max(0.0, started + offset / self.rate - time.monotonic()))
        return started + offset / self.rate

    def rtp_position(self, sample: int) -> int | None:
        """Position ``sample`` as the 48 kHz RTP timestamp (from the call's first packet) it was sent at, once its
        clip has begun (None before)."""
        clip, offset = divmod(sample, self.CLIP_SPAN)
        starts = self.peer.microphone.starts
        return starts[clip][1] + offset * 48_000 // self.rate if clip < len(starts) else None

    def stop(self) -> None:
        """Nothing to stop: the track ends with the call."""


class WebRtcLink:
    """A call over ``/v1/realtime/calls`` (``bench/harness/webrtc_peer.py``), optionally through the lossy relay."""

    def __init__(self, peer: Any, relay: Any = None) -> None:
        self.peer = peer
        self.relay = relay
        self.received = Received(events=peer.events, packets=[])  # the peer appends to this very events list
        self.mic: Any = PeerMicrophone(peer, WIRE_RATE)
        self._converted = 0
        self._converter = asyncio.create_task(self._convert())
        self._log_packets(peer.pc.getReceivers()[0])

    def _log_packets(self, receiver: Any) -> None:
        """Log every RTP packet of the reply track as it reaches aiortc's receiver (private: ``_handle_rtp_packet``
        is where the DTLS transport hands it over), before the jitter buffer holds it back, with its decoded peak."""
        handle = receiver._handle_rtp_packet
        packets = self.received.packets
        assert packets is not None
        lib = load_libopus()
        assert lib is not None, "the benchmark decodes the reply's packets with libopus"
        decoder = FecDecoder(lib)

        async def logged(packet: Any, arrival_time_ms: int) -> None:
            at = time.monotonic()
            samples = decoder.decode(bytes(packet.payload)) if packet.payload else None
            peak = 0 if samples is None else int(np.abs(samples.astype(np.int32)).max(initial=0))
            packets.append((at, peak, 1000.0 * (len(samples) if samples is not None else 960) / 48_000))
            await handle(packet, arrival_time_ms)

        receiver._handle_rtp_packet = logged

    @classmethod
    async def open(cls, host_port: str, relay: Any = None, seed: int = 0) -> WebRtcLink:
        """Connect (through a relay with ``relay``'s impairment, when given) with the bargein events on."""
        from bench.harness.udp_relay import UdpRelay
        from bench.harness.webrtc_peer import WebRtcPeer

        route = await UdpRelay(relay, seed=seed).start() if relay is not None else None
        peer = WebRtcPeer(f"http://{host_port}", own_events=True, model="bench", relay=route)
        await peer.__aenter__()
        return cls(peer, route)

    @property
    def relay_summary(self) -> str:
        """The relay's counters (or that there was none)."""
        return self.relay.summary() if self.relay is not None else "no relay"

    async def _convert(self) -> None:
        """Keep :attr:`received`'s audio frames up to date with the peer's decoded frames."""
        while True:
            frames = self.peer.audio.frames
            rate = self.peer.audio.rate
            for at, samples in frames[self._converted:]:
                peak = int(np.abs(samples.astype(np.int32)).max(initial=0))
                self.received.audio.append((at, peak, 1000.0 * len(samples) / rate))
            self._converted = len(frames)
            await asyncio.sleep(0.005)

    async def send(self, event: dict[str, Any]) -> None:
        """Send a client event on the data channel."""
        self.peer.send(event)

    async def close(self) -> None:
        """Hang up and close the relay."""
        self._converter.cancel()
        await asyncio.gather(self._converter, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.peer.hangup()
        await self.peer.__aexit__(None, None, None)
        if self.relay is not None:
            self.relay.close()
