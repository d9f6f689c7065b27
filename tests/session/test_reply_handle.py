"""The reply handle on its own: output forwarded and held, a pause at the client's playback and a resume from exactly
there, what a cancel or an end keeps as heard, tool calls held over a pause, and the awaitable play-out."""

from __future__ import annotations

import asyncio

import pytest

from bargein.audio.codecs import AudioFormat
from bargein.session.core.vocabulary import AudioPiece
from bargein.session.history import Conversation
from bargein.session.outbound import Outbound
from bargein.session.playback import PlaybackEstimate
from bargein.session.reply_handle import ReplyHandle, ReplyWiring
from bargein.session.response_events import ReplyState, assistant_item
from bargein.session.tool_use import PendingCalls
from bargein.values import ToolCall, WordTiming

PCM24 = AudioFormat("audio/pcm", 24_000)
SECOND = b"\1\0" * 24_000


class Clock:
    """The playback estimate's clock, moved by hand."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _handle(clock: Clock, calls: list[str] | None = None) -> ReplyHandle:
    outbound = Outbound()
    pending = PendingCalls(lambda call_id: None, on_owed=lambda owed: None)
    if calls is not None:
        pending.add = calls.append  # type: ignore[method-assign]
    state = ReplyState("resp_1", assistant_item("item_a", audio=True), True, PCM24, "alloy")
    handle = ReplyHandle(state, ReplyWiring(outbound, Conversation(), pending),
                         playback=PlaybackEstimate(clock=clock))
    handle.open()
    return handle


def _sent(handle: ReplyHandle, ms: float) -> None:
    """The socket wrote ``ms`` of the reply's audio."""
    handle.playback.on_sent(ms)


def test_a_pause_cuts_where_the_client_played_and_a_resume_resends_from_exactly_there() -> None:
    clock = Clock()
    handle = _handle(clock)
    handle.forward_text("one two")
    handle.forward(AudioPiece(SECOND, 1000.0, [WordTiming("one", 0.0, 400.0), WordTiming("two", 500.0, 900.0)]))
    _sent(handle, 1000.0)
    clock.now_s += 0.45  # the client has played 450 ms
    handle.pause("item_user")
    assert handle.paused is not None and handle.paused.cut_ms == pytest.approx(450.0)
    assert not handle.gate.is_set(), "the pipeline waits"
    handle.hold(AudioPiece(SECOND, 1000.0, [WordTiming("three", 0.0, 400.0)]))
    handle.hold(" three")
    handle.resume()
    assert handle.paused is None and handle.gate.is_set()
    item = handle.state.item
    assert [w.word for w in item.words] == ["one", "two", "three"], "the words after the cut are sent again"
    assert item.audio_ms == pytest.approx(450.0 + 550.0 + 1000.0), "the tail from the cut, then what was held"
    assert item.parts[0].text == "one two three"
    assert bytes(handle.forwarded) == SECOND[:450 * 48] + SECOND[450 * 48:] + SECOND


def test_a_cancel_keeps_what_was_heard_up_to_the_pause() -> None:
    clock = Clock()
    handle = _handle(clock)
    handle.forward_text("one two")
    handle.forward(AudioPiece(SECOND, 1000.0, [WordTiming("one", 0.0, 200.0), WordTiming("two", 500.0, 900.0)]))
    _sent(handle, 1000.0)
    clock.now_s += 0.3
    handle.pause("item_user")
    clock.now_s += 5.0  # the estimate's clock runs on: the pause's cut point stands
    closing = handle.cancel("turn_detected")
    assert handle.ended and handle.token.cancelled and handle.token.reason == "turn_detected"
    assert handle.gate.is_set(), "a pipeline waiting on the pause wakes to see the cancel"
    assert closing.status == "cancelled" and closing.heard_ms == pytest.approx(300.0) and not closing.playing
    assert handle.state.item.heard_text() == "one"
    assert handle.state.closed


def test_a_reply_finished_whole_is_heard_in_full_only_once_the_client_has_played_it() -> None:
    clock = Clock()
    handle = _handle(clock)
    handle.forward(AudioPiece(SECOND, 1000.0, []))
    _sent(handle, 1000.0)
    clock.now_s += 0.2
    closing = handle.finish("completed")
    assert closing.status == "completed" and closing.playing and closing.heard_ms == 1000.0
    assert handle.cut_by_speech() == pytest.approx(200.0), "the user spoke 200 ms into the client's playback"
    assert handle.state.item.heard_ms == pytest.approx(200.0)
    assert handle.cut_by_speech() is None, "cut once"


def test_a_reply_closed_as_the_client_leaves_was_heard_as_far_as_it_played() -> None:
    clock = Clock()
    handle = _handle(clock)
    handle.forward(AudioPiece(SECOND, 1000.0, []))
    _sent(handle, 1000.0)
    clock.now_s += 0.6
    closing = handle.cancel("session closed", client_gone=True)
    assert closing.heard_ms == pytest.approx(600.0) and not closing.playing


def test_a_call_made_while_paused_is_announced_only_on_the_resume() -> None:
    calls: list[str] = []
    handle = _handle(Clock(), calls)
    handle.pause("item_user")
    handle.tool_call(ToolCall("get_weather", "call_1", '{"city": "Paris"}'))
    assert calls == [] and handle.state.calls == [], "the turn over the pause may still cut the reply"
    handle.resume()
    assert calls == ["call_1"] and [item.call.call_id for item in handle.state.calls if item.call] == ["call_1"]


def test_the_item_as_if_cancelled_cuts_only_a_paused_spoken_reply() -> None:
    clock = Clock()
    handle = _handle(clock)
    handle.forward(AudioPiece(SECOND, 1000.0, []))
    _sent(handle, 1000.0)
    assert handle.item_as_if_cancelled() is handle.state.item, "playing on: no cut known"
    clock.now_s += 0.25
    handle.pause("item_user")
    cut = handle.item_as_if_cancelled()
    assert (cut.audio_ms, cut.heard_ms) == (1000.0, pytest.approx(250.0))
    assert handle.state.item.heard_ms is None, "the live item is untouched"


async def test_played_out_waits_for_the_clients_last_sample_or_the_end() -> None:
    clock = Clock()
    handle = _handle(clock)
    await asyncio.wait_for(handle.played_out(), 1.0)  # nothing sent: nothing left to play
    handle.forward(AudioPiece(SECOND, 1000.0, []))
    _sent(handle, 1000.0)
    clock.now_s += 0.99  # the client has 10 ms left to play
    waiting = asyncio.create_task(handle.played_out())
    await asyncio.sleep(0)
    assert not waiting.done()
    clock.now_s += 0.01
    await asyncio.wait_for(waiting, 1.0)  # looked again once that time had passed
    handle.pause("item_user")
    waiting = asyncio.create_task(handle.played_out())
    await asyncio.sleep(0.02)
    assert not waiting.done(), "a paused reply waits for its resume or its end"
    handle.cancel("turn_detected")
    await asyncio.wait_for(waiting, 1.0)


async def _events(handle: ReplyHandle) -> list[dict[str, object]]:
    """The events the handle queued so far, taken off its outbound queue."""
    outbound = handle.wiring.outbound
    return [(await outbound.get()).event for _ in range(len(outbound))]


async def test_a_reply_paused_before_its_first_words_names_no_item_the_client_was_never_told_of() -> None:
    handle = _handle(Clock())
    handle.pause("item_user")  # the user spoke while the reply was still thinking
    handle.hold(" hello")
    handle.resume()
    events = await _events(handle)
    kinds = [e["type"] for e in events]
    paused = events[kinds.index("bargein.reply.paused")]
    resumed = events[kinds.index("bargein.reply.resumed")]
    assert paused["item_id"] is None and resumed["item_id"] is None, "the item was announced only after them"
    assert kinds.index("response.output_item.added") > kinds.index("bargein.reply.resumed")
    handle.pause("item_user_2")  # now its first words are out: the item is the client's to know
    (paused_again,) = [e for e in await _events(handle) if e["type"] == "bargein.reply.paused"]
    assert paused_again["item_id"] == "item_a"
