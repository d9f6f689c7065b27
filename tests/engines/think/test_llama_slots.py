"""Choosing a batched reply's sequence: its own conversation kept, a shared prefix copied, LRU eviction."""

from __future__ import annotations

import pytest

from bargein.engines.think.llama_slots import SlotTable, shared_prefix

SYSTEM = list(range(100, 140))  # 40 tokens every prompt starts with


def test_shared_prefix() -> None:
    assert shared_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert shared_prefix([], [1]) == 0
    assert shared_prefix([1, 2], [1, 2, 3]) == 2


def test_a_conversation_continues_in_its_own_sequence() -> None:
    table = SlotTable(3, keep_threshold=8)
    table.slots[1].tokens = [*SYSTEM, 1, 2, 3, 4]  # turn one of a conversation, reply included
    table.slots[2].tokens = [*SYSTEM, 9, 9, 9]
    plan = table.plan([*SYSTEM, 1, 2, 3, 4, 5, 6])
    assert plan.target.seq == 1 and plan.source_seq == 1 and plan.kept == 44 and not plan.save_evicted


def test_at_least_the_last_prompt_token_is_left_to_evaluate() -> None:
    table = SlotTable(1)
    table.slots[0].tokens = [*SYSTEM, 1, 2]
    plan = table.plan([*SYSTEM, 1, 2])
    assert plan.kept == 41


def test_a_new_conversation_copies_the_shared_prefix_into_an_empty_sequence() -> None:
    table = SlotTable(2, keep_threshold=8)
    table.slots[0].tokens = [*SYSTEM, *range(50)]  # someone else's conversation, long
    plan = table.plan([*SYSTEM, 7, 7])
    assert plan.target.seq == 1 and plan.source_seq == 0 and plan.kept == 40 and not plan.save_evicted


def test_a_busy_sequence_can_still_lend_its_prefix() -> None:
    table = SlotTable(2, keep_threshold=8)
    table.slots[0].tokens = [*SYSTEM, *range(50)]
    table.take(table.slots[0])
    plan = table.plan([*SYSTEM, 7, 7])
    assert plan.target.seq == 1 and plan.source_seq == 0 and plan.kept == 40


def test_with_no_room_the_least_recently_used_conversation_is_evicted_and_saved() -> None:
    table = SlotTable(2, keep_threshold=8)
    for slot, fill in zip(table.slots, (1, 2), strict=True):
        table.take(slot)
        slot.tokens = [*SYSTEM, *([fill] * 20)]
        table.release(slot)
    plan = table.plan([*SYSTEM, 3, 3])
    assert plan.target.seq == 0 and plan.save_evicted and plan.kept == 40
    assert plan.source_seq == 0  # its own first 40 tokens are the shared prefix: kept in place


def test_a_host_snapshot_wins_when_it_holds_more_of_the_prompt() -> None:
    table = SlotTable(1, keep_threshold=8)
    table.slots[0].tokens = [*SYSTEM, *([2] * 20)]
    plan = table.plan([*SYSTEM, 1, 1, 1, 1, 5], snapshot_shared=44)
    assert plan.from_snapshot and plan.kept == 44 and plan.save_evicted


def test_nothing_shared_starts_from_nothing_and_every_busy_sequence_is_refused() -> None:
    table = SlotTable(1)
    plan = table.plan([1, 2, 3])
    assert plan.kept == 0 and plan.source_seq is None and not plan.from_snapshot
    table.take(plan.target)
    assert table.free == 0
    with pytest.raises(LookupError):
        table.plan([1, 2, 3])


def test_a_full_cache_forgets_only_idle_conversations() -> None:
    table = SlotTable(2)
    table.slots[0].tokens, table.slots[1].tokens = [1, 2], [3, 4]
    table.take(table.slots[0])
    assert [slot.seq for slot in table.forget_free()] == [1]
    assert table.slots[0].tokens == [1, 2] and table.slots[1].tokens == []


def test_another_sessions_sequence_lends_only_the_public_prefix() -> None:
    table = SlotTable(2, keep_threshold=8)
    table.slots[0].tokens, table.slots[0].owner = [*SYSTEM, 5, 6, 7, 8], "a"  # A began with a secret
    plan = table.plan([*SYSTEM, 5, 6, 7, 8, 9], owner="b", public=len(SYSTEM))
    assert plan.kept == len(SYSTEM), "session B's first-token time would tell it how session A's conversation began"
    plan = table.plan([*SYSTEM, 5, 6, 7, 8, 9], owner="a", public=len(SYSTEM))
    assert plan.kept == 44 and plan.source_seq == 0  # A's own: whole
