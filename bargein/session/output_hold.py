"""Where the machine's provisional hold of a reply's audio (:mod:`~bargein.session.core.onset_hold`) is carried out.

The transport that plays the reply decides what a hold can stop: over WebRTC the server's own reply track is the
caller's playback, so a hold stops its packets at once (:class:`~bargein.server.webrtc.output_hold.TrackHold`).
Over the WebSocket and a phone line the client already holds the audio sent ahead of its playback (the pacer's
lead), which a hold of the next deltas would not stop: those keep sending, and stop at the confirmation
(``speech_started`` and the pause's purge, or a phone line's ``clear``), as they always did. Every hold and release
is counted, so the hiccups a released hold leaves in a reply are visible (:attr:`OutputHold.released`).
"""

from __future__ import annotations


class OutputHold:
    """Carries out holds and releases of a reply's outbound audio; this base keeps sending (its transport's client
    plays from its own buffer) and only counts them."""

    stops_audio = False
    """A hold stops what the listener hears sooner on this transport: only then does the session run the half-hop
    VAD stream whose probes take holds (elsewhere it would cost Silero's CPU for nothing, the turn's decisions being
    the main grid's either way)."""

    def __init__(self) -> None:
        self.held = 0
        """Holds taken (each a half-hop probe over a playing reply)."""
        self.released = 0
        """Holds released (no barge-in followed: the reply played on after a hiccup, where the transport stopped)."""

    def hold(self, response_id: str) -> None:
        """The machine's :class:`~bargein.session.core.speech_vocabulary.HoldReplyOutput`."""
        self.held += 1
        self.stop(response_id)

    def release(self, response_id: str) -> None:
        """The machine's :class:`~bargein.session.core.speech_vocabulary.ReleaseReplyOutput`."""
        self.released += 1
        self.go_on(response_id)

    def stop(self, response_id: str) -> None:
        """Stop sending ``response_id``'s audio, keeping its place (this transport: nothing to do)."""

    def go_on(self, response_id: str) -> None:
        """Send ``response_id``'s audio on from where it was held (this transport: nothing to do)."""
