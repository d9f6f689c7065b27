"""A session runs the half-hop VAD stream over a live reply and feeds its frames to the machine: speech that the
main grid would hear only at its next frame's end holds the reply's audio at once, and the main grid's onset then
begins the turn and pauses the reply, where it would with no probe."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.core import vocabulary as v
from bargein.session.observers import QuietObserver
from bargein.session.output_hold import OutputHold
from tests.support.session_harness import TONE_S, CountingLanguageModel, Harness, pcm_appends

MAIN_FRAME_MS = 32


class _Decided(QuietObserver):
    """The kinds of the machine's actions, in order."""

    def __init__(self) -> None:
        self.kinds: list[type] = []

    def on_action(self, action: v.Action) -> None:
        self.kinds.append(type(action))


class _StoppingHold(OutputHold):
    """A transport whose holds stop the audio heard (as WebRTC's reply track), recording them."""

    stops_audio = True

    def __init__(self) -> None:
        super().__init__()
        self.stopped: list[str] = []

    def stop(self, response_id: str) -> None:
        self.stopped.append(response_id)


@pytest.mark.parametrize(("half_hop", "stops_audio"), [(True, True), (False, True), (True, False)])
async def test_over_a_reply_a_half_hop_frame_holds_the_reply_before_the_main_grid_begins_the_turn(
        half_hop: bool, stops_audio: bool) -> None:
    """Where the transport's hold stops what is heard; elsewhere (the WebSocket) the half-hop stream does not run."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(("stop",)), CountingLanguageModel(), FakeSynthesizer()))
    decided = _Decided()
    h.session.observers.append(decided)
    hold = h.session.executor.output_hold = _StoppingHold() if stops_audio else OutputHold()
    probing = half_hop and stops_audio
    settings = h.session.machine.settings
    h.session.feed(v.SettingsChanged(replace(settings, interruption=replace(settings.interruption,
                                                                            half_hop_onset=half_hop))))
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.output_audio.delta")
    # the tone begins 100 samples (at 16 kHz) after a main frame's start: the half-hop frame ending 156 samples
    # into it hears it 256 samples before the main frame does
    lead = np.zeros(int((20 * 512 + 100) * 1.5))
    for chunk in pcm_appends(np.concatenate([lead, TONE_S[:12_000], np.zeros(12_000)])):
        await h.send(type="input_audio_buffer.append", audio=chunk)
    await h.drain(until="input_audio_buffer.speech_started")
    onset_ms = h.events[-1]["audio_start_ms"]
    assert onset_ms % MAIN_FRAME_MS == 0, onset_ms  # the main grid's onset either way
    await h.drain(until="bargein.reply.paused")
    holds = [kind for kind in decided.kinds if kind in (v.HoldReplyOutput, v.ReleaseReplyOutput, v.SpeechStarted)]
    assert holds == ([v.HoldReplyOutput, v.SpeechStarted] if probing else [v.SpeechStarted])
    assert (hold.held, hold.released) == (int(probing), 0)
    assert not isinstance(hold, _StoppingHold) or len(hold.stopped) == int(probing)
    await h.session.close()
