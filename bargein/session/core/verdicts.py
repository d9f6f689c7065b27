"""What the duplex machine owes each committed segment's verdict: plain bookkeeping, the rules stay in the machine.

A segment committed with listening on waits for the classifier. While it waits, things happen that change what
its verdict may do: it cut the reply at its first pause (so it is answered whatever the verdict), it was committed
at the longest turn with no pause ending it (so it is judged but never answered), or a client's reply answered it
or the client cancelled the reply it waited behind, or the reply that answered it (so its verdict owes no answer)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bargein.protocol.client_events import ResponseParams

MARKS_KEPT = 8
"""Segments remembered as cut-early or unended; more than this many awaiting a verdict at once does not happen."""
ANSWERED_AHEAD = "answered by the reply the client started while it was judged"
ANSWER_CANCELLED = "not answered: the client cancelled the reply that answered it"


@dataclass(frozen=True)
class Owed:
    """What one segment's verdict may do, read when the verdict arrives."""

    during_reply: bool
    """It began while a reply was live."""
    not_owed: str | None
    """Why its verdict owes no answer, if it does not."""
    cut_early: bool
    """It cut the reply at its first pause: answered whatever the verdict."""
    unended: bool
    """Committed at the longest turn, no pause having ended it: judged, never answered."""
    untold: bool = False
    """Its speech was never told to the client (confirm mode held it back over a reply it did not pause)."""


@dataclass
class AwaitedVerdicts:
    """The committed segments waiting for a verdict, and the marks that change what each verdict owes."""

    _during_reply: dict[str, bool] = field(default_factory=dict)
    _not_owed: dict[str, str] = field(default_factory=dict)
    _answered_by: dict[str, str] = field(default_factory=dict)
    """The client's reply (response id) that answered a segment before its verdict."""
    _cut_early: deque[str] = field(default_factory=lambda: deque(maxlen=MARKS_KEPT))
    _unended: deque[str] = field(default_factory=lambda: deque(maxlen=MARKS_KEPT))
    _untold: deque[str] = field(default_factory=lambda: deque(maxlen=MARKS_KEPT))

    def __bool__(self) -> bool:
        return bool(self._during_reply)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._during_reply

    def expect(self, item_id: str, *, during_reply: bool) -> None:
        """``item_id`` was committed and waits for the classifier."""
        self._during_reply[item_id] = during_reply

    def mark_unended(self, item_id: str) -> None:
        """``item_id`` was committed at the longest turn, no pause having ended it."""
        self._unended.append(item_id)

    def mark_untold(self, item_id: str) -> None:
        """``item_id``'s speech was never told to the client."""
        self._untold.append(item_id)

    def untold(self, item_id: str) -> bool:
        """``item_id`` is waiting and its speech was never told to the client."""
        return item_id in self._during_reply and item_id in self._untold

    def mark_cut_early(self, item_id: str) -> None:
        """``item_id`` cut the reply at its first pause."""
        self._cut_early.append(item_id)

    def owe_nothing(self, why: str, *, only_during_reply: bool = False) -> None:
        """Every segment waiting now (or only those that began during a reply) owes no answer, for ``why``."""
        self._not_owed.update((item_id, why) for item_id, during_reply in self._during_reply.items()
                              if during_reply or not only_during_reply)

    def answered_by(self, response_id: str) -> None:
        """The client's reply ``response_id`` answers every segment waiting now (its prompt waits for their words);
        one an earlier reply answered already stays that reply's."""
        for item_id in self._during_reply:
            self._answered_by.setdefault(item_id, response_id)

    def answer_cancelled(self, response_id: str) -> None:
        """The client cancelled ``response_id``: the segments it answered were not answered, and owe nothing
        still (the client stopped the agent talking); a reply the client starts next answers them again."""
        for item_id in [item for item, answer in self._answered_by.items() if answer == response_id]:
            del self._answered_by[item_id]
            self._not_owed[item_id] = ANSWER_CANCELLED

    def settle(self, item_id: str) -> Owed | None:
        """The verdict for ``item_id`` arrived: what it owes, or None if nothing waits for it (cleared, or
        decided already)."""
        if item_id not in self._during_reply:
            return None
        not_owed = self._not_owed.pop(item_id, None)
        if self._answered_by.pop(item_id, None) is not None:
            not_owed = ANSWERED_AHEAD  # whatever else happened while it waited, a reply had its words
        return Owed(during_reply=self._during_reply.pop(item_id), not_owed=not_owed,
                    cut_early=item_id in self._cut_early, unended=item_id in self._unended,
                    untold=item_id in self._untold)


def answers_the_user(trigger: str, params: ResponseParams | None) -> bool:
    """Whether a reply answers what the user said: the endpoint's own, or a client's in the conversation with its
    default input (its prompt holds the user's turns); an idle prompt or an out-of-band reply answers nothing."""
    if trigger == "turn_detected":
        return True
    return trigger == "client" and (params is None or (params.input is None and params.conversation != "none"))
