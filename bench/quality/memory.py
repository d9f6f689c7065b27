"""Long-term memory: recall of the current fact, stale facts and other scopes never returned (issue 46).

    python -m bench.quality.memory                 # the held-out half (the figures to quote)
    python -m bench.quality.memory --half training # the half the extraction rules were fitted on
    python -m bench.quality.memory --latency --turns 24 --rounds 4   # first audio, memory on (1,000) vs off

Every conversation of ``bench/quality/memory_conversations.py`` lives in its own scope of one SQLite store. Its
sessions are played turn by turn through :class:`~bargein.memory.session_memory.SessionMemory` (the rules, then
the store), then each probe opens a new session whose first user turn is the question, and reads the notes the
reply's prompt would carry. A probe's fact is *recalled* when a note holds all its words; a corrected or
forgotten fact, or a note from another scope, in the notes is a failure however the rest went.

``--latency`` serves the default engines in a server process with 1,000 memories in the local scope and, after an
unmeasured warm-up session, runs rounds of one session with memory on and one off (``session.update``
``memory: false``), on, off; off, on; ... (A/B/B/A), the same clips in the same order in each. It reports first
audio p50 for both (``bench/latency/first_audio.py``'s measure; the target) and their ratio, the median of the
paired per-turn differences (turn ``i`` of a round's two sessions: the same clip), and each turn's endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bargein.memory.session_memory import SessionMemory
from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.values import ChatMessage
from bench.quality.memory_conversations import HELD_OUT, TRAINING, Conversation


@dataclass
class Tally:
    """What the probes found."""

    facts: int = 0
    recalled: int = 0
    stale_returned: int = 0
    foreign_returned: int = 0
    misses: list[str] = field(default_factory=list)


async def play(store: SqliteMemoryStore, scope: str, conversation: Conversation) -> None:
    """Tell the conversation's sessions, turn by turn, learning after each as a server would."""
    for session in conversation.sessions:
        history: list[ChatMessage] = []
        memory = SessionMemory(store, scope, lambda history=history: history)
        for heard_before, said in session:
            if heard_before:
                history.append(ChatMessage("assistant", heard_before))
            history.append(ChatMessage("user", said))
            await memory.learn(said, heard_before)


async def probe(store: SqliteMemoryStore, scopes: dict[str, Conversation], tally: Tally) -> None:
    """Ask every probe in a new session and check the notes its reply's prompt would carry."""
    for scope, conversation in scopes.items():
        own = {memory.id for memory in await store.entries(scope)}
        for question in conversation.probes:
            memory = SessionMemory(store, scope, lambda q=question.question: [ChatMessage("user", q)])
            await memory.refresh()
            given = [note for block in memory.blocks for note in block.notes]  # what the prompt carries
            notes = [note.text for note in given]
            if question.expect:
                tally.facts += 1
                if any(all(word.lower() in note.lower() for word in question.expect) for note in notes):
                    tally.recalled += 1
                else:
                    tally.misses.append(f"{conversation.name}: {question.question!r} -> {notes}")
            if any(word.lower() in note.lower() for word in question.never for note in notes):
                tally.stale_returned += 1
                tally.misses.append(f"{conversation.name}: stale fact returned: {notes}")
            if any(note.id not in own for note in given):
                tally.foreign_returned += 1


async def run(conversations: tuple[Conversation, ...]) -> Tally:
    """Play every conversation in its own scope, then probe them all."""
    tally = Tally()
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteMemoryStore(str(Path(directory) / "memory.sqlite3"))
        scopes = {f"bench-{index}": conversation for index, conversation in enumerate(conversations)}
        for scope, conversation in scopes.items():
            await play(store, scope, conversation)
        await probe(store, scopes, tally)
        await store.close()
    return tally


def report(half: str, tally: Tally) -> None:
    """Print the figures."""
    share = 100.0 * tally.recalled / tally.facts if tally.facts else 0.0
    print(f"memory bench, {half} half: current fact recalled {tally.recalled}/{tally.facts} ({share:.0f} %); "
          f"corrected or forgotten facts returned: {tally.stale_returned}; "
          f"another scope's facts returned: {tally.foreign_returned}")
    for miss in tally.misses:
        print("  ", miss)


def main() -> None:
    """Run the bench."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--half", choices=["held-out", "training"], default="held-out")
    parser.add_argument("--latency", action="store_true", help="first audio with memory on vs off instead")
    parser.add_argument("--turns", type=int, default=20, help="--latency: turns per condition")
    parser.add_argument("--rounds", type=int, default=2,
                        help="--latency: rounds of one session per condition (on, off; off, on; ...)")
    args = parser.parse_args()
    if args.latency:
        from bench.quality.memory_latency import compare

        asyncio.run(compare(args.turns, rounds=args.rounds))
        return
    report(args.half, asyncio.run(run(HELD_OUT if args.half == "held-out" else TRAINING)))


if __name__ == "__main__":
    main()
