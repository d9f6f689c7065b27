"""One session's hand in its scope's memory: the recalled notes its replies read, and learning after each turn.

Nothing here is on a reply's critical path: the notes a reply reads are the ones recalled after the previous turn
(and at the session's start), so a reply and its speculative head start build the same prompt; extraction and
recall run in a background task once a reply closes, one turn at a time, at most :data:`MAX_WAITING` waiting.

Where the notes sit keeps the model's KV cache whole. Each recall's *new* notes (those not given already) become
a block that opens the next user message, and the block stays with that message in every later prompt: a turn's
prompt only appends to the one before, and the notes are in the prompt before the user's words, so the partial
transcripts' prompt warming evaluates them while the user is still speaking. A note given earlier is not given
again; one since forgotten or corrected is taken out of its block at the next recall (the one prompt change
that makes the model evaluate the conversation again from there), so it is never read again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from bargein.memory.extract import Forget, Remember, extract
from bargein.memory.recall import DEFAULT_TOKEN_BUDGET, notes_block, within_budget
from bargein.memory.store import Memory, MemoryStore, MemoryStoreError
from bargein.values import ChatMessage

log = logging.getLogger(__name__)
MAX_WAITING = 8
RECALL_LIMIT = 8
NEWEST_TOP_UP = 3
FIRST_NOTES = 4
"""The newest memories a session starts with, before the user has said anything to rank by: few, because they are
evaluated while the first question is asked (on a loaded machine that is all the time there is)."""
"""Newest memories a reply's notes add to the matching ones (a small scope's facts all fit anyway)."""
RECENT_TURNS = 3
"""User turns whose words rank the memories recalled for the next reply."""
MAX_GIVEN = 24
"""Notes a session's prompts carry in all (about three recalls' budgets, a third of the history's room in the
default context); past it the oldest blocks go (the conversation is evaluated again, before the user speaks)."""


@dataclass(frozen=True)
class NotesBlock:
    """Notes given once, opening the user message with index ``before`` (counted from the history's first)."""

    before: int
    notes: tuple[Memory, ...]


class SessionMemory:
    """A session's memories in ``scope`` of ``store``; ``history`` gives the heard conversation.

    The session tells it of each reply's close through :class:`~bargein.session.observers.ReplyClosedHook`
    (memory sits below the session and does not import it)."""

    def __init__(self, store: MemoryStore, scope: str, history: Callable[[], list[ChatMessage]], *,
                 budget_tokens: int = DEFAULT_TOKEN_BUDGET, enabled: Callable[[], bool] = lambda: True) -> None:
        self.store = store
        self.scope = scope
        self.history = history
        self.budget_tokens = budget_tokens
        self.enabled = enabled
        """The session's own switch (``session.update`` with ``memory: false``)."""
        self.notes: list[Memory] = []
        """The latest recall: the memories most relevant to the user's recent words, within the budget."""
        self.blocks: list[NotesBlock] = []
        """Every note given to this session's prompts, where it was given (at most :data:`MAX_GIVEN`)."""
        self.on_given: Callable[[], None] | None = None
        """Told when new notes were given (the session warms the model's cache with them before the user speaks)."""
        self.hold_warm = False
        """Notes given while set are told to :attr:`on_given` only at :meth:`client_heard` (a session's first notes
        are recalled before its client could say ``memory: false``)."""
        self._warm_owed = False
        self._waiting: deque[tuple[str, str]] = deque(maxlen=MAX_WAITING)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Recall the scope's newest memories for the first reply."""
        self._waiting.append(("", ""))
        self._wake()

    def prompt(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """``messages`` with each block of notes opening the user message it was given for (a block for a message
        not there yet opens the last one); unchanged when memory is off."""
        if not self.enabled() or not self.blocks:
            return messages
        users = [i for i, message in enumerate(messages) if message.role == "user" and not message.private]
        if not users:
            return messages
        placed: dict[int, list[Memory]] = {}
        for block in self.blocks:
            placed.setdefault(users[min(block.before, len(users) - 1)], []).extend(block.notes)
        changed = list(messages)
        for index, notes in placed.items():
            changed[index] = replace(changed[index], content=notes_block(notes) + changed[index].content)
        return changed

    def on_reply_closed(self, response_id: str, status: str, sent_ms: float, heard_ms: float, *,
                        output_queued: bool | None = None, playing: bool = False) -> None:
        """A turn is over: learn from what the user said (and the heard reply before it), then recall again."""
        if not self.enabled():
            return
        messages = [m for m in self.history() if m.role in ("user", "assistant")]
        last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
        if last_user is None:
            return
        before = messages[last_user - 1].content if last_user > 0 and messages[last_user - 1].role == "assistant" \
            else ""
        self._waiting.append((messages[last_user].content, before))
        self._wake()

    async def refresh(self) -> None:
        """Recall the notes for the next reply, ranked by the user's recent words."""
        said = [m.content for m in self.history() if m.role == "user"][-RECENT_TURNS:]
        # before the user has said anything, the newest memories; after, the matching ones and a few newest
        found = await self.store.recall(self.scope, " ".join(said), RECALL_LIMIT if said else FIRST_NOTES,
                                        newest=NEWEST_TOP_UP if said else None)
        self.notes = within_budget(found, self.budget_tokens)
        dropped = await self._drop_stale()
        # read after the awaits: a turn committed meanwhile already has its prompt, the notes open the next one
        given = self._give(self.notes, sum(1 for m in self.history() if m.role == "user"))
        if dropped or given:
            self._warm_owed = True
            self._tell_given()

    def client_heard(self) -> None:
        """The client's first message was handled: the notes given before it are warmed now, if memory is still
        on (a session that turned it off in that message never has the model evaluate them)."""
        self.hold_warm = False
        self._tell_given()

    def _tell_given(self) -> None:
        if self.hold_warm or not self._warm_owed:
            return
        self._warm_owed = False
        if self.on_given is not None and self.enabled():
            self.on_given()

    async def _drop_stale(self) -> bool:
        """Take every given note that was forgotten or corrected since out of its block; whether any was."""
        given = [note for block in self.blocks for note in block.notes]
        if not given:
            return False
        now = {(m.id, m.updated_at) for m in await self.store.present(self.scope, [note.id for note in given])}
        if len(now) == len(given) and all((note.id, note.updated_at) in now for note in given):
            return False
        kept = [NotesBlock(b.before, tuple(n for n in b.notes if (n.id, n.updated_at) in now)) for b in self.blocks]
        self.blocks = [block for block in kept if block.notes]
        return True

    def _give(self, notes: list[Memory], before: int) -> bool:
        """Add the ``notes`` not given yet as a block opening the user message ``before`` (joining a block there);
        whether any was new."""
        given = {note.id for block in self.blocks for note in block.notes}
        new = tuple(note for note in notes if note.id not in given)
        if not new:
            return False
        if self.blocks and self.blocks[-1].before == before:
            new = self.blocks.pop().notes + new
        self.blocks.append(NotesBlock(before, new[-MAX_GIVEN:]))
        while sum(len(block.notes) for block in self.blocks) > MAX_GIVEN and len(self.blocks) > 1:
            self.blocks.pop(0)
        return True

    async def learn(self, user_text: str, heard_before: str) -> list[Memory]:
        """Apply what ``user_text`` states or asks to forget; the memories written."""
        written: list[Memory] = []
        for finding in extract(user_text, heard_before):
            if isinstance(finding, Remember):
                written.append(await self.store.remember(self.scope, finding.topic, finding.text))
            elif isinstance(finding, Forget):
                await forget_finding(self.store, self.scope, finding)
        return written

    async def settled(self) -> None:
        """Wait until every turn handed over has been learnt from and recalled."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def close(self) -> None:
        """Finish the turn being learnt from (a write that started is committed), drop the rest."""
        self._waiting.clear()
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=5.0)

    def _wake(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        while self._waiting:
            user_text, heard_before = self._waiting.popleft()
            try:
                if user_text:
                    await self.learn(user_text, heard_before)
                await self.refresh()
            except MemoryStoreError as error:
                log.warning("memory: %s", error)


async def forget_finding(store: MemoryStore, scope: str, finding: Forget) -> int:
    """Forget a topic's memory, else the memories holding all of the finding's words."""
    gone = 0
    if finding.topic is not None:
        gone = await store.forget(scope, topic=finding.topic)
    if not gone and finding.words:
        gone = await store.forget(scope, matching=finding.words)
    return gone
