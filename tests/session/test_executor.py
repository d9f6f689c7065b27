"""How the executor carries out the machine's actions when a setting says not to interrupt, and the idle timer over a
reply the client still plays (fake engines)."""

from __future__ import annotations

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from tests.support.session_harness import Harness, SilentRecognizer, say_tone

TALK = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "talk"}]}
FILLER = "and then it goes on for a good while longer so that there is plenty to interrupt."


async def _finished_reply_still_playing(h: Harness, session: dict[str, object]) -> str:
    """``session`` set, a reply sent whole at once (the client has all of it still to play): its item's id."""
    await h.send(type="session.update", session=session)
    h.session.replies.output_lead_ms = 60_000.0
    h.no_play_out_wait()  # closed while the client still plays it
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="response.done")
    done = h.events[-1]["response"]
    return str(done["output"][0]["id"])


async def _idle_timer_over_a_reply_still_playing(h: Harness) -> tuple[list[int], str, float]:
    """A 5 s idle timeout and a reply the client has all of still to play: the delays the idle timer was armed
    with, the reply's item id and its audio's length."""
    armed: list[int] = []
    h.session.timers.arm_idle = armed.append  # type: ignore[method-assign]
    item_id = await _finished_reply_still_playing(
        h, {"audio": {"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}}}})
    return armed, item_id, h.session.conversation.get(item_id).audio_ms


async def test_speech_over_a_finished_reply_does_not_cut_its_history_when_interrupt_response_is_off() -> None:
    """``interrupt_response: false``: the user's speech does not interrupt the agent, so the client plays the reply
    on; the history must keep all of it (it was cut to the server's playback estimate at the onset)."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(filler=FILLER), FakeSynthesizer()))
    item_id = await _finished_reply_still_playing(
        h, {"audio": {"input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}}})
    await say_tone(h, 0.3, 0.0)
    await h.drain(until="input_audio_buffer.speech_started")
    item = h.session.conversation.get(item_id)
    assert item.heard_ms is None and item.status == "completed", (item.heard_ms, item.audio_ms)
    await h.session.close()


async def test_speech_over_a_finished_reply_still_cuts_it_by_default() -> None:
    h = Harness(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(filler=FILLER), FakeSynthesizer()))
    item_id = await _finished_reply_still_playing(h, {})
    await say_tone(h, 0.3, 0.0)
    await h.drain(until="input_audio_buffer.speech_started")
    item = h.session.conversation.get(item_id)
    assert item.heard_ms is not None and item.heard_ms < item.audio_ms - 1000.0
    await h.session.close()


async def test_the_idle_timeout_counts_from_the_end_of_the_replys_playback() -> None:
    """``idle_timeout_ms`` is applied after the last reply's audio has finished playing: a reply sent whole at
    once (the client still has all of it to play at its ``response.done``) arms the timer for the timeout plus
    what is left to play, not the timeout alone (the user would be prompted while the agent still speaks)."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(filler=FILLER), FakeSynthesizer()))
    armed, _, audio_ms = await _idle_timer_over_a_reply_still_playing(h)
    assert audio_ms > 2000 and armed, "a reply with seconds of audio, and the idle timer armed at its end"
    assert 5000 + audio_ms - 500 <= armed[-1] <= 5000 + audio_ms, (armed, audio_ms)
    await h.session.close()


async def test_the_idle_timeout_counts_from_a_truncate_that_cuts_the_replys_playback() -> None:
    """A client that stops playing the reply (a stop button) and truncates it there: the agent fell silent at the
    truncate, so the idle timeout counts from it, not from when all of the reply would have played."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(filler=FILLER), FakeSynthesizer()))
    armed, item_id, audio_ms = await _idle_timer_over_a_reply_still_playing(h)
    assert audio_ms > 2000 and armed[-1] > 5000 + audio_ms - 500, (armed, audio_ms)
    await h.send(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=300)
    await h.drain(until="conversation.item.truncated")
    assert armed[-1] == 5000, (armed, audio_ms)
    await h.session.close()


async def test_a_late_truncate_of_a_reply_the_user_already_cut_does_not_restart_the_idle_timeout() -> None:
    """The user coughed over a finished reply the client still played (the server took its playback as stopped
    there), the cough was judged noise and the idle timer armed from that verdict; the client's truncate comes after
    all that: the agent fell silent at the cough, not at the truncate, so the timer is not started over."""
    h = Harness(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(filler=FILLER), FakeSynthesizer()))
    armed, item_id, _ = await _idle_timer_over_a_reply_still_playing(h)
    await say_tone(h, 0.2, 0.8)
    await h.drain(until="bargein.listen.segment")
    assert h.events[-1]["decision"] == "noise" and armed[-1] == 5000, armed
    before = list(armed)
    await h.send(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=300)
    await h.drain(until="conversation.item.truncated")
    assert armed == before, (armed, before)
    await h.session.close()
