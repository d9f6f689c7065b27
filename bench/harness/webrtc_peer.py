"""A WebRTC client of bargein built on aiortc, for tests and benchmarks: a browser's part of a call, scripted.

It does what an OpenAI WebRTC client does: it creates the ``oai-events`` data channel and a sendrecv audio track,
posts its SDP offer to ``/v1/realtime/calls`` and takes the answer. Its microphone plays the clips it is given
(16 or 24 kHz pcm16) in real time, 20 ms a frame, and silence in between, Opus-encoded as a browser does it: at
48 kHz, 32 kbit/s, with in-band FEC (``useinbandfec=1`` in its offer; aiortc's own encoder sends no FEC);
everything the server sends is logged with its arrival time (``time.monotonic``): the events
of the data channel and the frames of the reply audio. Use it as an async context manager::

    async with WebRtcPeer("http://127.0.0.1:8000", key) as peer:
        await peer.next_event("session.created")
        spoken_at = await peer.say(clip)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import av
import httpx
import numpy as np
import numpy.typing as npt
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from bargein.server.webrtc.opus import OPUS_RATE, OpusEncoder, with_inband_fec
from bargein.server.webrtc.tracks import OPUS_FRAME_SAMPLES, OpusRateFrames
from bench.harness.udp_relay import UdpRelay

FRAME_S = 0.020
AUDIBLE_INT16 = 33
"""A received sample is "non-silent" above -60 dBFS."""
BROWSER_BIT_RATE = 32_000
"""Chromium's default Opus bitrate for a mono microphone."""


@dataclass
class _Clip:
    samples: npt.NDArray[np.int16]
    started: asyncio.Future[float]
    offset: int = 0


class MicrophoneTrack(MediaStreamTrack):
    """The caller's microphone: queued clips in real time, then silence (20 ms frames at ``rate``)."""

    kind = "audio"

    def __init__(self, rate: int = 24_000) -> None:
        super().__init__()
        self.rate = rate
        self.frame_samples = int(rate * FRAME_S)
        self._clips: deque[_Clip] = deque()
        self._next_at: float | None = None
        self._pts = 0
        self._to_opus_rate = OpusRateFrames(rate)
        self._encoder = OpusEncoder(BROWSER_BIT_RATE)
        self.starts: list[tuple[float, int]] = []
        """Per clip begun, in order: the monotonic time and the 48 kHz RTP timestamp (from the track's first packet)
        of its first sample."""

    def say(self, pcm: bytes) -> asyncio.Future[float]:
        """Queue ``pcm`` (pcm16 at the track's rate); resolves to the monotonic time its first sample was sent."""
        started: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._clips.append(_Clip(np.frombuffer(pcm, dtype="<i2").copy(), started))
        return started

    @property
    def sent_pts(self) -> int:
        """The 48 kHz RTP timestamp of the next packet: how much audio the track has sent."""
        return self._pts

    @property
    def speaking(self) -> bool:
        """A clip is still being sent."""
        return bool(self._clips)

    async def recv(self) -> av.Packet[Any]:
        """The next frame's packet, at its time."""
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._next_at is None:
            self._next_at = now
        elif self._next_at > now:
            await asyncio.sleep(self._next_at - now)
        self._next_at += FRAME_S
        out = np.zeros(self.frame_samples, dtype=np.int16)
        filled = 0
        while filled < self.frame_samples and self._clips:
            clip = self._clips[0]
            if not clip.started.done():
                clip.started.set_result(time.monotonic() + filled / self.rate)
                self.starts.append((clip.started.result(), self._pts + filled * OPUS_RATE // self.rate))
            count = min(self.frame_samples - filled, len(clip.samples) - clip.offset)
            out[filled:filled + count] = clip.samples[clip.offset:clip.offset + count]
            clip.offset += count
            filled += count
            if clip.offset >= len(clip.samples):
                self._clips.popleft()
        packet = self._encoder.encode(self._to_opus_rate.frame(out), self._pts)
        self._pts += OPUS_FRAME_SAMPLES
        return packet


@dataclass
class ReceivedAudio:
    """The reply audio as it arrived: one entry per decoded frame (48 kHz mono pcm16)."""

    rate: int = 48_000
    frames: list[tuple[float, npt.NDArray[np.int16]]] = field(default_factory=list)

    def voiced_times(self) -> list[float]:
        """Arrival times of the frames holding audible audio."""
        return [at for at, samples in self.frames if int(np.abs(samples).max(initial=0)) > AUDIBLE_INT16]

    def voiced_ms_between(self, start: float, end: float = float("inf")) -> float:
        """Milliseconds of audible frames that arrived in ``[start, end)``."""
        return sum(1000.0 * len(samples) / self.rate for at, samples in self.frames
                   if start <= at < end and int(np.abs(samples).max(initial=0)) > AUDIBLE_INT16)


class WebRtcPeer:
    """One call to bargein over WebRTC (an async context manager)."""

    def __init__(self, base_url: str, key: str | None = None, *, rate: int = 24_000, own_events: bool = False,
                 model: str | None = None, session: dict[str, Any] | None = None,
                 connect_timeout_s: float = 20.0, relay: UdpRelay | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.own_events = own_events
        self.model = model
        self.session = session
        self.connect_timeout_s = connect_timeout_s
        self.relay = relay
        """A lossy relay (``udp_relay.py``) the call is routed through: both descriptions are rewritten to it."""
        self.pc = RTCPeerConnection()
        self.microphone = MicrophoneTrack(rate)
        self.channel = self.pc.createDataChannel("oai-events")
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.audio = ReceivedAudio()
        self.call_id: str | None = None
        self.location: str | None = None
        self.answer_sdp = ""
        self._new_event = asyncio.Event()
        self._open = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.channel.on("open", self._open.set)
        self.channel.on("message", self._message)
        self.pc.on("track", self._track)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def _message(self, data: str | bytes) -> None:
        self.events.append((time.monotonic(), json.loads(data)))
        self._new_event.set()

    def _track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._receive(track)))

    async def _receive(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            assert isinstance(frame, av.AudioFrame)
            data = frame.to_ndarray().reshape(-1, len(frame.layout.channels))
            self.audio.rate = int(frame.sample_rate)
            self.audio.frames.append((time.monotonic(), data[:, 0].astype(np.int16)))

    async def __aenter__(self) -> WebRtcPeer:
        self.pc.addTransceiver(self.microphone, direction="sendrecv")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = with_inband_fec(self.pc.localDescription.sdp)
        response = await self.post_offer(self.relay.route_offer(offer) if self.relay is not None else offer)
        if response.status_code != 201:
            await self.pc.close()
            raise ConnectionError(f"the call was refused: {response.status_code} {response.text[:300]}")
        self.location = response.headers.get("location")
        self.call_id = (self.location or "").rsplit("/", 1)[-1]
        self.answer_sdp = response.text
        answer = self.relay.route_answer(response.text) if self.relay is not None else response.text
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        await asyncio.wait_for(self._open.wait(), self.connect_timeout_s)
        return self

    async def post_offer(self, sdp: str) -> httpx.Response:
        """POST ``sdp`` (with the session config, as multipart, when one was given) to ``/v1/realtime/calls``."""
        params = {key: value for key, value in (("model", self.model),
                                                 ("bargein_events", "1" if self.own_events else None)) if value}
        async with httpx.AsyncClient(timeout=30.0) as client:
            if self.session is None:
                return await client.post(f"{self.base_url}/v1/realtime/calls", content=sdp, params=params,
                                         headers={**self._headers(), "Content-Type": "application/sdp"})
            files = {"sdp": (None, sdp), "session": (None, json.dumps(self.session))}
            return await client.post(f"{self.base_url}/v1/realtime/calls", files=files, params=params,
                                     headers=self._headers())

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pc.close()

    def say(self, pcm: bytes) -> asyncio.Future[float]:
        """Speak ``pcm`` (pcm16 at the microphone's rate) then silence; resolves when its first sample is sent."""
        return self.microphone.say(pcm)

    def send(self, event: dict[str, Any]) -> None:
        """Send a client event on the data channel."""
        self.channel.send(json.dumps(event))

    async def next_event(self, type_: str, *, after: int = 0, timeout: float = 20.0) -> tuple[int, dict[str, Any]]:
        """The first event of ``type_`` at index ``after`` or later (its index and the event), waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            for index in range(after, len(self.events)):
                if self.events[index][1].get("type") == type_:
                    return index, self.events[index][1]
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [event.get("type") for _, event in self.events[after:]][-30:]
                raise TimeoutError(f"no {type_} event within {timeout} s (saw {seen})")
            self._new_event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_event.wait(), min(left, 0.5))

    def arrival(self, index: int) -> float:
        """When the event at ``index`` arrived (``time.monotonic``)."""
        return self.events[index][0]

    def types(self) -> list[str]:
        """The types of the events received so far, in order."""
        return [str(event.get("type")) for _, event in self.events]

    async def hangup(self) -> httpx.Response:
        """``POST /v1/realtime/calls/{call_id}/hangup``."""
        async with httpx.AsyncClient(timeout=10.0) as client:
            return await client.post(f"{self.base_url}/v1/realtime/calls/{self.call_id}/hangup",
                                     headers=self._headers())
