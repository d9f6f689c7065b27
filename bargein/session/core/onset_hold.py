"""The provisional hold: a half-hop onset probe stops the playing reply's audio at once, and the main grid decides.

A probe (:class:`~bargein.session.core.vocabulary.OnsetProbe`) at or over the threshold while a live reply plays,
unpaused, and nobody's turn is being spoken, begins no turn: the reply's outbound audio is held
(:class:`~bargein.session.core.speech_vocabulary.HoldReplyOutput`; the shell stops sending it and keeps its place,
and the client is told nothing). The main VAD grid then decides as it would with no probe at all, so the turn's
onset, its segment, the storm guard and the verdicts see exactly what they see without the probe:

- a main-grid onset within the window pauses the reply (or cancels it, with listening off): the pause *confirms*
  the hold, which ends with no action of its own (the pause's stop stands, and what was heard is where the hold
  stopped the audio, since nothing was sent after it);
- no pause by the end of the window (the main frames stayed under the threshold, or began a turn that does not
  pause the reply, as in confirm mode), or the reply ended by itself, or the probe is no longer wanted: the hold is
  *released* (:class:`~bargein.session.core.speech_vocabulary.ReleaseReplyOutput`) and the reply plays on from
  where it was held.

The window: a probe frame ends half a frame (16 ms) after a main frame's end. The next main frame ends 16 ms after
the probe, holding only 16 ms of audio the probe did not hear; the one after it (32 ms later) is the first main
frame wholly after the probe's start plus half a frame, and the main stream often needs that one frame more where
the probe fired first (its recurrent state climbs a frame later). So the hold waits for the main frames ending up
to one and a half frames after the probe's end (:data:`WINDOW_FRAMES`): two main frames, about 48 ms.

Pure, as the rest of the core: time is stream time carried by the events.
"""

from __future__ import annotations

from dataclasses import dataclass

from bargein.session.core import speech_vocabulary as sv

WINDOW_FRAMES = 1.5
"""How long after the probe's end the main grid may confirm the hold, in frames (the probe's own length): the next
two main frames."""


@dataclass
class OnsetHold:
    """The provisional hold of the live reply's audio: none, or held (``response_id`` until ``until_ms``)."""

    response_id: str | None = None
    until_ms: float = 0.0
    """Stream time by which a main frame must have confirmed the hold (a frame ending there is the last chance)."""

    @property
    def held(self) -> bool:
        """The reply's audio is held now."""
        return self.response_id is not None

    def take(self, response_id: str, probe_start_ms: float, probe_end_ms: float) -> sv.HoldReplyOutput | None:
        """A probe over the threshold holds ``response_id``'s audio (none while a hold stands)."""
        if self.response_id is not None:
            return None
        self.response_id = response_id
        self.until_ms = probe_end_ms + WINDOW_FRAMES * (probe_end_ms - probe_start_ms)
        return sv.HoldReplyOutput(response_id, probe_start_ms)

    def confirm(self) -> None:
        """The reply's pause or cancel took the hold over: its stop stands, and nothing more is due."""
        self.response_id = None

    def release(self) -> sv.ReleaseReplyOutput | None:
        """The hold ends and the reply plays on (the action for the shell; None when nothing was held)."""
        response_id, self.response_id = self.response_id, None
        return None if response_id is None else sv.ReleaseReplyOutput(response_id)

    def settle(self, *, live_id: str | None, paused: bool, turn_begun: bool, now_ms: float,
               wanted: bool) -> sv.ReleaseReplyOutput | None:
        """After an event: confirmed by its reply's pause; released once its reply is gone (a cancel confirms it
        first, :meth:`confirm`), a turn began that did not pause it, the window passed, or probes are no longer
        wanted (the settings changed); else held on."""
        if self.response_id is None:
            return None
        if live_id == self.response_id and paused:
            self.confirm()
            return None
        if live_id != self.response_id or turn_begun or now_ms >= self.until_ms or not wanted:
            return self.release()
        return None
