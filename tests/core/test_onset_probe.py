"""The half-hop onset rule: a second VAD stream's frame (``OnsetProbe``, its end half a frame after a main frame's)
may begin the turn that pauses a playing reply, and decides nothing else."""

from __future__ import annotations

import pytest

from bargein.session import core as dx
from tests.support.timelines import Listening, of

HALF_MS = 16.0
ON = dx.TurnSettings(interruption=dx.Interruption(half_hop_onset=True))
OFF = dx.TurnSettings(interruption=dx.Interruption(half_hop_onset=False))
NO_INTERRUPT = dx.TurnSettings(interruption=dx.Interruption(enabled=False, half_hop_onset=True))
MANUAL = dx.TurnSettings(mode="manual", create_response=False, interruption=dx.Interruption(half_hop_onset=True))


def _probe(t: Listening, probability: float, *, back_ms: float = 0.0) -> list[dx.Action]:
    """A probe frame whose end is half a frame after the last main frame's (``back_ms`` earlier still)."""
    end = t.now_ms + HALF_MS - back_ms
    return t.feed(dx.OnsetProbe(end - 32.0, end, probability))


def _over_reply(settings: dx.TurnSettings = ON) -> tuple[Listening, str]:
    t = Listening(settings)
    reply = t.agent_speaking()
    t.silence(320)
    return t, reply


@pytest.mark.parametrize(("probability", "settings", "begins"), [
    (0.9, ON, True),
    (0.5, ON, True),  # at the threshold, as a main frame's onset
    (0.49, ON, False),
    (0.9, OFF, False),
    (0.9, NO_INTERRUPT, False),
])
def test_a_probe_over_a_playing_reply_begins_the_turn_at_its_own_start(
        probability: float, settings: dx.TurnSettings, begins: bool) -> None:
    t, reply = _over_reply(settings)
    start = t.now_ms + HALF_MS - 32.0
    actions = _probe(t, probability)
    started = of(actions, dx.SpeechStarted)
    assert bool(started) is begins
    assert bool(of(actions, dx.PauseReply)) is begins
    if begins:
        assert started[0].audio_start_ms == start
        assert t.machine.turn is not None and t.machine.turn.onset_ms == start
        assert of(actions, dx.PauseReply)[0].response_id == reply


def test_a_probe_decides_nothing_without_a_live_reply() -> None:
    """The start of an ordinary turn stays the main grid's: a probe between replies is ignored."""
    t = Listening(ON)
    t.silence(320)
    assert _probe(t, 0.95) == []
    assert t.machine.turn is None
    assert of(t.speech(32), dx.SpeechStarted), "the main frame still begins it"


def test_a_probe_neither_begins_a_second_turn_nor_moves_the_one_being_spoken() -> None:
    t, _ = _over_reply()
    t.speech(64)
    turn = t.machine.turn
    assert turn is not None and turn.speech_ms == 32.0  # the onset frame is not counted as speech
    assert _probe(t, 0.95) == [] and _probe(t, 0.01) == []
    assert t.machine.turn is turn and turn.speech_ms == 32.0 and turn.silence_since_ms is None


def test_a_probe_over_a_paused_reply_begins_nothing() -> None:
    """The reply waits for the verdict on a segment: a probe then is no new barge-in."""
    t, _ = _over_reply()
    t.speech(320)
    assert of(t.silence(544), dx.AwaitClassification)
    assert t.machine.reply is not None and t.machine.reply.paused
    assert _probe(t, 0.95) == []


def test_a_stale_probe_is_ignored() -> None:
    t, _ = _over_reply()
    assert _probe(t, 0.95, back_ms=HALF_MS + 1.0) == []
    assert t.machine.turn is None


def test_the_turn_a_probe_began_ends_on_the_main_frames() -> None:
    """Silence and the endpoint stay the main grid's: the main frames after a probe onset say silence, and the
    turn ends as a one-frame blip would have."""
    t, _ = _over_reply()
    _probe(t, 0.9)
    silent_from = t.now_ms
    ended = t.silence(544)
    stopped = of(ended, dx.SpeechStopped)
    assert stopped and stopped[0].audio_end_ms == silent_from
    assert of(ended, dx.AwaitClassification)


@pytest.mark.parametrize(("settings", "live_reply", "wanted"), [
    (ON, True, True),
    (ON, False, False),
    (OFF, True, False),
    (NO_INTERRUPT, True, False),
    (MANUAL, True, False),
])
def test_the_probe_stream_runs_while_a_reply_is_live(settings: dx.TurnSettings, live_reply: bool,
                                                     wanted: bool) -> None:
    t = Listening(settings)
    if live_reply:
        reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
        t.feed(dx.ReplyAudio(reply, "a0"))
    assert t.machine.wants_onset_probe is wanted
