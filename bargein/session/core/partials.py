"""When the turn being spoken is recognised before its endpoint, and what its words so far are used for.

While the user speaks, a partial recognition is due at most every ``Speculation.partial_every_ms`` (1 s in every
session), never two at once in a session (one still running holds the next back, which follows as soon as it is
in), and none in the turn's silences: the guess at the silence hears everything a partial would, and one would only
compete with it and the reply prefetched from it for the CPU (a partial already running finishes: the prompt warming
its words start saves the prefetch most of its prompt). A partial hears at most the turn's last
:data:`PARTIAL_WINDOW_MS`. The words it brings (and the guess's) are reported to the client while the turn is still
spoken; the words of a whole turn also warm the prompt when a reply could follow them (none is live, or the live one
is paused, cut where it paused as the prefetch's prompt will be). A turn longer than :data:`MAX_GUESS_MS` is not
recognised speculatively at its silence: its final recognition runs in slices. Pure: the machine decides, the shell
recognises and feeds the words back.
"""

from __future__ import annotations

from dataclasses import dataclass

from bargein.session.core.listen_vocabulary import GuessTranscribed, PartialTranscript
from bargein.session.core.settings import TurnSettings
from bargein.session.core.turn_records import Reply, Turn
from bargein.session.core.work_vocabulary import RecognisePartial, ReportPartial, WarmPrompt

PARTIAL_WINDOW_MS = 10_000.0
"""A partial hears at most the turn's last 10 s, so each costs the same however long the user talks (past that its
text is not a prefix of the next, so deltas stop until the final transcript, and it warms no prompt)."""
MAX_GUESS_MS = 28_000.0
"""A turn longer than this at its silence is not recognised speculatively: its final recognition runs in slices."""


def audio_start_ms(turn: Turn, settings: TurnSettings) -> float:
    """Where the recognitions of ``turn`` before its endpoint begin: its onset less the prefix padding, as the
    committed item will."""
    return max(0.0, turn.onset_ms - settings.endpointing.prefix_padding_ms)


def guess_due(turn: Turn, at_ms: float) -> bool:
    """The turn's silence at ``at_ms`` is worth a speculative recognition: the turn is not too long for one."""
    return at_ms - turn.onset_ms <= MAX_GUESS_MS


@dataclass
class Partials:
    """The partial recognitions of one session: whether one is running, and when the turn's last was asked for."""

    running: bool = False
    item_id: str | None = None
    asked_ms: float = 0.0
    """When the turn ``item_id``'s last partial was asked for (its onset before the first)."""

    def due(self, turn: Turn | None, now_ms: float, settings: TurnSettings) -> RecognisePartial | None:
        """The partial recognition due after the VAD frame that ended at ``now_ms``, if any."""
        every_ms = settings.speculation.partial_every_ms
        if turn is None or every_ms is None or turn.silence_since_ms is not None:
            return None
        if self.item_id != turn.item_id:
            self.item_id, self.asked_ms = turn.item_id, turn.onset_ms
        if self.running or now_ms - self.asked_ms < every_ms:
            return None
        self.running, self.asked_ms = True, now_ms
        return RecognisePartial(turn.item_id, audio_start_ms(turn, settings), now_ms, PARTIAL_WINDOW_MS)

    def heard(self, event: PartialTranscript | GuessTranscribed, turn: Turn | None, reply: Reply | None,
              settings: TurnSettings) -> list[ReportPartial | WarmPrompt]:
        """Words recognised of ``event``'s turn (a partial, or the plain guess at its silence): reported while that
        turn is still spoken; a partial of the whole turn also warms the prompt when a reply could follow it."""
        if isinstance(event, PartialTranscript):
            self.running = False  # (a partial that failed comes back empty)
            text = event.text
        elif event.primed is None and event.transcript is not None:
            text = event.transcript.text.strip()
        else:
            return []
        if turn is None or turn.item_id != event.item_id or settings.speculation.partial_every_ms is None:
            return []
        said: list[ReportPartial | WarmPrompt] = [ReportPartial(event.item_id, text)] if text else []
        if (isinstance(event, PartialTranscript) and text and event.whole and settings.vad
                and settings.create_response and settings.speculation.prefetch_reply
                and (reply is None or reply.paused)):  # not over a reply still playing, whose end is not known
            said.append(WarmPrompt(event.item_id, text))
        return said
