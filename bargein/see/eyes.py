"""The ``see`` stage of one session: its images checked off the event loop and sampled by the turn's course.

``SessionEyes`` is a session observer: the machine's ``SpeechStarted``/``SpeechStopped`` actions open and close
the clip of frames a turn keeps. A bad image becomes a :class:`~bargein.protocol.errors.ProtocolError` whose
code names what is wrong (``image_truncated``, ``image_animated``, ...), so the client gets one ``error`` event
and the session goes on; the item is not added.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.session_config import SessionConfig
from bargein.see.frames import Frame, ImageRejected, decode_data_url
from bargein.see.sampler import FrameSampler, SamplerLimits
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings, images_for_turn
from bargein.session.core import vocabulary as v
from bargein.session.observers import QuietObserver
from bargein.values import ChatImage, ChatMessage

Progress = Callable[[str, str, int], None]

DECODE_WORKERS = 2
"""Threads that decode images for every session of a server process (Pillow releases the GIL while decoding)."""
_decoders = ThreadPoolExecutor(max_workers=DECODE_WORKERS, thread_name_prefix="bargein-see-decode")


class SessionEyes(QuietObserver):
    """A session's frames: checks each ``input_image`` and keeps the sampled ones."""

    def __init__(self, seeing: Seeing | None = None, *, config: Callable[[], SessionConfig] | None = None,
                 progress: Progress | None = None, limits: SamplerLimits | None = None) -> None:
        self.settings = seeing.settings if seeing is not None else VisionSettings()
        self.sampler = FrameSampler(limits)
        self._config = config
        self._progress = progress

    @property
    def image_token_budget(self) -> int:
        """The image tokens a turn may spend: the session's own budget, else the server's."""
        own = self._config().image_token_budget if self._config is not None else None
        return self.settings.image_token_budget if own is None else own

    def prompt(self, response_id: str, messages: list[ChatMessage]) -> list[ChatMessage]:
        """The messages a reply's model reads: no image of an earlier turn; in ``native`` mode the last user
        message carries the turn's frames, resized within the budget (the tokens go to the turn's ledger)."""
        stripped = [replace(m, images=()) if m.images else m for m in messages]
        last_user = next((i for i in range(len(stripped) - 1, -1, -1) if stripped[i].role == "user"), None)
        if self.settings.mode != "native" or last_user is None:
            return stripped
        sent = images_for_turn(self.sampler.take_turn(), self.settings, self.image_token_budget)
        if not sent:
            return stripped
        stripped[last_user] = replace(stripped[last_user], images=tuple(ChatImage(s.data_url) for s in sent))
        if self._progress is not None:
            self._progress(response_id, "image_tokens", sum(s.cost.tokens for s in sent))
        return stripped

    async def take_item(self, message: ce.ConversationItemCreate, at_ms: float) -> tuple[Frame, ...]:
        """Decode and check every image of a message item (in order), offering each to the sampler; raises a
        ProtocolError for the first bad one, before any of them is offered."""
        item = message.item
        if not isinstance(item, ce.MessageItem):
            return ()
        urls = [part.image_url for part in item.content if isinstance(part, ce.InputImage)]
        frames: list[Frame] = []
        loop = asyncio.get_running_loop()
        for url in urls:
            try:
                frames.append(await loop.run_in_executor(_decoders, decode_data_url, url, at_ms))
            except ImageRejected as rejected:
                raise ProtocolError(rejected.message, code=rejected.code, param="item.content.image_url",
                                    event_id=message.event_id) from None
        for frame in frames:
            self.sampler.offer(frame)
        return tuple(frames)

    def on_action(self, action: v.Action) -> None:
        """A turn's speech opens and closes the clip of frames it keeps."""
        if isinstance(action, v.SpeechStarted):
            self.sampler.speech_started()
        elif isinstance(action, v.SpeechStopped):
            self.sampler.speech_stopped()
