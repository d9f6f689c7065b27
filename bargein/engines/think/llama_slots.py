"""Which llama.cpp sequence a batched reply decodes in, and which cached tokens it starts from.

The batched engine's context holds ``n_seq`` sequences. A sequence whose reply has ended keeps its KV
cache (its *resident* tokens: the prompt and the reply so far), so the session's next turn, whose prompt
starts with the same words, evaluates only what is new. Conversations are found by their tokens, as
:class:`~bargein.engines.think.llama_kv.KvSnapshots` does for the single-sequence engine, and each
sequence remembers its session (``owner``): a sequence holding another session's conversation lends only
the new prompt's public prefix (``public``: the instructions and tools no user wrote), so no session can
time how another's conversation began. A new reply's plan (:meth:`SlotTable.plan`):

* the **target**: the free sequence whose resident tokens it extends (losing fewer than
  ``keep_threshold`` of them), else the free sequence used least recently (its conversation is worth a
  host-memory snapshot first when it holds at least ``keep_threshold`` tokens);
* the **source** of its first tokens: the longest common prefix with any sequence (free or busy; in a
  unified KV cache a copy shares cells, so no data moves) or with a host snapshot, whichever is longer.

Pure bookkeeping, no model: unit-tested with token lists.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for mine, theirs in zip(a, b, strict=False):
        if mine != theirs:
            break
        n += 1
    return n


@dataclass
class Slot:
    """One sequence of the context: the tokens whose KV it holds (from position 0) and whether a reply uses it."""

    seq: int
    tokens: list[int] = field(default_factory=list)
    busy: bool = False
    last_used: int = 0
    owner: Hashable | None = None
    """The session whose conversation ``tokens`` are."""


@dataclass(frozen=True)
class Plan:
    """How a reply starts: its sequence, what to do with that sequence's old tokens, where its prefix comes from.

    ``kept`` prompt tokens need no evaluation once the plan is carried out: they stay in ``target`` when
    ``source_seq == target.seq``, are copied from ``source_seq`` when it is another sequence, or restored
    from a host snapshot when ``from_snapshot``. ``save_evicted`` asks for the target's old conversation to
    be copied to host memory first.
    """

    target: Slot
    kept: int
    source_seq: int | None
    from_snapshot: bool
    save_evicted: bool


class SlotTable:
    """The sequences of one batched context and the plan for each new reply. Not thread-safe."""

    def __init__(self, n_seq: int, keep_threshold: int = 32) -> None:
        self.slots = [Slot(seq) for seq in range(n_seq)]
        self.keep_threshold = keep_threshold
        self._clock = 0

    @property
    def free(self) -> int:
        """Sequences no reply is using."""
        return sum(1 for slot in self.slots if not slot.busy)

    def plan(self, prompt: Sequence[int], snapshot_shared: int = 0, owner: Hashable | None = None,
             public: int | None = None) -> Plan:
        """Where ``prompt`` should decode for the session ``owner``; ``snapshot_shared`` is the best host
        snapshot's usable prefix; a sequence of another session lends at most ``public`` tokens (None: any).

        At least the prompt's last token is always left to evaluate (its logits pick the first reply token).
        Raises LookupError when every sequence is busy.
        """
        free = [slot for slot in self.slots if not slot.busy]
        if not free:
            raise LookupError("every sequence is busy")
        limit = max(0, len(prompt) - 1)
        shared = {slot.seq: min(shared_prefix(slot.tokens, prompt), limit,
                                limit if public is None or slot.owner == owner else public)
                  for slot in self.slots}
        own = [slot for slot in free if len(slot.tokens) - shared[slot.seq] < self.keep_threshold]
        if own:
            target = max(own, key=lambda slot: (shared[slot.seq], -slot.last_used))
            save = False
        else:
            target = min(free, key=lambda slot: slot.last_used)
            save = len(target.tokens) >= self.keep_threshold
        best_seq = max(self.slots, key=lambda slot: (shared[slot.seq], slot.seq == target.seq)).seq
        best = shared[best_seq]
        snapshot = min(snapshot_shared, limit)
        if snapshot > best and snapshot > shared[target.seq]:
            return Plan(target, snapshot, None, True, save)
        if best == 0:
            return Plan(target, 0, None, False, save)
        return Plan(target, best, best_seq, False, save)

    def take(self, slot: Slot) -> None:
        """Mark ``slot`` busy (a reply has started in it)."""
        self._clock += 1
        slot.busy = True
        slot.last_used = self._clock

    def release(self, slot: Slot) -> None:
        """The reply in ``slot`` has ended; its tokens stay cached for the conversation's next turn."""
        slot.busy = False

    def forget_free(self) -> list[Slot]:
        """Empty every free sequence's cache (the context is full); the slots emptied."""
        emptied = [slot for slot in self.slots if not slot.busy and slot.tokens]
        for slot in emptied:
            slot.tokens = []
        return emptied
