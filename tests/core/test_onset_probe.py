"""The half-hop onset rule: a second VAD stream's frame (``OnsetProbe``, its end half a frame after a main frame's)
over a playing reply holds the reply's audio (``HoldReplyOutput``) and begins no turn; the main grid confirms the
hold by pausing the reply within two main frames, or the hold is released (``ReleaseReplyOutput``)."""

from __future__ import annotations

import random

import pytest

from bargein.session import core as dx
from tests.support.timelines import Listening, of

HALF_MS = 16.0
ON = dx.TurnSettings(interruption=dx.Interruption(half_hop_onset=True))
OFF = dx.TurnSettings(interruption=dx.Interruption(half_hop_onset=False))
NO_INTERRUPT = dx.TurnSettings(interruption=dx.Interruption(enabled=False, half_hop_onset=True))
NO_LISTENING = dx.TurnSettings(listening=dx.Listening(classify=False),
                               interruption=dx.Interruption(half_hop_onset=True))
MANUAL = dx.TurnSettings(mode="manual", create_response=False, interruption=dx.Interruption(half_hop_onset=True))
HOLDS = (dx.HoldReplyOutput, dx.ReleaseReplyOutput)


def _probe(t: Listening, probability: float, *, back_ms: float = 0.0) -> list[dx.Action]:
    """A probe frame whose end is half a frame after the last main frame's (``back_ms`` earlier still)."""
    end = t.now_ms + HALF_MS - back_ms
    return t.feed(dx.OnsetProbe(end - 32.0, end, probability))


def _over_reply(settings: dx.TurnSettings = ON) -> tuple[Listening, str]:
    t = Listening(settings)
    reply = t.agent_speaking()
    t.silence(320)
    return t, reply


@pytest.mark.parametrize(("probability", "settings", "holds"), [
    (0.9, ON, True),
    (0.5, ON, True),  # at the threshold, as a main frame's onset
    (0.49, ON, False),
    (0.9, OFF, False),
    (0.9, NO_INTERRUPT, False),
])
def test_a_probe_over_a_playing_reply_holds_its_audio_and_begins_no_turn(
        probability: float, settings: dx.TurnSettings, holds: bool) -> None:
    t, reply = _over_reply(settings)
    start = t.now_ms + HALF_MS - 32.0
    actions = _probe(t, probability)
    assert actions == ([dx.HoldReplyOutput(reply, start)] if holds else [])
    assert t.machine.turn is None, "no speech_started, no pause: the client is told nothing"
    assert t.machine.reply is not None and not t.machine.reply.paused


@pytest.mark.parametrize("gap_frames", [0, 1])
def test_a_main_onset_within_two_frames_pauses_the_reply_and_takes_the_hold_over(gap_frames: int) -> None:
    t, reply = _over_reply()
    _probe(t, 0.9)
    assert t.silence(32 * gap_frames) == []
    onset = t.now_ms
    actions = t.speech(32)
    assert of(actions, dx.SpeechStarted)[0].audio_start_ms == onset, "the main grid's onset, as with no probe"
    assert of(actions, dx.PauseReply) == [dx.PauseReply(reply, of(actions, dx.SpeechStarted)[0].item_id)]
    assert not of(actions, dx.ReleaseReplyOutput), "the pause's stop stands: no second stop, no release"
    assert not t.machine.hold.held


def test_no_main_onset_within_two_frames_releases_the_hold() -> None:
    t, reply = _over_reply()
    _probe(t, 0.9)
    assert t.silence(32) == [], "one main frame is not yet the end of the window"
    assert t.silence(32) == [dx.ReleaseReplyOutput(reply)]
    assert t.machine.turn is None and not t.machine.hold.held
    assert of(t.speech(32), dx.PauseReply), "a later onset pauses the reply as ever"


def test_a_later_probe_may_hold_again_after_a_release() -> None:
    t, reply = _over_reply()
    _probe(t, 0.9)
    assert _probe(t, 0.9) == [], "one hold at a time"
    t.silence(64)
    assert _probe(t, 0.9) == [dx.HoldReplyOutput(reply, t.now_ms + HALF_MS - 32.0)]


def test_a_reply_that_ends_by_itself_while_held_releases_the_hold() -> None:
    """Its last audio plays out: the hold must not keep it from the wire."""
    t, reply = _over_reply()
    _probe(t, 0.9)
    actions = t.feed(dx.ReplyFinished(reply))
    assert of(actions, dx.CompleteReply) and actions[-1] == dx.ReleaseReplyOutput(reply)
    assert not t.machine.hold.held


def test_a_reply_the_client_cancels_while_held_ends_the_hold_without_a_release() -> None:
    """The cancel stops the audio too: playing it on until the cancel is carried out would be wrong."""
    t, reply = _over_reply()
    _probe(t, 0.9)
    actions = t.feed(dx.ClientResponseCancel(reply))
    assert of(actions, dx.CancelReply) and not of(actions, dx.ReleaseReplyOutput)
    assert not t.machine.hold.held


def test_with_listening_off_the_main_onset_cancels_the_reply_and_takes_the_hold_over() -> None:
    t = Listening(NO_LISTENING)
    t.silence(320)
    reply = of(t.feed(dx.ClientResponseCreate()), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a0"))
    assert of(_probe(t, 0.9), dx.HoldReplyOutput)
    actions = t.speech(32)
    assert dx.CancelReply(reply, "turn_detected") in actions and not of(actions, dx.ReleaseReplyOutput)
    assert not t.machine.hold.held


def test_switching_the_probe_off_while_held_releases_the_hold() -> None:
    t, reply = _over_reply()
    _probe(t, 0.9)
    assert t.feed(dx.SettingsChanged(OFF))[-1] == dx.ReleaseReplyOutput(reply)


def test_a_stale_probe_is_ignored() -> None:
    t, _ = _over_reply()
    assert _probe(t, 0.95, back_ms=HALF_MS + 1.0) == []
    assert not t.machine.hold.held


def test_a_probe_decides_nothing_without_a_live_reply() -> None:
    """The start of an ordinary turn stays the main grid's: a probe between replies is ignored."""
    t = Listening(ON)
    t.silence(320)
    assert _probe(t, 0.95) == []
    assert of(t.speech(32), dx.SpeechStarted), "the main frame still begins it"


def test_a_probe_neither_holds_nor_moves_the_turn_being_spoken() -> None:
    t, _ = _over_reply()
    t.speech(64)
    turn = t.machine.turn
    assert turn is not None and turn.speech_ms == 32.0  # the onset frame is not counted as speech
    assert _probe(t, 0.95) == [] and _probe(t, 0.01) == []
    assert t.machine.turn is turn and turn.speech_ms == 32.0 and turn.silence_since_ms is None


def test_a_probe_over_a_paused_reply_holds_nothing() -> None:
    """The reply waits for the verdict on a segment: a probe then is no new barge-in."""
    t, _ = _over_reply()
    t.speech(320)
    assert of(t.silence(544), dx.AwaitClassification)
    assert t.machine.reply is not None and t.machine.reply.paused
    assert _probe(t, 0.95) == []


def test_a_probe_in_confirm_mode_holds_nothing() -> None:
    """Confirm mode's onset does not pause the reply (OpenAI's clients play on): neither may a probe stop it."""
    t = Listening(ON)
    for _ in range(3):  # three barge-ins: the storm guard's confirm mode
        t.agent_speaking()
        t.speech(640)
        t.feed(dx.SegmentClassified(of(t.silence(544), dx.AwaitClassification)[0].item_id, "query"))
        t.feed(dx.ReplyFinished(str(t.machine.active_response_id)))
    assert t.machine.storm.mode == "confirm"
    t.speech(640)
    reply = of(t.feed(dx.SegmentClassified(of(t.silence(1056), dx.AwaitClassification)[0].item_id, "query")),
               dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(reply, "a0"))
    assert _probe(t, 0.95) == []


def _scripted(settings: dx.TurnSettings, probabilities: list[float], probes: list[float]) -> list[dx.Action]:
    """A reply, then main frames at ``probabilities`` with a probe after each (when the probe is on)."""
    t, _ = _over_reply(settings)
    for probability, probe in zip(probabilities, probes, strict=True):
        t.frames(probability, 32)
        if settings.interruption.half_hop_onset:
            _probe(t, probe)
    return t.actions


@pytest.mark.parametrize("seed", range(20))
def test_the_probe_changes_nothing_the_turn_core_decides(seed: int) -> None:
    """Onsets, segments, pauses and verdict waits are the main grid's alone: with the probe on, the actions are those
    of the probe off plus the holds and releases."""
    rng = random.Random(seed)
    probabilities = [rng.choice([0.05, 0.3, 0.45, 0.55, 0.9]) for _ in range(120)]
    probes = [rng.choice([0.05, 0.4, 0.6, 0.95]) for _ in probabilities]
    on = [a for a in _scripted(ON, probabilities, probes) if not isinstance(a, HOLDS)]
    assert on == _scripted(OFF, probabilities, probes)


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
