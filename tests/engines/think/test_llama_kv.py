"""The KV snapshot store: longest-prefix lookup, dominated snapshots dropped, byte budget kept."""

from __future__ import annotations

import numpy as np

from bargein.engines.think.llama_kv import KvSnapshot, KvSnapshots, common_prefix


def _tokens(*ids: int) -> np.ndarray:
    return np.array(ids, dtype=np.intc)


def _snap(ids: tuple[int, ...], size: int = 10) -> KvSnapshot:
    return KvSnapshot(tokens=_tokens(*ids), data=bytes(size))


def test_common_prefix() -> None:
    assert common_prefix(_tokens(1, 2, 3), _tokens(1, 2, 4)) == 2
    assert common_prefix(_tokens(1, 2), _tokens(1, 2, 3)) == 2
    assert common_prefix(_tokens(), _tokens(1)) == 0
    assert common_prefix(_tokens(5), _tokens(6)) == 0


def test_best_finds_the_conversation_by_its_words() -> None:
    store = KvSnapshots(max_bytes=1000)
    store.add(_snap((1, 2, 3, 10, 11)))  # conversation A
    store.add(_snap((1, 2, 3, 20, 21, 22)))  # conversation B, same system prompt
    snap, shared = store.best(_tokens(1, 2, 3, 20, 21, 22, 23, 24))
    assert snap is not None
    assert snap.tokens.tolist() == [1, 2, 3, 20, 21, 22]
    assert shared == 6
    assert store.best(_tokens(9, 9)) == (None, 0)


def test_a_longer_snapshot_of_the_same_conversation_replaces_the_shorter() -> None:
    store = KvSnapshots(max_bytes=1000)
    store.add(_snap((1, 2, 3)))
    store.add(_snap((1, 2, 3, 4, 5)))
    assert len(store) == 1
    store.add(_snap((1, 2, 9)))  # diverges: a different conversation, kept
    assert len(store) == 2


def test_the_least_recently_used_snapshot_goes_first() -> None:
    store = KvSnapshots(max_bytes=25)
    store.add(_snap((1,), size=10))
    store.add(_snap((2,), size=10))
    store.best(_tokens(1))  # touch the first: the second is now the oldest
    store.add(_snap((3,), size=10))
    assert store.nbytes == 20
    assert store.best(_tokens(2)) == (None, 0)
    assert store.best(_tokens(1))[1] == 1


def test_a_snapshot_larger_than_the_budget_is_not_kept() -> None:
    store = KvSnapshots(max_bytes=5)
    store.add(_snap((1,), size=10))
    assert len(store) == 0


SYSTEM = (1, 2, 3)  # the public prefix: instructions and tools, which no user wrote


def test_another_sessions_snapshot_serves_only_the_public_prefix() -> None:
    store = KvSnapshots(max_bytes=1000)
    store.add(KvSnapshot(_tokens(*SYSTEM, 40, 41, 42), bytes(10), owner="a"))  # A began with a secret
    guess = _tokens(*SYSTEM, 40, 41, 42, 43)
    assert store.best(guess, owner="b", public=len(SYSTEM))[1] == len(SYSTEM), \
        "session B's first-token time would tell it how session A's conversation began"
    assert store.best(guess, owner="a", public=len(SYSTEM))[1] == 6  # A's own conversation: whole


def test_one_session_cannot_push_another_sessions_snapshots_out_past_its_share() -> None:
    store = KvSnapshots(max_bytes=100, owner_share_bytes=50)
    store.add(KvSnapshot(_tokens(*SYSTEM, 7), bytes(30), owner="a"))
    for turn in range(10):  # B floods the store with conversations of its own
        store.add(KvSnapshot(_tokens(*SYSTEM, 100 + turn), bytes(20), owner="b"))
    assert store.held_by("b") <= 50
    assert store.best(_tokens(*SYSTEM, 7), owner="a", public=3)[1] == 4, "B's flood pushed A's snapshot out"
    store.add(KvSnapshot(_tokens(*SYSTEM, 9), bytes(40), owner="c"))  # over the budget: the largest holder pays
    assert store.held_by("a") == 30 and store.held_by("c") == 40 and store.nbytes <= 100
