"""Heard history: truncation clamps, keeps heard words only, and the LLM sees only those."""

from __future__ import annotations

import pytest

from bargein.protocol.errors import ProtocolError
from bargein.protocol.tool_items import FunctionCallItem, FunctionCallOutputItem
from bargein.session.history import Conversation, Item, Part, function_item, heard_prefix
from bargein.values import WordTiming

WORDS = [WordTiming("Sure,", 0, 400), WordTiming("the", 450, 600), WordTiming("weather", 650, 1100),
         WordTiming("is", 1150, 1300), WordTiming("sunny.", 1350, 1900)]
FULL = "Sure, the weather is sunny."


def reply(item_id: str = "item_a") -> Item:
    return Item(item_id, "assistant", [Part("output_audio", FULL)], audio_ms=2000.0, words=list(WORDS))


def test_word_timings_decide_what_was_heard() -> None:
    # "weather" (650-1100) is half played at 875 ms
    assert heard_prefix(FULL, WORDS, 874, 2000) == "Sure, the"
    assert heard_prefix(FULL, WORDS, 875, 2000) == "Sure, the weather"
    assert heard_prefix(FULL, WORDS, 0, 2000) == ""
    assert heard_prefix(FULL, WORDS, 5000, 2000) == FULL


def test_without_timings_the_cut_is_proportional_at_a_word_boundary() -> None:
    text = "one two three four"
    assert heard_prefix(text, [], 500, 1000) == "one two"
    assert heard_prefix(text, [], 999, 1000) == "one two three"
    assert heard_prefix(text, [], 1000, 1000) == text


def test_truncate_clamps_past_the_end_instead_of_failing() -> None:
    history = Conversation()
    history.add(reply())
    assert history.truncate("item_a", 0, 2004) == 2000.0
    assert history.get("item_a").heard_text() == FULL
    assert history.truncate("item_a", 0, 700) == 700.0
    assert history.get("item_a").heard_text() == "Sure, the"
    assert history.get("item_a").status == "incomplete"
    # a later, better figure (the client's cursor after the server's estimate) replaces it
    history.truncate("item_a", 0, 1200)
    assert history.get("item_a").heard_text() == "Sure, the weather"


def test_truncate_refuses_what_cannot_be_truncated() -> None:
    history = Conversation()
    history.add(Item("user_1", "user", [Part("input_text", "hi")]))
    history.add(reply())
    with pytest.raises(ProtocolError, match="not found"):
        history.truncate("nope", 0, 10)
    with pytest.raises(ProtocolError, match="only assistant"):
        history.truncate("user_1", 0, 10)
    with pytest.raises(ProtocolError, match="content_index"):
        history.truncate("item_a", 3, 10)


def test_the_llm_sees_only_heard_assistant_text() -> None:
    history = Conversation()
    history.add(Item("u1", "user", [Part("input_audio", "what is the weather")]))
    history.add(reply())
    history.truncate("item_a", 0, 700)
    history.add(Item("u2", "user", [Part("input_text", "and tomorrow?")]))
    messages = history.chat_messages("be brief")
    assert [(m.role, m.content) for m in messages] == [
        ("system", "be brief"), ("user", "what is the weather"), ("assistant", "Sure, the"),
        ("user", "and tomorrow?")]


def test_wire_form_shows_the_heard_transcript() -> None:
    item = reply()
    item.heard_ms = 700
    assert item.wire()["content"] == [{"type": "output_audio", "transcript": "Sure, the"}]


def test_insert_after_a_given_item_and_delete() -> None:
    history = Conversation()
    history.add(Item("a", "user", [Part("input_text", "1")]))
    history.add(Item("c", "user", [Part("input_text", "3")]))
    assert history.add(Item("b", "user", [Part("input_text", "2")]), previous_item_id="a") == "a"
    assert [i.id for i in history] == ["a", "b", "c"]
    with pytest.raises(ProtocolError):
        history.add(Item("a", "user", [Part("input_text", "dup")]))
    history.delete("b")
    assert [i.id for i in history] == ["a", "c"]


def test_function_calls_and_outputs_count_against_the_byte_cap() -> None:
    """A client may send megabytes of tool output (or of a call's arguments) in each item: the history's byte cap
    must weigh that text as it weighs a message's, or thousands of such items stay in memory."""
    history = Conversation(max_items=2_000, max_bytes=10_000)
    for i in range(20):
        history.add(function_item(FunctionCallItem(type="function_call", id=f"c{i}", call_id=f"call_{i}",
                                                   name="lookup", arguments='{"q": "' + "a" * 1_000 + '"}')))
        history.add(function_item(FunctionCallOutputItem(type="function_call_output", id=f"o{i}",
                                                         call_id=f"call_{i}", output="r" * 1_000)))
    kept = sum(len(item.output) + len(item.call.arguments if item.type == "function_call" and item.call else "")
               for item in history)
    assert kept <= 10_000 and history.bytes <= 10_000 and history.forgotten >= 20
    assert history.last_id() == "o19"
