"""A WebRTC call's provisional holds: the reply track stops sending a held reply's packets at once and plays on
from the same sample when the hold is released (:class:`~bargein.session.output_hold.OutputHold`)."""

from __future__ import annotations

from bargein.server.webrtc.tracks import ReplyAudioTrack
from bargein.session.output_hold import OutputHold


class TrackHold(OutputHold):
    """Holds carried out on the call's reply track. A confirmed hold needs nothing here: the pause that confirms it
    cuts the track (``bargein.reply.paused``), and what the caller heard is what went on the wire before the hold."""

    stops_audio = True

    def __init__(self, track: ReplyAudioTrack) -> None:
        super().__init__()
        self.track = track

    def stop(self, response_id: str) -> None:
        """No packet of ``response_id`` leaves after this one."""
        self.track.hold(response_id)

    def go_on(self, response_id: str) -> None:
        """Its packets leave again, from where they were held."""
        self.track.release(response_id)
