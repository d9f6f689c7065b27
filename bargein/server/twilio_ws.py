"""``/v1/telephony/twilio``: a phone call over Twilio Media Streams, served by the same session as ``/v1/realtime``.

The provider's frames become ``input_audio_buffer.append`` events of a session whose audio is 8 kHz mu-law both
ways; the session's output audio leaves as ``media`` messages of 20 ms, each followed by a ``mark`` naming how far
into its item the audio reached (:class:`~bargein.server.phone_marks.MarkLedger`); the reply's pacer keeps it about
a second ahead of the caller. On a barge-in (the machine pauses or cancels the reply, or the caller speaks over the
tail of a reply that has ended on the server) a ``clear`` goes out at once, and the newest echoed mark becomes the
client's playback position, as a ``conversation.item.truncate``: the history keeps exactly the words played
before it. The provider's protocol has no error event: problems (malformed messages, the session's ``error`` events,
refused messages among them) are logged and counted (``bargein_client_errors_total``, as on the other transports),
and the call goes on; a session the server ends is closed with the same codes as a WebSocket session's.

Long-term memory is off on phone calls: every caller of a line comes in under the line's one key or token, so a
key's memory would be shared by strangers.

Authentication: the usual ``Authorization: Bearer`` key, or a signed, expiring token
(:mod:`~bargein.server.phone_tokens`) as the path's last segment or a ``token`` query parameter; in local-only mode,
loopback callers only, as on ``/v1/realtime``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from bargein.audio.codecs import decode_base64
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol import twilio_media as tw
from bargein.protocol.session_config import SessionConfig
from bargein.server.auth import (
    SOCKET_SCOPE_KEY,
    AuthResult,
    authorize,
    client_address,
    host_allowed,
    origin_allowed,
    peer_address,
)
from bargein.server.client_counts import CountsBusy
from bargein.server.phone_marks import MarkLedger
from bargein.server.phone_tokens import token_valid
from bargein.server.realtime_ws import (
    FAREWELL_TIMEOUT_S,
    POLICY_CLOSE,
    TRY_LATER_CLOSE,
    Ending,
    RealtimeConnection,
    SessionRegistry,
    message_bytes,
)
from bargein.server.serving import abort_connection
from bargein.server.session_host import SessionPlace, hosted, new_session
from bargein.server.session_locks import SessionLocks
from bargein.session.outbound import Outgoing
from bargein.session.realtime_session import RealtimeSession

log = logging.getLogger(__name__)
MAX_MESSAGES_BEFORE_START = 16
"""Messages a provider may send before ``start`` (``connected``, a stray frame) before the call is refused."""
LOGGED_PROBLEMS = 10
"""Problems of one call logged one by one; after them, every hundredth (all are counted)."""
PHONE_AUDIO = {"audio": {"input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}}}


def authorize_phone(websocket: WebSocket, settings: Settings, path_token: str | None) -> AuthResult:
    """The WebSocket's own rules (Host, Origin, key or loopback), or else a valid phone token in the path or query."""
    decision = authorize(websocket, settings)
    if decision.allowed or settings.local_only:
        return decision
    token = path_token or websocket.query_params.get("token")
    if token and host_allowed(websocket.scope, settings) and origin_allowed(websocket.scope, settings):
        if token_valid(token, settings.api_keys):
            return AuthResult(True)
        return AuthResult(False, "invalid or expired phone token")
    return decision


async def serve_twilio(websocket: WebSocket, settings: Settings, engines: Engines | None,
                       registry: SessionRegistry, metrics: ServerMetrics | None = None,
                       refusal: str | None = None, *, path_token: str | None = None) -> None:
    """Run one phone call over ``websocket`` until the provider stops the stream or the server ends the session."""
    decision = authorize_phone(websocket, settings, path_token)
    if not decision.allowed:  # the reason only: never the token
        log.warning("refused a phone connection from %s: %s", peer_address(websocket.scope), decision.reason)
        await websocket.close(code=POLICY_CLOSE, reason=decision.reason[:120])
        return
    await websocket.accept(subprotocol=decision.subprotocol)
    address = client_address(websocket.scope) or "unknown"
    busy = refusal or ("too many sessions" if len(registry.live) >= registry.max_sessions else None)
    if engines is None or busy is not None:
        if metrics is not None:
            metrics.refused.labels("loading" if engines is None else "load").inc()
        await _close(websocket, TRY_LATER_CLOSE, "the server is loading" if engines is None else busy or "busy")
        return
    try:
        admitted = await registry.addresses.acquire(address)
    except CountsBusy:
        await _close(websocket, TRY_LATER_CLOSE, "the server is busy; retry shortly")
        return
    if not admitted:
        await _close(websocket, POLICY_CLOSE, f"at most {registry.addresses.per_address} sessions per client")
        return
    try:
        start = await _await_start(websocket, settings, metrics)
        if start is None:
            return
        await _run_call(websocket, settings, engines, registry, metrics, start)
    finally:
        await registry.addresses.release(address)


async def _run_call(websocket: WebSocket, settings: Settings, engines: Engines, registry: SessionRegistry,
                    metrics: ServerMetrics | None, start: tw.Start) -> None:
    config = SessionConfig.for_language(settings.language, model="bargein").updated(PHONE_AUDIO)
    session = new_session(settings, engines, metrics, config)
    place = SessionPlace(client_address(websocket.scope) or "unknown", SessionLocks(), None)  # no memory: see above
    log.info("phone call started (call %s)", start.call_sid or "unnamed")
    async with hosted(session, settings, registry, place, socket=websocket):
        await TwilioCall(websocket, session, settings, metrics, start).run()


async def _await_start(websocket: WebSocket, settings: Settings, metrics: ServerMetrics | None) -> tw.Start | None:
    """The provider's ``start`` within the handshake time, or None (the socket closed, with a reason)."""
    try:
        async with asyncio.timeout(settings.handshake_timeout_s):
            for _ in range(MAX_MESSAGES_BEFORE_START):
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return None
                data = message.get("text") or message.get("bytes") or ""
                if message_bytes(data) > settings.max_message_bytes:
                    _problem(metrics, "message_too_large", "a message over the size limit before start")
                    break
                try:
                    parsed = tw.parse_message(data)
                except tw.MediaStreamError as error:
                    _problem(metrics, "phone_malformed", f"a malformed message before start: {error}")
                    continue
                if isinstance(parsed, tw.Stop):
                    return None
                if isinstance(parsed, tw.Start):
                    if tw.supported_format(parsed):
                        return parsed
                    await _close(websocket, POLICY_CLOSE, "only 8 kHz mu-law (audio/x-mulaw) is served")
                    return None
    except TimeoutError:
        pass
    except (WebSocketDisconnect, RuntimeError):
        return None
    _problem(metrics, "phone_no_start", "no start message in time")
    await _close(websocket, POLICY_CLOSE, f"no start within {settings.handshake_timeout_s:g} s")
    return None


class TwilioCall(RealtimeConnection):
    """One call: the provider's messages in, the session's audio, marks and clears out."""

    def __init__(self, websocket: WebSocket, session: RealtimeSession, settings: Settings,
                 metrics: ServerMetrics | None, start: tw.Start) -> None:
        super().__init__(websocket, session, settings, metrics, own_events=True)
        self.stream_sid = start.stream_sid
        self.marks = MarkLedger()
        self.frames = tw.FrameSplitter()
        self.position_item: str | None = None
        self.position_ms = 0.0
        """How far into ``position_item`` its audio reached with the last frame sent."""
        self.live: set[str] = set()
        """Responses begun and not done."""
        self.problems = 0
        self.stopped = False
        """The provider sent ``stop``: the call is over."""

    async def _read(self) -> Ending | None:
        while not self.stopped:
            try:
                message = await self.websocket.receive()
            except (WebSocketDisconnect, RuntimeError):
                return None
            if message["type"] == "websocket.disconnect":
                return None
            data: str | bytes = message.get("text") or message.get("bytes") or ""
            if (ending := await self.take(data, message_bytes(data))) is not None:
                return ending
        return None

    async def handle(self, data: str | bytes) -> None:
        """Act on one provider message that passed the shared budgets (:meth:`take`; a refused one becomes an
        ``error`` event, which the writer logs); a ``stop`` ends the call."""
        try:
            message = tw.parse_message(data)
        except tw.MediaStreamError as error:
            self._problem("phone_malformed", f"a malformed message: {error}")
            return
        match message:
            case tw.Media(payload=payload, track=track):
                if track in ("inbound", ""):
                    await self.session.handle_message(
                        json.dumps({"type": "input_audio_buffer.append", "audio": payload}))
            case tw.Mark(name=name):
                self.marks.echoed(name)
            case tw.Stop():
                log.info("the provider stopped the stream")
                self.stopped = True
            case tw.Start():
                self._problem("phone_malformed", "a second start message")

    async def _write(self) -> None:
        async for item in self.outgoing():
            if self.websocket.application_state != WebSocketState.CONNECTED:
                return None
            try:
                await self._forward(item)
            except (WebSocketDisconnect, RuntimeError, OSError):
                return None
            self.sent(item)  # the playback estimate, the observers and the error counts, as on the WebSocket

    async def _forward(self, item: Outgoing) -> None:
        """Carry one session event to the provider, as far as its protocol can say it."""
        event = item.event
        match event["type"]:
            case "response.output_audio.delta":
                await self._play(event["item_id"], decode_base64(event["delta"]))
            case "response.output_audio.done":
                frame = self.frames.flush(event["item_id"])
                if frame:
                    await self._send_frame(event["item_id"], frame)
            case "bargein.reply.resumed":  # re-sent from the cut point
                self.position_item, self.position_ms = event["item_id"], float(event["audio_start_ms"])
            case "bargein.reply.paused":
                await self._barge_in()
            case "response.created":
                self.live.add(event["response"]["id"])
            case "response.done":
                self.live.discard(event["response"]["id"])
                if event["response"]["status"] == "cancelled":
                    await self._barge_in()
            case "input_audio_buffer.speech_started":
                if not self.live and self.marks.outstanding:  # over the tail of a reply done on the server
                    await self._barge_in()
            case "error":  # counted as it leaves (:meth:`sent`), as on the other transports: only logged here
                error = event["error"]
                self._problem(str(error.get("code")), f"an error the provider cannot be told of: "
                              f"{error.get('message')}", counted=False)
        if item.is_data:
            self.last_heard = time.monotonic()  # a call whose reply is still playing is not idle

    async def _play(self, item_id: str, payload: bytes) -> None:
        if item_id != self.position_item:
            self.position_item, self.position_ms = item_id, 0.0  # a new item's audio starts at its beginning
        for frame in self.frames.frames(item_id, payload):
            await self._send_frame(item_id, frame)

    async def _send_frame(self, item_id: str, frame: bytes) -> None:
        self.position_ms += tw.FRAME_MS
        await self.websocket.send_text(tw.media_message(self.stream_sid, frame))
        await self.websocket.send_text(tw.mark_message(self.stream_sid, self.marks.sent(item_id, self.position_ms)))

    async def _barge_in(self) -> None:
        """Drop what the provider holds, and truncate the item to the newest mark it echoed."""
        heard = self.marks.clear()
        self.frames.drop()
        if heard is None:
            return
        await self.websocket.send_text(tw.clear_message(self.stream_sid))
        await self.session.handle_message(json.dumps({
            "type": "conversation.item.truncate", "item_id": heard.item_id, "content_index": 0,
            "audio_end_ms": int(heard.audio_end_ms)}))

    def _problem(self, code: str, message: str, *, counted: bool = True) -> None:
        """Count every problem (unless it is counted elsewhere); log the first ten and then every hundredth (a
        hostile provider cannot flood the log at its message rate)."""
        self.problems += 1
        _problem(self.metrics if counted else None, code, message if self.problems <= LOGGED_PROBLEMS else
                 f"{message} ({self.problems} problems on this call)",
                 logged=self.problems <= LOGGED_PROBLEMS or self.problems % 100 == 0)

    async def farewell(self, ending: Ending) -> None:
        """The provider has no error event: the reason goes in the close frame and the log."""
        await _close(self.websocket, ending.close_code, ending.message)


def _problem(metrics: ServerMetrics | None, code: str, message: str, *, logged: bool = True) -> None:
    """Log and count a problem the provider cannot be told of."""
    if logged:
        log.warning("phone call: %s", message[:300])
    if metrics is not None:
        metrics.errors.labels(code[:64]).inc()


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    """Close with ``code``; drop a provider that does not complete the close handshake in time."""
    with contextlib.suppress(Exception):
        if websocket.application_state == WebSocketState.CONNECTED:
            await asyncio.wait_for(websocket.close(code=code, reason=reason[:120]), FAREWELL_TIMEOUT_S)
    client = websocket.scope.get(SOCKET_SCOPE_KEY, websocket.scope.get("client"))
    asyncio.get_running_loop().call_later(FAREWELL_TIMEOUT_S, abort_connection, client)

