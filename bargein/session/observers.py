"""The public way to watch a session: what the machine was fed, what it decided, what left the socket.

Observers are passed to :class:`~bargein.session.realtime_session.RealtimeSession` (or added with
``session.observe``). They see every event just after the machine takes it and every action just before
the shell carries it out, so an observer's records are in the machine's own order. The turn ledger
(``bargein.session.turn_ledger``) and the benches are observers; none of them reads session internals.
Observers must not raise and must not feed the session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from bargein.session.core.vocabulary import Action, Event
from bargein.session.outbound import Outgoing


class SessionObserver(Protocol):
    """What a session tells its observers."""

    def on_event(self, event: Event) -> None:
        """The machine took ``event``."""

    def on_action(self, action: Action) -> None:
        """The machine decided ``action``; the shell carries it out next."""

    def on_sent(self, item: Outgoing) -> None:
        """The transport wrote ``item``, a delta of a reply's output (``item.is_output``), to the client."""

    def on_reply_progress(self, response_id: str, stage: str, count: int) -> None:
        """A reply's pipeline reached ``stage`` (``llm_first_token``, ``tts_first_audio``, ``tokens``)."""

    def on_reply_closed(self, response_id: str, status: str, sent_ms: float, heard_ms: float, *,
                        output_queued: bool | None = None, playing: bool = False) -> None:
        """A reply's ``response.done`` went out: how much audio was sent and how much was heard.

        ``output_queued``: whether any delta of its output was queued (None: any of its audio, ``sent_ms > 0``).
        ``playing``: the client may still be playing it, so ``heard_ms`` (all of it) is not known yet:
        :meth:`on_reply_heard` tells it once the playback is over or cut.
        """

    def on_reply_heard(self, response_id: str, heard_ms: float) -> None:
        """A reply that closed while the client was playing it was played out or cut: ``heard_ms`` of it played."""


class QuietObserver:
    """An observer that ignores everything: subclass it and override what you need."""

    def on_event(self, event: Event) -> None:
        """Ignored."""

    def on_action(self, action: Action) -> None:
        """Ignored."""

    def on_sent(self, item: Outgoing) -> None:
        """Ignored."""

    def on_reply_progress(self, response_id: str, stage: str, count: int) -> None:
        """Ignored."""

    def on_reply_closed(self, response_id: str, status: str, sent_ms: float, heard_ms: float, *,
                        output_queued: bool | None = None, playing: bool = False) -> None:
        """Ignored."""

    def on_reply_heard(self, response_id: str, heard_ms: float) -> None:
        """Ignored."""


class ReplyClosedHook(QuietObserver):
    """An observer that hands each reply's close to ``hook`` and ignores the rest (for parts below the session,
    such as long-term memory, that learn after a turn but do not import the session)."""

    def __init__(self, hook: Callable[[str, str, float, float], None]) -> None:
        self.hook = hook

    def on_reply_closed(self, response_id: str, status: str, sent_ms: float, heard_ms: float, *,
                        output_queued: bool | None = None, playing: bool = False) -> None:
        """Pass the close on."""
        self.hook(response_id, status, sent_ms, heard_ms)


class FirstEventHook(QuietObserver):
    """An observer that calls ``hook`` once, after the machine took its first event: the client's first message
    was handled by then (the machine takes nothing before a client speaks), a ``session.update`` in it included."""

    def __init__(self, hook: Callable[[], None]) -> None:
        self.hook: Callable[[], None] | None = hook

    def on_event(self, event: Event) -> None:
        """Call the hook the first time."""
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
