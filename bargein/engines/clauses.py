"""Cut a token stream into speakable clauses, so the first clause is synthesised as soon as it is whole."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:—–]\s")
_ABBREVIATIONS = ("mr.", "mrs.", "ms.", "dr.", "st.", "e.g.", "i.e.", "etc.", "vs.", "no.")


@dataclass
class ClauseSplitter:
    """Accumulates LLM tokens and releases text at sentence (or long-clause) boundaries.

    A clause break at a comma is taken only once the pending text is at least ``min_clause_chars``
    long, so the TTS is not fed fragments of one or two words that sound choppy.
    """

    min_clause_chars: int = 40
    max_clause_chars: int = 220
    _pending: str = field(default="", init=False)

    def feed(self, token: str) -> list[str]:
        """Add a token; return the clauses that became complete."""
        self._pending += token
        ready: list[str] = []
        while (cut := self._cut_point()) is not None:
            clause, self._pending = self._pending[:cut].strip(), self._pending[cut:].lstrip()
            if clause:
                ready.append(clause)
        return ready

    def flush(self) -> str | None:
        """Whatever is left at the end of the reply."""
        rest, self._pending = self._pending.strip(), ""
        return rest or None

    def _cut_point(self) -> int | None:
        for match in _SENTENCE_END.finditer(self._pending):
            head = self._pending[: match.start() + 1].lower()
            if head.endswith(_ABBREVIATIONS) or re.search(r"\b\d+\.$", head):
                continue
            return match.end()
        if len(self._pending) >= self.min_clause_chars:
            for match in _CLAUSE_END.finditer(self._pending):
                if match.start() >= self.min_clause_chars // 2:
                    return match.end()
        if len(self._pending) > self.max_clause_chars:
            space = self._pending.rfind(" ", 0, self.max_clause_chars)
            return space + 1 if space > 0 else self.max_clause_chars
        return None
