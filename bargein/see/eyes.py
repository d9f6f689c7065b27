"""The ``see`` stage of one session: its images checked off the event loop and sampled by the turn's course.

``SessionEyes`` is a session observer: the machine's ``SpeechStarted``/``SpeechStopped`` actions open and close
the clip of frames a turn keeps. A bad image becomes a :class:`~bargein.protocol.errors.ProtocolError` whose
code names what is wrong (``image_truncated``, ``image_animated``, ...), so the client gets one ``error`` event
and the session goes on; the item is not added.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.see.frames import Frame, ImageRejected, decode_data_url
from bargein.see.sampler import FrameSampler, SamplerLimits
from bargein.session.core import vocabulary as v
from bargein.session.observers import QuietObserver

DECODE_WORKERS = 2
"""Threads that decode images for every session of a server process (Pillow releases the GIL while decoding)."""
_decoders = ThreadPoolExecutor(max_workers=DECODE_WORKERS, thread_name_prefix="bargein-see-decode")


class SessionEyes(QuietObserver):
    """A session's frames: checks each ``input_image`` and keeps the sampled ones."""

    def __init__(self, limits: SamplerLimits | None = None) -> None:
        self.sampler = FrameSampler(limits)

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
