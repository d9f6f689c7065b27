"""The duplex machine's vocabulary for a reply's own course: the audio it carries, what the shell reports once the
words a reply answers are in or the client cut the reply's item short, and what the machine has the reply do then.

Part of :mod:`bargein.session.core.vocabulary` (which re-exports every name here), kept apart so each
module stays small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bargein.values import WordTiming

UserWords = Literal["some", "none", "lost"]
"""What the recogniser made of the user's last turn: words, no words (a wordless sound), or nothing at all (it
failed or timed out, and the words are lost)."""


@dataclass(frozen=True)
class AudioPiece:
    """A piece of a reply's wire audio, as the machine admits, holds or drops it (it never reads the bytes)."""

    data: bytes
    duration_ms: float
    words: Sequence[WordTiming]
    """The words that start in this piece, timed from its start."""


@dataclass(frozen=True)
class ReplyInputReady:
    """A started reply's input is known: every recognition of a committed turn has ended, and the user's last turn
    has ``user_words`` (the machine answers :class:`GenerateReply`, or ends a reply that has nothing to answer)."""

    response_id: str
    user_words: UserWords


@dataclass(frozen=True)
class ReplyTruncated:
    """The client truncated the live reply's item short of the audio sent (``conversation.item.truncate``): it stopped
    playing it there."""

    response_id: str


@dataclass(frozen=True)
class GenerateReply:
    """Run the reply's pipeline: the model answers the conversation, or, with ``fixed_line``, the reply speaks that
    line in its own voice and pace, offering no tools and taking no speculative head start."""

    response_id: str
    fixed_line: str | None = None
