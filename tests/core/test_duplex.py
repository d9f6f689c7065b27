"""Scripted timelines for the pure duplex machine: stream time is the only clock."""

from __future__ import annotations

import pytest

from bargein.protocol import client_events as ce
from bargein.session import core as dx
from tests.support.timelines import NO_CLASSIFIER, Timeline, of

MANUAL = dx.TurnSettings.manual()


def test_a_turn_ends_after_the_silence_duration_and_starts_a_reply() -> None:
    t = Timeline()
    t.silence(320)
    started = of(t.speech(1024), dx.SpeechStarted)
    assert started == [dx.SpeechStarted("item_1", 320.0)]
    assert t.machine.phase is dx.Phase.USER_SPEAKING
    # 480 ms of silence is not yet the 500 ms endpoint
    assert not of(t.silence(480), dx.SpeechStopped)
    end = t.silence(32)
    assert of(end, dx.SpeechStopped) == [dx.SpeechStopped("item_1", 1344.0)]
    commit = of(end, dx.CommitBuffer)[0]
    assert commit.item_id == "item_1" and commit.start_ms == 320.0 - 300 and commit.end_ms == t.now_ms
    assert of(end, dx.StartReply) == [dx.StartReply("resp_2", "turn_detected")]
    assert t.machine.phase is dx.Phase.THINKING


def test_prefix_padding_never_reaches_before_the_stream_start() -> None:
    t = Timeline()
    t.speech(320)
    commit = of(t.silence(544), dx.CommitBuffer)[0]
    assert commit.start_ms == 0.0


def test_hysteresis_keeps_a_turn_going_through_middling_probabilities() -> None:
    t = Timeline()
    t.speech(320)
    # 0.4 is below the 0.5 onset threshold but above the 0.35 offset threshold: still speech
    assert not of(t.frames(0.4, 1000), dx.SilenceBegan)
    assert t.machine.phase is dx.Phase.USER_SPEAKING


def test_speech_resuming_before_the_endpoint_voids_the_silence() -> None:
    t = Timeline()
    t.speech(320)
    began = of(t.silence(320), dx.SilenceBegan)
    assert began == [dx.SilenceBegan("item_1", 320.0)]
    assert of(t.speech(64), dx.SpeechResumed) == [dx.SpeechResumed("item_1")]
    assert not of(t.silence(480), dx.CommitBuffer)
    assert of(t.silence(32), dx.CommitBuffer)


def _agent_speaking(t: Timeline) -> str:
    t.speech(640)
    response_id = of(t.silence(512), dx.StartReply)[0].response_id
    forwarded = t.feed(dx.ReplyAudio(response_id, "chunk-1"))
    assert forwarded == [dx.ForwardAudio(response_id, "chunk-1")]
    assert t.machine.phase is dx.Phase.AGENT_SPEAKING
    return response_id


def test_speech_during_the_reply_cancels_it_and_its_later_audio_is_dropped() -> None:
    t = Timeline()
    response_id = _agent_speaking(t)
    barge = t.speech(32)
    assert [type(a) for a in barge] == [dx.DisarmIdleTimer, dx.SpeechStarted, dx.CancelReply]
    assert of(barge, dx.CancelReply) == [dx.CancelReply(response_id, "turn_detected")]
    assert t.feed(dx.ReplyAudio(response_id, "chunk-2")) == [dx.DropAudio(response_id)]
    # the generation task ending later changes nothing: response.done went out with the cancel
    assert t.feed(dx.ReplyFinished(response_id)) == []
    assert t.machine.phase is dx.Phase.USER_SPEAKING


def test_interrupt_response_off_lets_the_reply_continue() -> None:
    t = Timeline(dx.TurnSettings(interruption=dx.Interruption(enabled=False), listening=NO_CLASSIFIER.listening))
    response_id = _agent_speaking(t)
    assert not of(t.speech(64), dx.CancelReply)
    assert t.feed(dx.ReplyAudio(response_id, "chunk-2")) == [dx.ForwardAudio(response_id, "chunk-2")]


def test_speech_exactly_at_reply_start_cancels_the_reply_before_any_audio() -> None:
    t = Timeline()
    t.speech(640)
    t.silence(480)
    # the frame that completes the endpoint is followed at once by a speech frame
    endpoint = t.silence(32)
    response_id = of(endpoint, dx.StartReply)[0].response_id
    barge = t.speech(32)
    assert of(barge, dx.CancelReply) == [dx.CancelReply(response_id, "turn_detected")]
    assert t.feed(dx.ReplyAudio(response_id, "first")) == [dx.DropAudio(response_id)]
    # the new turn gets its own reply once it ends
    t.speech(320)
    assert of(t.silence(512), dx.StartReply)[0].response_id != response_id


def test_two_barge_ins_in_a_row_each_cancel_their_own_reply() -> None:
    t = Timeline()
    first = _agent_speaking(t)
    assert of(t.speech(320), dx.CancelReply) == [dx.CancelReply(first, "turn_detected")]
    second = of(t.silence(512), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(second, "a"))
    assert of(t.speech(320), dx.CancelReply) == [dx.CancelReply(second, "turn_detected")]
    assert t.feed(dx.ReplyAudio(first, "late")) == [dx.DropAudio(first)]
    assert t.feed(dx.ReplyAudio(second, "late")) == [dx.DropAudio(second)]
    assert len(of(t.actions, dx.SpeechStarted)) == 3


def test_cancel_racing_the_last_audio_chunk() -> None:
    t = Timeline()
    response_id = _agent_speaking(t)
    # the client's cancel lands first: the last chunk, produced just after, is dropped
    assert t.feed(dx.ClientResponseCancel()) == [dx.CancelReply(response_id, "client_cancelled")]
    assert t.feed(dx.ReplyAudio(response_id, "last")) == [dx.DropAudio(response_id)]
    assert t.feed(dx.ReplyFinished(response_id)) == []


def test_cancel_arriving_after_the_reply_finished_is_an_error_not_a_second_done() -> None:
    t = Timeline()
    response_id = _agent_speaking(t)
    t.feed(dx.ReplyAudio(response_id, "last"))
    assert t.feed(dx.ReplyFinished(response_id)) == [dx.CompleteReply(response_id, "completed")]
    rejected = t.feed(dx.ClientResponseCancel(event_id="evt_9"))
    assert len(rejected) == 1 and isinstance(rejected[0], dx.Reject)
    assert rejected[0].error.code == "response_cancel_not_active"
    assert rejected[0].error.event_id == "evt_9"


def test_cancel_naming_another_response_is_rejected() -> None:
    t = Timeline()
    response_id = _agent_speaking(t)
    rejected = t.feed(dx.ClientResponseCancel("resp_other"))
    assert isinstance(rejected[0], dx.Reject)
    assert t.machine.active_response_id == response_id


def test_commit_with_an_empty_buffer_is_rejected() -> None:
    t = Timeline(MANUAL)
    rejected = t.feed(dx.ClientCommit(0.0, event_id="evt_1"))
    assert len(rejected) == 1 and isinstance(rejected[0], dx.Reject)
    assert rejected[0].error.code == "input_audio_buffer_commit_empty"
    assert rejected[0].error.event_id == "evt_1"
    assert t.feed(dx.ClientCommit(99.0))[0].__class__ is dx.Reject
    assert t.machine.phase is dx.Phase.LISTENING


def test_manual_turns_ignore_the_vad_and_wait_for_commit_and_response_create() -> None:
    t = Timeline(MANUAL)
    assert t.speech(640) == []
    committed = t.feed(dx.ClientCommit(640.0))
    assert committed == [dx.CommitBuffer("item_1", None, None)]
    assert t.feed(dx.ClientResponseCreate()) == [dx.DisarmIdleTimer(), dx.StartReply("resp_2", "client")]
    again = t.feed(dx.ClientResponseCreate(event_id="evt_2"))
    assert isinstance(again[0], dx.Reject) and again[0].error.code == "conversation_already_has_active_response"


def test_commit_during_speech_ends_the_turn_in_vad_mode() -> None:
    t = Timeline()
    t.speech(320)
    actions = t.feed(dx.ClientCommit(320.0))
    assert [type(a) for a in actions] == [dx.SpeechStopped, dx.CommitBuffer, dx.DisarmIdleTimer, dx.StartReply]
    assert t.machine.phase is dx.Phase.THINKING


def test_idle_timer_is_armed_after_a_reply_and_fires_a_reply_only_when_still_idle() -> None:
    t = Timeline(dx.TurnSettings(idle_timeout_ms=6000, listening=NO_CLASSIFIER.listening))
    response_id = _agent_speaking(t)
    assert t.feed(dx.ReplyFinished(response_id)) == [dx.CompleteReply(response_id, "completed"),
                                                     dx.ArmIdleTimer(6000)]
    fired = t.feed(dx.IdleTimerFired(t.now_ms))
    assert isinstance(fired[0], dx.IdleTimeout)
    assert of(fired, dx.StartReply)[0].trigger == "idle_timeout"
    # a stale timer firing while the user speaks does nothing
    t.speech(64)
    assert t.feed(dx.IdleTimerFired(t.now_ms)) == []


def test_time_going_backwards_is_an_illegal_transition() -> None:
    t = Timeline()
    t.speech(64)
    with pytest.raises(dx.IllegalTransition):
        t.machine.feed(dx.VadFrame(0.0, 32.0, 0.9))


def test_finishing_a_reply_that_never_started_is_an_illegal_transition() -> None:
    t = Timeline()
    with pytest.raises(dx.IllegalTransition):
        t.machine.feed(dx.ReplyFinished("resp_unknown"))


def test_switching_to_manual_mid_turn_drops_the_turn() -> None:
    t = Timeline()
    item_id = of(t.speech(320), dx.SpeechStarted)[0].item_id
    switched = t.feed(dx.SettingsChanged(MANUAL))
    assert of(switched, dx.SegmentAbandoned) == [dx.SegmentAbandoned(item_id)], "its partials and score stop"
    assert not of(switched, dx.ClearBuffer), "its audio stays for the client to commit"
    assert t.machine.phase is dx.Phase.LISTENING
    assert t.silence(1000) == []


def test_clearing_the_buffer_mid_turn_abandons_the_turn_before_the_clear() -> None:
    t = Timeline()
    item_id = of(t.speech(320), dx.SpeechStarted)[0].item_id
    assert t.feed(dx.ClientClear()) == [dx.SegmentAbandoned(item_id), dx.ClearBuffer()]
    assert t.machine.phase is dx.Phase.LISTENING


def test_switching_to_manual_between_turns_abandons_nothing() -> None:
    t = Timeline()
    t.speech(320)
    t.silence(1000)
    assert not of(t.feed(dx.SettingsChanged(MANUAL)), dx.SegmentAbandoned)


def test_a_rejected_response_create_leaks_no_parameters_into_the_next_reply() -> None:
    t = Timeline()
    response_id = _agent_speaking(t)
    text_only = ce.ResponseParams(output_modalities=["text"], conversation="none", instructions="whisper")
    rejected = t.feed(dx.ClientResponseCreate("evt_1", text_only))
    assert [type(a) for a in rejected] == [dx.Reject]
    t.feed(dx.ReplyFinished(response_id))
    # the next reply the VAD starts has the session's own parameters
    t.speech(640)
    assert of(t.silence(512), dx.StartReply)[0].params is None
    # an accepted create carries its parameters with the reply it starts, and only that one
    finished = of(t.actions, dx.StartReply)[-1].response_id
    t.feed(dx.ReplyFinished(finished))
    assert of(t.feed(dx.ClientResponseCreate("evt_2", text_only)), dx.StartReply)[0].params == text_only


def test_reply_text_is_forwarded_only_for_the_active_reply() -> None:
    t = Timeline()
    response_id = _agent_speaking(t)
    assert t.feed(dx.ReplyText(response_id, "Hello")) == [dx.ForwardText(response_id, "Hello")]
    t.feed(dx.ClientResponseCancel())
    assert t.feed(dx.ReplyText(response_id, " there")) == [dx.DropText(response_id)]


def test_a_reply_is_speaking_from_its_first_forwarded_audio_not_its_text() -> None:
    t = Timeline()
    t.speech(320)
    response_id = of(t.silence(544), dx.StartReply)[0].response_id
    assert t.feed(dx.ReplyText(response_id, "Hello")) == [dx.ForwardText(response_id, "Hello")]
    assert t.machine.phase is dx.Phase.THINKING
    assert t.feed(dx.ReplyAudio(response_id, "a0")) == [dx.ForwardAudio(response_id, "a0")]
    assert t.machine.phase is dx.Phase.AGENT_SPEAKING


def test_idle_input_audio_is_trimmed_only_outside_a_turn_and_never_in_manual_mode() -> None:
    t = Timeline()
    assert t.feed(dx.AudioAppended(2000.0)) == [dx.TrimBuffer(1500.0)]
    t.speech(320)
    assert t.feed(dx.AudioAppended(t.now_ms)) == [], "a turn in progress keeps all its audio"
    manual = Timeline(MANUAL)
    assert manual.feed(dx.AudioAppended(2000.0)) == []


def test_a_turn_that_never_falls_silent_is_committed_at_the_longest_turn() -> None:
    t = Timeline()
    longest = dx.Endpointing().max_turn_ms
    first = of(t.speech(longest - 32), dx.SpeechStarted)[0].item_id
    assert not of(t.actions, dx.CommitBuffer)
    ended = t.speech(32)
    assert of(ended, dx.SpeechStopped) == [dx.SpeechStopped(first, t.now_ms)]
    assert [(c.item_id, c.end_ms) for c in of(ended, dx.CommitBuffer)] == [(first, t.now_ms)]
    second = of(t.speech(32), dx.SpeechStarted)[0].item_id
    assert second != first, "the speech goes on as a new turn"
    commit = of(t.silence(544), dx.CommitBuffer)[0]
    assert commit.item_id == second and commit.start_ms == longest, "no padding from audio committed already"
    assert of(t.actions, dx.StartReply) == [dx.StartReply("resp_3", "turn_detected")], "only the ended turn is answered"


def test_a_turn_committed_at_the_longest_is_judged_but_never_answered() -> None:
    from tests.support.timelines import Listening

    t = Listening()
    reply = t.agent_speaking()
    longest = dx.Endpointing().max_turn_ms
    ended = t.speech(longest)
    item = of(ended, dx.SpeechStarted)[0].item_id
    assert of(ended, dx.PauseReply) == [dx.PauseReply(reply, item)]
    assert of(ended, dx.AwaitClassification) == [dx.AwaitClassification(item)]
    assert t.feed(dx.SegmentClassified(item, "query")) == [dx.ResumeReply(reply)], \
        "no cut, no answer (nothing says the user finished): the reply goes on, as after noise"
    assert item not in [a.item_id for a in of(t.actions, dx.DiscardSegment)], "it stays in the conversation"


def test_a_turn_whose_longest_falls_in_a_short_dip_is_still_unended() -> None:
    from tests.support.timelines import Listening

    t = Listening()
    reply = t.agent_speaking()
    longest = dx.Endpointing().max_turn_ms
    item = of(t.speech(longest - 64), dx.SpeechStarted)[0].item_id
    ended = t.silence(96)  # a dip the VAD calls silence, far short of the endpoint, when the longest comes
    assert of(ended, dx.AwaitClassification) == [dx.AwaitClassification(item)]
    assert t.feed(dx.SegmentClassified(item, "query")) == [dx.ResumeReply(reply)]
