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


def _wide_text(i: int) -> str:
    """7 MiB of ASCII with one emoji: CPython stores the whole string at 4 bytes a character (28 MiB)."""
    return "a" * (7 * 1024 * 1024 - 2) + "\U0001f600" + chr(ord("0") + i)


def test_the_byte_cap_counts_memory_not_characters() -> None:
    """Four 7 MiB texts with one emoji each are 28 M characters (under a 32 M character cap) but 112 MiB of
    memory: the history must keep no more than its cap's worth of memory."""
    import sys

    from bargein.session.history import MAX_HISTORY_BYTES

    history = Conversation()
    for i in range(4):
        history.add(Item(f"wide{i}", "user", [Part("input_text", _wide_text(i))]))
    held = sum(sys.getsizeof(part.text) for item in history for part in item.parts)
    assert held <= MAX_HISTORY_BYTES and history.bytes <= MAX_HISTORY_BYTES
    assert history.bytes >= held and history.last_id() == "wide3" and history.forgotten == 3


def test_a_client_item_over_the_session_cap_is_refused_and_the_history_kept() -> None:
    history = Conversation(max_bytes=1024 * 1024)
    history.add(Item("small", "user", [Part("input_text", "hello")]), from_client=True)
    with pytest.raises(ProtocolError) as refused:
        history.add(Item("big", "user", [Part("input_text", "\U0001f600" * 300_000)]), from_client=True)
    assert refused.value.code == "history_budget_exceeded"
    assert [item.id for item in history] == ["small"]


def test_the_client_and_worker_budgets_refuse_client_items_and_are_refunded() -> None:
    from bargein.server.history_budget import HistoryLedger

    ledger = HistoryLedger(per_client=3_000_000, per_worker=5_000_000)
    one, two = Conversation(account=ledger.account("10.0.0.1")), Conversation(account=ledger.account("10.0.0.1"))
    other = Conversation(account=ledger.account("10.0.0.2"))
    wide = "\U0001f600" * 500_000  # 2 MB of memory in half a million characters
    one.add(Item("a", "user", [Part("input_text", wide)]), from_client=True)
    with pytest.raises(ProtocolError) as per_client:
        two.add(Item("b", "user", [Part("input_text", wide)]), from_client=True)
    assert per_client.value.code == "history_budget_exceeded" and "client" in per_client.value.message
    other.add(Item("c", "user", [Part("input_text", wide)]), from_client=True)
    third = Conversation(account=ledger.account("10.0.0.3"))
    with pytest.raises(ProtocolError) as per_worker:
        third.add(Item("d", "user", [Part("input_text", wide)]), from_client=True)
    assert "per worker" in per_worker.value.message and len(third) == 0 and ledger.refused == 2
    # the server's own items are counted, never refused
    other.add(Item("e", "assistant", [Part("output_text", wide)]))
    assert ledger.total > ledger.per_worker
    one.release()
    two.add(Item("b", "user", [Part("input_text", "short")]), from_client=True)
    other.delete("e")
    other.release()
    two.release()
    assert ledger.total == 0 and not ledger.by_address


def test_an_item_that_makes_its_session_forget_is_charged_only_what_it_adds_and_a_refusal_changes_nothing() -> None:
    from bargein.server.history_budget import HistoryLedger

    ledger = HistoryLedger(per_client=2_500_000, per_worker=10_000_000)
    history = Conversation(max_bytes=2_100_000, account=ledger.account("10.0.0.1"))
    wide = "\U0001f600" * 500_000  # 2 MB each: the session holds one
    history.add(Item("a", "user", [Part("input_text", wide)]), from_client=True)
    history.add(Item("b", "user", [Part("input_text", wide + "b")]), from_client=True)  # "a" goes: net ~0
    assert [item.id for item in history] == ["b"] and ledger.total == history.bytes and history.forgotten == 1
    neighbour = Conversation(account=ledger.account("10.0.0.1"))
    neighbour.add(Item("n", "user", [Part("input_text", "x" * 450_000)]), from_client=True)
    before = (ledger.total, history.bytes)
    with pytest.raises(ProtocolError):  # forgetting "b" frees 2.0 MB; the new 2.09 MB passes the client's budget
        history.add(Item("c", "user", [Part("input_text", "\U0001f600" * 522_000)]), from_client=True)
    assert [item.id for item in history] == ["b"] and (ledger.total, history.bytes) == before
    assert history.forgotten == 1


def test_function_items_and_audio_transcripts_are_charged_to_the_clients_budget() -> None:
    """The budgets hold for every kind of item a client creates, not only input_text: a function call's
    arguments, a function call output and an input_audio part's transcript weigh what they hold in memory."""
    from bargein.server.history_budget import HistoryLedger

    ledger = HistoryLedger(per_client=150_000, per_worker=10_000_000)
    history = Conversation(account=ledger.account("10.0.0.1"))
    wide = "\U0001f600" * 16_000  # 64 KB in memory in 16,000 characters (128 KB once validated: its UTF-8 is kept)
    history.add(function_item(FunctionCallItem(type="function_call", name="f", call_id="c1", arguments=wide)),
                from_client=True)
    for item in (function_item(FunctionCallOutputItem(type="function_call_output", call_id="c1", output=wide)),
                 Item("heard", "user", [Part("input_audio", wide)])):
        with pytest.raises(ProtocolError) as refused:
            history.add(item, from_client=True)
        assert refused.value.code == "history_budget_exceeded"
    assert len(history) == 1 and ledger.total == history.bytes > 100_000


def test_a_clients_own_system_item_is_marked_private_and_the_instructions_are_not() -> None:
    # an LLM that shares prompt caches across sessions shares only the instructions: a system item a client wrote
    # leads the prompt when the instructions are empty, and was taken for them
    history = Conversation()
    history.add(Item("s1", "system", [Part("input_text", "The user's PIN is 4921.")]))
    history.add(Item("u1", "user", [Part("input_text", "what is my PIN?")]))
    assert [(m.role, m.private) for m in history.chat_messages("be brief")] == [
        ("system", False), ("system", True), ("user", False)]
    assert [(m.role, m.private) for m in history.chat_messages("")] == [("system", True), ("user", False)]
