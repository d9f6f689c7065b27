"""The ``see`` stage of one session: its images checked off the event loop, sampled by the turn's course, read
into a scene note in the background, and handed to the reply's prompt.

``SessionEyes`` is a session observer: the machine's ``SpeechStarted``/``SpeechStopped`` actions open and close
the clip of frames a turn keeps. A bad image becomes a :class:`~bargein.protocol.errors.ProtocolError` whose
code names what is wrong (``image_truncated``, ``image_animated``, ...), so the client gets one ``error`` event
and the session goes on; the item is not added. Each new scene (not a near-duplicate) goes to the server's
scene pool; the newest note and its age are what a reply reads (``bargein.see.note`` tells the client).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import event
from bargein.protocol.session_config import DEFAULT_INSTRUCTIONS, SessionConfig
from bargein.see.frames import Frame, ImageRejected, decode_data_url
from bargein.see.quoting import reading_answer
from bargein.see.sampler import FrameSampler, SamplerLimits
from bargein.see.scene import SceneNote
from bargein.see.shared import Seeing
from bargein.see.tokens import ImageCost
from bargein.see.vision import SentImage, VisionSettings, encode_resized, images_for_turn
from bargein.session.camera_warms import CameraWarms
from bargein.session.core import vocabulary as v
from bargein.session.note_pins import NotePins, Seen
from bargein.session.observers import QuietObserver
from bargein.session.outbound import Outgoing
from bargein.values import ChatImage, ChatMessage, opens_with_instructions

Progress = Callable[[str, str, int], None]

DECODE_WORKERS = 2
"""Threads that decode images for every session of a server process (Pillow releases the GIL while decoding)."""
_decoders = ThreadPoolExecutor(max_workers=DECODE_WORKERS, thread_name_prefix="bargein-see-decode")


NOTED_TURNS_KEPT = 16
"""Earlier turns whose note stays before their question in later prompts (older ones drop out of the prompt)."""
ENCODINGS_KEPT = 16
"""Encoded frames a session keeps (twice a turn's clip)."""
STALE_NOTE_S = 10.0
"""A note older than this is said to be from a while ago (the camera has sent nothing newer)."""


CAMERA_LABEL = "Camera: "
"""How each camera message opens: a neutral label, the same for every note (the model's prompt cache keeps it), that
names no one (a message that spoke of "the user's camera" was echoed as a reply's opening words)."""
CAMERA_GUIDANCE = ("Camera lines say what a text and face detector sees. Use them only when asked about it; asked what "
                   "it says, read its writing word for word.")
"""How to use the camera's readings: a system message of its own after the instructions (:data:`GUIDANCE`), from the
session's first note on, so the model's prompt cache keeps it for the rest of the session and each turn's camera
message holds only the note's facts."""


def camera_message(note: SceneNote, age_s: float) -> ChatMessage:
    """The scene note as a system message for just before the user's question: the question leads and stays the
    user's own words; the note is context, after the history, so the prompt cache keeps everything before it, and
    as short as the facts allow (a note that changed is read again on the turn's critical path). The guidance
    before the history says how to use it, and its example exchange (:data:`GUIDANCE_EXAMPLE`) shows a question
    about something else answered in its first words, so the model answers the question instead of repeating the
    camera message. The next turn's prompt is warmed with it when a reply completes and at the turn's start, where
    it changed, and as the session's first note comes (:class:`~bargein.session.camera_warms.CameraWarms`), never
    because a note changed while the user speaks."""
    writing = f'writing "{" ".join(note.text)}"' if note.text else "no writing"
    faces = {0: "no face", 1: "one face"}.get(note.faces, f"{note.faces} faces")
    facts = "; ".join(part for part in (writing, faces, note.light, note.motion) if part)
    when = " (from a while ago: nothing newer has come)" if age_s > STALE_NOTE_S else ""
    return ChatMessage("system", f"{CAMERA_LABEL}{facts}{when}.", private=True)


GUIDANCE = ChatMessage("system", CAMERA_GUIDANCE, private=True)
"""The guidance as the prompt carries it (private: the public prefix a session may share ends with the instructions)."""
GUIDANCE_EXAMPLE = (camera_message(SceneNote((), 1, "dim light", (), None, 0.0), 0.0),
                    ChatMessage("user", "What colour is grass?", private=True),
                    ChatMessage("assistant", "Grass is green.", private=True))
"""An exchange after the guidance where requests to read are quoted (:func:`quotes_reads`): a camera line, then a
question about something else answered in its first words. Told in words alone, the embedded 0.5B model opened a
third of its first replies by repeating the camera message or the guidance (later turns copied that opening from
the history), whatever the wording; shown this exchange, about one in forty. Where the model itself is asked to
read, it copies the example's answer instead ("Grass is green." for "what does this say?"), as it copied every
example tried (a request to read answered with the writing gave that writing for frames with none), so the example
is left out there. Read once per session with the guidance, it stays in the prompt cache."""


def quotes_reads(messages: list[ChatMessage]) -> bool:
    """Whether the prompt opens with the server's English instructions, with which a request to read what a fresh
    note shows is answered by quoting it (:meth:`SessionEyes.quote`), so the model is not asked to read."""
    return opens_with_instructions(messages) and messages[0].content == DEFAULT_INSTRUCTIONS


def with_guidance(messages: list[ChatMessage], *, example: bool) -> list[ChatMessage]:
    """``messages`` with :data:`GUIDANCE` after the instructions (the first message, a system message no user
    wrote), or first where there are none; followed by its example exchange (:data:`GUIDANCE_EXAMPLE`) with
    ``example`` (where :func:`quotes_reads`)."""
    at = 1 if opens_with_instructions(messages) else 0
    return [*messages[:at], GUIDANCE, *(GUIDANCE_EXAMPLE if example else ()), *messages[at:]]


class SessionEyes(QuietObserver):
    """A session's frames: checks each ``input_image``, keeps the sampled ones and the newest scene note."""

    def __init__(self, seeing: Seeing | None = None, *, config: Callable[[], SessionConfig] | None = None,
                 progress: Progress | None = None, emit: Callable[[Outgoing], None] | None = None,
                 limits: SamplerLimits | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = seeing.settings if seeing is not None else VisionSettings()
        self.pool = seeing.pool if seeing is not None else None
        self.sampler = FrameSampler(limits)
        self.note: SceneNote | None = None
        self.note_seen_s = 0.0
        """When the camera last showed the note's scene (monotonic clock): the arrival of the frame the note
        describes, or of a later near-duplicate of it while it is still the newest scene."""
        self.age_at_commit_s: tuple[float | None, float | None] | None = None
        """When the user's last turn was committed, the age of the note its reply's prompt quotes and of the newest
        (which a quoted reading quotes); None: already reported."""
        self._note_frame: Frame | None = None
        self._encodings: dict[tuple[int, int, int], tuple[Frame, str]] = {}
        """Frames encoded at a planned size (oldest first, at most :data:`ENCODINGS_KEPT`): a speculative reply's
        prompt and the reply's own share them."""
        self._quoting = False
        self._noted_turns: dict[tuple[int, str], ChatMessage] = {}
        """The note each recent turn's prompt put before its question, by (the question's place among the user's
        messages, its words); at most :data:`NOTED_TURNS_KEPT`."""
        self._newest_seen_s = self._note_arrived_s = 0.0
        self._config, self._progress, self._emit, self._clock = config, progress, emit, clock
        self.pins = NotePins(self._turn_note_now, lambda note, age_s: camera_message(note, age_s).content,
                             lambda: self._clock(), self._reader_behind)
        """The notes pinned for the turn's reply, and the one the model last read."""
        self._last_read: Frame | None = None
        self.rewarm: Callable[[str], None] | None = None
        """Warms the reply's prompt with the user's words so far (the session's executor): called with no words
        when a reply completes, when a turn's speech starts and when the session's first note comes, as
        :class:`CameraWarms` decides (None once the session closed)."""
        self.model_reads_warms: Callable[[], bool] = lambda: True
        """Whether a warm asked for now reaches a model that keeps what it read (the session's speculator says: not
        where the model cannot evaluate a prompt ahead, nor while it serves a reply, when the warm is skipped)."""
        self._warms = CameraWarms(self._message_text, self._replies_follow, lambda: self.model_reads_warms())
        self._message: tuple[SceneNote, bool, ChatMessage] | None = None
        """The camera message last made: its note, whether that note was stale, the message (made once per note)."""
        self._read_at_silence: bool | None = None
        """Whether a scene read was running when the turn's last silence began (the hold starts no new read, one
        already running goes on): reported with the reply's prompt as ``scene_read_at_silence`` (None: no pool)."""

    @property
    def image_token_budget(self) -> int:
        """The image tokens a turn may spend: the session's own budget, else the server's."""
        own = self._config().image_token_budget if self._config is not None else None
        return self.settings.image_token_budget if own is None else own

    def note_age_s(self) -> float | None:
        """How long since the camera last showed the newest note's scene (None: no note yet)."""
        return None if self.note is None else self._clock() - self.note_seen_s

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
            self.offer(frame)
        return tuple(frames)

    async def take_frame(self, message: ce.CameraFrame, at_ms: float) -> str:
        """A camera frame (``bargein.camera.frame``): checked like an image item, then offered to the sampler;
        says what became of it (``kept``, ``duplicate``, ``rate``)."""
        try:
            frame = await asyncio.get_running_loop().run_in_executor(_decoders, decode_data_url, message.image_url,
                                                                     at_ms)
        except ImageRejected as rejected:
            raise ProtocolError(rejected.message, code=rejected.code, param="image_url",
                                event_id=message.event_id) from None
        return self.offer(frame)

    def offer(self, frame: Frame) -> str:
        """Give the sampler a checked frame; a new scene goes to the scene pool to be read, and a near-duplicate
        says the newest scene is still in view (its note, once made, is that much younger)."""
        outcome = self.sampler.offer(frame)
        self._newest_seen_s = self._clock()
        if self.note is not None and self._note_frame is self.sampler.newest:
            self.note_seen_s = self._newest_seen_s
        if outcome != "duplicate" and self.pool is not None:
            arrived = self._newest_seen_s
            self.pool.submit(self, frame, self._last_read, lambda note: self._noted(note, frame, arrived))
            self._last_read = frame
        return outcome

    def _noted(self, note: SceneNote, frame: Frame, arrived_s: float) -> None:
        if self.note is not None and arrived_s < self._note_arrived_s:
            return  # a note of an older frame than the one already noted
        # still the newest scene: the camera showed it until its last near-duplicate; else until it arrived
        shown_s = self._newest_seen_s if frame is self.sampler.newest else arrived_s
        first = self.note is None
        self.pins.replacing(self.note, self.note_seen_s)
        self.note, self.note_seen_s, self._note_frame, self._note_arrived_s = note, shown_s, frame, arrived_s
        if first and self._warms.on_first_note():
            self._warm_next_turn()
            self.pins.follow_read(self._warms.warmed)
        if self._emit is not None:
            self._emit(Outgoing(event("bargein.see.note", note=note.line(), frame_at_ms=round(note.frame_at_ms))))

    def context(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """The messages as a reply's model would read them now, without taking the turn's frames: earlier turns'
        images left out; in ``notes`` mode, once the session has a note, the guidance after the instructions
        (:func:`with_guidance`) and the scene note as a system message just before the last user message; in
        ``native`` mode the frames the turn would send (:meth:`FrameSampler.peek_turn`) on that message. No side
        effects: a speculative reply's prompt is built with it, and matches the real reply's (so the reply adopts
        it) while the note stands and the camera has shown nothing new."""
        stripped = [replace(m, images=()) if m.images else m for m in messages]
        last_user = next((i for i in range(len(stripped) - 1, -1, -1) if stripped[i].role == "user"), None)
        if last_user is None:
            return stripped
        if self.settings.mode == "native":
            sent = self._turn_images()
            if sent:
                stripped[last_user] = replace(stripped[last_user], images=tuple(ChatImage(s.data_url) for s in sent))
            return stripped
        message = self.turn_message()
        noted = self._notes_before(stripped)
        if message is not None:
            noted[last_user] = message
        prompt = [m for i, message in enumerate(stripped) for m in ((noted[i], message) if i in noted else (message,))]
        return with_guidance(prompt, example=quotes_reads(prompt)) if noted else prompt

    def _notes_before(self, messages: list[ChatMessage]) -> dict[int, ChatMessage]:
        """Where earlier turns' prompts had a note, by message index: an earlier question keeps the note it was
        asked with, so the model's prompt cache holds everything up to this turn's note (moving the note along
        would make every turn evaluate the last question and answer again)."""
        users = [i for i, m in enumerate(messages) if m.role == "user"]
        return {i: self._noted_turns[(k, messages[i].content)] for k, i in enumerate(users[:-1])
                if (k, messages[i].content) in self._noted_turns}

    def _remember_note(self, messages: list[ChatMessage], note: ChatMessage) -> None:
        """Keep the note the reply's prompt put before its question, for the later turns' prompts."""
        users = [m for m in messages if m.role == "user"]
        if users:
            self._noted_turns[(len(users) - 1, users[-1].content)] = note
            while len(self._noted_turns) > NOTED_TURNS_KEPT:
                self._noted_turns.pop(next(iter(self._noted_turns)))

    def _reader_behind(self) -> bool:
        """Whether the camera has shown a newer scene than the newest note's (not read yet: near-duplicates of the
        note's frame are not newer scenes)."""
        return self.note is not None and self._note_frame is not self.sampler.newest

    def _turn_note_now(self) -> Seen | None:
        """The newest note and its age."""
        age = self.note_age_s()
        return None if self.note is None or age is None else (self.note, age)

    def turn_message(self) -> ChatMessage | None:
        """The camera message a reply's prompt would put before its question now, in ``notes`` mode (None: no note,
        or ``native`` mode): :func:`camera_message` of :meth:`NotePins.turn_note`, made once per note (and once more
        when it turns stale), so the turn's prompts, warms and kept notes all quote the same message."""
        seen = self.pins.turn_note()
        if seen is None or self.settings.mode == "native":
            return None
        note, age_s = seen
        stale = age_s > STALE_NOTE_S
        if self._message is None or self._message[0] is not note or self._message[1] != stale:
            self._message = (note, stale, camera_message(note, age_s))
        return self._message[2]

    def quote(self, messages: list[ChatMessage], instructions: str) -> str | None:
        """The reply's words when the user's last message asks to read what the camera shows, in ``notes`` mode with
        the server's English instructions and a note that is not stale: the writing quoted (:mod:`bargein.see.quoting`);
        None: the model answers."""
        last_user = next((m for m in reversed(messages) if m.role == "user"), None)
        seen = self.pins.turn_note(self.pins.pinned_newest)  # no model reads it: the newest at the silence
        if (self.settings.mode == "native" or instructions != DEFAULT_INSTRUCTIONS or last_user is None
                or seen is None or seen[1] > STALE_NOTE_S):
            return None
        answer = reading_answer(seen[0], last_user.content)
        self._quoting = answer is not None
        return answer

    def prompt(self, response_id: str, messages: list[ChatMessage]) -> list[ChatMessage]:
        """The messages a reply's model reads: :meth:`context`, the turn's frames then taken (in ``native`` mode
        the tokens they cost go to the turn's ledger, as does the age of the note the reply quotes, as it was when
        the turn was committed, ``scene_note_age_ms``)."""
        ages = [None if age is None else round(1000 * age) for age in self.age_at_commit_s or (None, None)]
        age_ms, newest_ms = ages[self._quoting], ages[1]
        if age_ms is not None and self._progress is not None:
            self._progress(response_id, "scene_note_age_ms", age_ms)
            if newest_ms is not None and newest_ms != age_ms:  # the reply quotes an older note, read already
                self._progress(response_id, "scene_newest_age_ms", newest_ms)
        self.age_at_commit_s, self._quoting = None, False
        if self._read_at_silence is not None and self._progress is not None:
            self._progress(response_id, "scene_read_at_silence", int(self._read_at_silence))
            self._read_at_silence = None
        prompt = self.context(messages)
        message = self.turn_message()
        if message is not None:
            self._remember_note(messages, message)
        self.pins.unpin()  # the turn's reply has its prompt: the next turn's are not pinned
        if self.settings.mode == "native":
            tokens = sum(s.cost.tokens for s in self._turn_images())
            self.sampler.take_turn()
            if tokens and self._progress is not None:
                self._progress(response_id, "image_tokens", tokens)
        return prompt

    def _turn_images(self) -> list[SentImage]:
        """The turn's frames as the model gets them now, within the budget (each frame encoded once per size)."""
        return images_for_turn(self.sampler.peek_turn(), self.settings, self.image_token_budget, self._encoded)

    def _encoded(self, frame: Frame, cost: ImageCost) -> str:
        key = (id(frame), cost.width, cost.height)
        held = self._encodings.get(key)
        if held is not None and held[0] is frame:
            return held[1]
        url = encode_resized(frame, cost)
        self._encodings[key] = (frame, url)
        while len(self._encodings) > ENCODINGS_KEPT:
            self._encodings.pop(next(iter(self._encodings)))
        return url

    def close(self) -> None:
        """The session ended: its frame waiting for the scene reader is dropped, its frames freed."""
        if self.pool is not None:
            self.pool.forget(self)
        self.sampler = FrameSampler(self.sampler.limits)
        self._last_read = self._note_frame = None
        self._encodings.clear()
        self._noted_turns.clear()
        self.rewarm = None  # a read still running when the session ended warms nothing

    def on_reply_closed(self, response_id: str, status: str, sent_ms: float, heard_ms: float, *,
                        output_queued: bool | None = None, playing: bool = False) -> None:
        """A reply completed: the next turn's prompt is known up to the user's words (the history as it now stands,
        then the camera message), so it is warmed now, while the reply plays and before the user speaks. New notes
        after it warm nothing but the session's first (with a new scene every frame they would keep the model busy):
        the next turn's speech start warms the message again where it changed (:class:`CameraWarms`)."""
        if status == "completed" and self._warms.on_reply_completed():
            self._warm_next_turn()
        self.pins.follow_read(self._warms.warmed)

    def _message_text(self) -> str | None:
        message = self.turn_message()
        return None if message is None else message.content

    def _replies_follow(self) -> bool:
        detection = self._config().audio.input.turn_detection if self._config is not None else None
        return detection is not None and detection.create_response

    def _warm_next_turn(self) -> None:
        """Warm the next turn's prompt with the camera message and no words yet, so the model has read the message
        before the turn's silence (the core's own warm waits for a partial of the words, a second or more into the
        turn)."""
        if self.rewarm is not None:
            self.rewarm("")

    def on_action(self, action: v.Action) -> None:
        """A turn's speech opens and closes the clip of frames it keeps; its commit fixes the note's age, which the
        reply to it reports; from its silence to the reply's first audio it holds the server's scene reads."""
        if isinstance(action, v.SpeechStarted):
            self.sampler.speech_started()
        elif isinstance(action, v.SpeechStopped):
            self.sampler.speech_stopped()
        elif isinstance(action, v.CommitBuffer):
            self.age_at_commit_s = self.pins.ages_now()
        if self._warms.on_action(action):
            self._warm_next_turn()
        self.pins.follow_read(self._warms.warmed)
        if isinstance(action, v.SilenceBegan):
            self.pins.pin()
        elif isinstance(action, v.SpeechResumed | v.SegmentAbandoned):
            self.pins.unpin()
        if self.pool is None:
            return
        if isinstance(action, v.SilenceBegan):  # the guess and the prefetched reply start: the critical path
            self._read_at_silence = self.pool.reading > 0
            self.pool.hold(self)
        elif isinstance(action, v.SpeechResumed | v.SegmentAbandoned | v.ForwardAudio | v.CompleteReply
                        | v.CancelReply):
            self.pool.release(self)
