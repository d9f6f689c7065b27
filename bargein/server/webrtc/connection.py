"""A WebRTC call's session: the ``oai-events`` data channel and the audio tracks bridged to the Realtime session.

The reader takes the caller's events from the data channel (through the same event-rate limiter and size bound as
the WebSocket) and the caller's audio from its Opus track (decoded in :mod:`.receive` at the listening rate, 16 kHz,
and handed to the session's listen path as it is; resampled to the session's input rate only for noise reduction,
whose suppressor takes that rate). The
writer sends every server event on the data channel as JSON, except the reply audio deltas, which go to the reply
track instead (an OpenAI WebRTC client gets its audio as RTP).

Playback truth: the reply track knows what it put on the wire. ``output_audio_buffer.started`` goes out with a
response's first frame, ``.stopped`` once its audio has all left after its ``response.done``, ``.cleared`` when a
barge-in (the machine pauses or cancels the reply, or the caller speaks over audio still playing out) or the
client's ``output_audio_buffer.clear`` empties the track; then the item is truncated where the caller had heard it
(:mod:`.playout`), as a phone line truncates to its last echoed mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque

import av
import numpy as np

from bargein.audio.codecs import decode_base64
from bargein.audio.resample import LowDelayResampler, resample
from bargein.config import Settings
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event, event
from bargein.server.session_connection import SessionConnection, message_bytes
from bargein.server.session_host import POLICY_CLOSE, Ending
from bargein.server.session_locks import SessionLocks
from bargein.server.webrtc.media import CallMedia
from bargein.server.webrtc.output_hold import TrackHold
from bargein.server.webrtc.playout import PlayoutDelay, heard_ms, still_playing
from bargein.server.webrtc.tracks import SEND_RATE, InputClock
from bargein.session.outbound import Outgoing
from bargein.session.realtime_session import RealtimeSession
from bargein.values import LISTEN_SAMPLE_RATE, Float32Audio

log = logging.getLogger(__name__)
CLEAR_EVENT = "output_audio_buffer.clear"
UNSENT_EVENTS = 256
FAREWELL_S = 1.0
"""How long the last error (and the events before it) may take to leave on the data channel before the peer
connection closes."""


class WebRtcConnection(SessionConnection):
    """One call's session over its peer connection."""

    def __init__(self, media: CallMedia, session: RealtimeSession, settings: Settings,
                 metrics: ServerMetrics | None, *, own_events: bool, locks: SessionLocks | None = None) -> None:
        super().__init__(session, settings, metrics, own_events=own_events, locks=locks)
        self.media = media
        self.delay = PlayoutDelay()
        self.entry = asyncio.Lock()
        """One client input at a time reaches the session (events and audio arrive on two tasks)."""
        self.positions: dict[str, float] = {}
        """How far into each reply item its audio has been queued (the next delta starts there)."""
        self.live: set[str] = set()
        self.done: set[str] = set()
        self.cleared: set[str] = set()
        """Responses whose audio was cleared: their later deltas are dropped until a resume."""
        self.sidebands: set[asyncio.Queue[str]] = set()
        self.unsent: deque[str] = deque(maxlen=UNSENT_EVENTS)
        """Events waiting for the data channel to open (a channel that never opens keeps only the newest)."""
        media.listener = self._playback
        session.executor.output_hold = TrackHold(media.track)  # a probe's provisional stop holds the track at once

    # -- reading -------------------------------------------------------------------------------------

    async def _read(self) -> Ending | None:
        readers = {asyncio.create_task(self._read_events(), name="webrtc-events"),
                   asyncio.create_task(self._read_audio(), name="webrtc-audio"),
                   asyncio.create_task(self.media.ended.wait(), name="webrtc-ended")}
        sender = self.media.pc.getSenders()[0] if self.media.pc.getSenders() else None
        follower = asyncio.create_task(self.delay.follow(sender)) if sender is not None else None
        try:
            done, _ = await asyncio.wait(readers, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*readers, *([follower] if follower is not None else [])]:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is None and isinstance(ending := task.result(), Ending):
                return ending
        for task in done:
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
        return None

    async def _read_events(self) -> Ending | None:
        while True:
            data = await self.media.inbox.get()
            if data is None:
                return Ending("rate_limit_exceeded", f"the data channel stayed over {self.settings.events_per_s:g} "
                              f"events per second for {self.limiter.sustain_s:g} s", POLICY_CLOSE)
            if (ending := await self.take(data, message_bytes(data))) is not None:
                return ending

    async def handle(self, data: str | bytes) -> None:
        """The transport's own client event (``output_audio_buffer.clear``) is taken here; the rest go on."""
        if CLEAR_EVENT in (data if isinstance(data, str) else data.decode("utf-8", "replace")):
            with contextlib.suppress(ValueError):
                message = json.loads(data)
                if isinstance(message, dict) and message.get("type") == CLEAR_EVENT:
                    await self._clear()
                    return
        async with self.entry:
            await self.session.handle_message(data)

    async def _read_audio(self) -> None:
        track = await self.media.remote_audio
        resampler: LowDelayResampler | None = None
        clock = InputClock()
        while True:
            try:
                frame = await track.recv()
            except Exception:  # MediaStreamError: the caller's track ended
                return None
            if not isinstance(frame, av.AudioFrame) or (heard := clock.place(frame)) is None:
                continue
            self.last_heard = time.monotonic()
            async with self.entry:
                resampler = await self._hand_on(heard, int(frame.sample_rate), resampler)

    async def _hand_on(self, heard: Float32Audio, rate: int,
                       resampler: LowDelayResampler | None) -> LowDelayResampler | None:
        """Give the session decoded audio: as it is at the listening rate (receive.DECODE_RATE) unless noise
        reduction wants the input rate, else resampled to the input rate; the resampler in use (None: none)."""
        audio_in = self.session.audio_in
        wire_rate = audio_in.wire_format.rate
        if rate == LISTEN_SAMPLE_RATE and not audio_in.noise_reduction:
            if resampler is not None:  # noise reduction just went off: what the resamplers held is heard first
                tail = audio_in.listen(resampler.process(np.zeros(0, np.float32), last=True))
                heard = np.concatenate([tail, audio_in.held(), heard]).astype(np.float32, copy=False)
            await self.session.append_audio(heard, LISTEN_SAMPLE_RATE)
            return None
        if rate == wire_rate:
            await self.session.append_audio(heard)
            return None
        if resampler is None or resampler.out_rate != wire_rate or resampler.in_rate != rate:
            resampler = LowDelayResampler(rate, wire_rate)
        await self.session.append_audio(resampler.process(heard))
        return resampler

    # -- writing -------------------------------------------------------------------------------------

    async def _write(self) -> None:
        flusher = asyncio.create_task(self._flush_when_open())
        try:
            await self._write_events()
        finally:
            flusher.cancel()

    async def _write_events(self) -> None:
        async for item in self.outgoing():
            if self.media.ended.is_set():
                return None
            queued = await self._forward(item)
            shown = queued if item.event["type"] == "response.output_audio.delta" else item
            text = None if shown is None else self.visible(shown)
            if text is not None:
                self._fan_out(text)
                self.unsent.append(text)
                self._flush()
            self.sent(item)
            if item.is_data:
                self.last_heard = time.monotonic()  # a call whose reply is still playing is not idle

    def _flush(self) -> None:
        """Send what waits for the data channel, once it is open. Events the client leaves unread count against the
        session's outbound budget as on the WebSocket: past it, the overflow watch ends the call."""
        while self.unsent:
            try:
                if not self.media.send(self.unsent[0]):
                    break
            except ValueError:  # over the size the client's SCTP stack takes (a browser's: 256 KiB)
                self._too_large(self.unsent[0])
            self.unsent.popleft()
        if self.media.buffered_bytes > self.session.outbound.max_bytes:
            self.session.outbound.overflowed.set()

    def _too_large(self, text: str) -> None:
        """An event too large for the data channel is not sent: the client gets an ``error`` naming it instead."""
        kind = "server"
        with contextlib.suppress(ValueError, AttributeError):
            kind = str(json.loads(text).get("type"))[:64]
        log.warning("a %d-byte %s event was too large for the data channel", len(text), kind)
        refusal = error_event(ProtocolError(
            f"a {kind} event of {len(text)} bytes is larger than the data channel carries; it was not sent "
            "(a sideband WebSocket carries it)", code="event_too_large", type="server_error"))
        with contextlib.suppress(ValueError):
            self.media.send(json.dumps(refusal, separators=(",", ":")))

    async def _flush_when_open(self) -> None:
        await self.media.channel_open.wait()
        self._flush()

    async def _forward(self, item: Outgoing) -> Outgoing | None:
        """Carry out what one server event means for the media (audio to the track, barge-ins, buffer events); an
        audio delta queued on the track returns what the data channel carries in its place."""
        message = item.event
        match message["type"]:
            case "response.output_audio.delta":
                return self._play(message["response_id"], message["item_id"], decode_base64(message["delta"]))
            case "bargein.reply.resumed":  # re-sent from the cut point
                if message["item_id"] is not None:  # null: paused before its item was announced, nothing placed
                    self.positions[message["item_id"]] = float(message["audio_start_ms"])
                self.cleared.discard(message.get("response_id", ""))
            case "bargein.reply.paused":
                await self._barge_in()
            case "response.created":
                self.live.add(message["response"]["id"])
            case "response.done":
                response_id = message["response"]["id"]
                self.live.discard(response_id)
                if message["response"]["status"] == "cancelled":
                    await self._barge_in()
                elif self.media.track.holds(response_id):
                    self.done.add(response_id)  # stopped once its last frame has gone out
                elif self._started_on_wire(response_id) and response_id not in self.cleared:
                    self._stopped(response_id)
                self.cleared.discard(response_id)  # its deltas are all in: nothing more to drop
            case "input_audio_buffer.speech_started":
                now = asyncio.get_running_loop().time()
                if not self.live and (self.media.track.holds_audio or
                                      still_playing(self.media.track.on_wire, self.delay.delay_ms, now)):
                    await self._barge_in()  # over the tail of a reply done on the server
        return None

    def _play(self, response_id: str, item_id: str, payload: bytes) -> Outgoing | None:
        """Queue an audio delta on the reply track (none of a cleared response's) and return its stand-in for the
        data channel: ``bargein.reply.audio``, the stretch of the item it queued, the delta without its audio, so a
        client that shows the words as they are heard places each transcript delta as it would over a WebSocket."""
        if response_id in self.cleared:
            return None
        wire = self.session.config.output_format
        samples = wire.decode(payload)
        if wire.rate != SEND_RATE:
            samples = (resample(samples.astype(np.float32) / 32768.0, wire.rate, SEND_RATE) * 32767.0
                       ).clip(-32768, 32767).astype(np.int16)
        start_ms = self.positions.get(item_id, 0.0)
        if len(self.positions) > 64 and item_id not in self.positions:
            self.positions.pop(next(iter(self.positions)))
        self.positions[item_id] = start_ms + 1000.0 * len(samples) / SEND_RATE
        self.media.track.play(response_id, item_id, start_ms, samples)
        queued = event("bargein.reply.audio", response_id=response_id, item_id=item_id,
                       audio_start_ms=round(start_ms, 3), audio_end_ms=round(self.positions[item_id], 3))
        return Outgoing(queued, response_id=response_id, wire=json.dumps(queued, separators=(",", ":")))

    def _started_on_wire(self, response_id: str) -> bool:
        on_wire = self.media.track.on_wire
        return on_wire is not None and on_wire.response_id == response_id

    def _playback(self, what: str, response_id: str) -> None:
        """The reply track's report: a response's first frame went out, or its queued audio all left."""
        if what == "started":
            self.session.outbound.put(Outgoing(event("output_audio_buffer.started", response_id=response_id)))
        elif response_id in self.done:
            self._stopped(response_id)

    def _stopped(self, response_id: str) -> None:
        self.done.discard(response_id)
        self.session.outbound.put(Outgoing(event("output_audio_buffer.stopped", response_id=response_id)))

    async def _barge_in(self) -> None:
        """Empty the reply track (the next frame is silence) and truncate the item to what the caller heard."""
        now = asyncio.get_running_loop().time()
        holding = self.media.track.holds_audio
        last = await self.media.track.cut()  # the packet after the cut leaves before the truncate's work
        if last is None or not (holding or still_playing(last, self.delay.delay_ms, now)):
            return
        self.cleared.add(last.response_id)
        self.done.discard(last.response_id)
        heard = heard_ms(last, self.delay.delay_ms, now)
        self.session.outbound.put(Outgoing(event("output_audio_buffer.cleared", response_id=last.response_id)))
        async with self.entry:
            await self.session.handle_message(json.dumps({
                "type": "conversation.item.truncate", "item_id": last.item_id, "content_index": 0,
                "audio_end_ms": int(heard)}))

    async def _clear(self) -> None:
        """The client's ``output_audio_buffer.clear``: cut the audio playing now (the reply goes on unheard). With
        nothing playing it does nothing: a client interrupting at ``speech_started`` sends it after the server's own
        barge-in has already cleared the track."""
        await self._barge_in()

    def _fan_out(self, text: str) -> None:
        """Hand ``text`` to every sideband WebSocket attached to this call (one that lags behind is dropped)."""
        for queue in list(self.sidebands):
            try:
                queue.put_nowait(text)
            except asyncio.QueueFull:
                self.sidebands.discard(queue)

    async def farewell(self, ending: Ending) -> None:
        """Say why on the data channel (an ``error`` event), then close the peer connection."""
        message = error_event(ProtocolError(ending.message, code=ending.code, type="server_error"
                                            if ending.close_code in (1013, 1011) else "invalid_request_error"))
        text = json.dumps(message, separators=(",", ":"))
        self._fan_out(text)
        if self.media.send(text):
            await self.media.drained(FAREWELL_S)  # the SCTP association sends it (and what was before it) first
        await self.media.close()
