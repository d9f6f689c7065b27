"""Cut a token stream into speakable clauses, so the first clause is synthesised as soon as it is whole."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Sentence punctuation, closing quotes or brackets, the whitespace after, and the next character if it
# has arrived: whether a period ends a sentence often depends on what follows it.
_SENTENCE_END = re.compile(r"([.!?…]+)([\"'”’)\]]*)(\s+)(\S?)")
_CLAUSE_END = re.compile(r"[,;:—–]\s|[，；：](?:[”’」』）]*)")
# Chinese sentence ends need no space after them; Western ones directly before a Han character neither.
_CJK_SENTENCE_END = re.compile(r"(?:[。！？]+|[.!?…]+(?=[\u3400-\u9fff]))[”’」』）)]*")
_WORD_START = re.compile(r"(?<!\S)\S")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SPOKEN = re.compile(r"[^\W_]")
"""A letter or a digit of any script (Han characters included): something a voice can say."""
FIRST_CLAUSE_WORDS = 3
"""A reply's first clause, as the session speaks it, ends after this many words at the latest: a few tokens
decode and synthesise far sooner than a whole sentence, and sound whole enough to start on."""
HAN_WEIGHT = 3
"""A Han character carries about a word: it counts as this many characters against the clause lengths."""
_TITLES = frozenset({
    # Before a name: a capital after them does not start a sentence.
    "mr", "mrs", "ms", "dr", "prof", "st", "mt", "sr", "jr", "gen", "gov", "sen", "rep", "lt", "col",
    "capt", "sgt", "rev", "no", "nos", "fig", "vol", "vs", "ch", "sec", "art", "op",
})
_ABBREVIATIONS = frozenset({
    # Often mid-sentence: they end one only when a capital follows.
    "e.g", "i.e", "etc", "approx", "a.m", "p.m", "cf", "al", "inc", "ltd", "co", "corp", "dept", "est",
    "min", "max", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
})


@dataclass
class ClauseSplitter:
    """Accumulates LLM tokens and releases text at sentence (or long-clause) boundaries.

    A sentence ends at ``!``, ``?``, an ellipsis or a period followed by whitespace, and at a line break
    (list items, paragraphs). A period after a title ("Dr. Smith"), an initial, a list number
    ("1. Open it") or an abbreviation followed by a lowercase word ("e.g. this") does not end one; when
    that depends on the next character, the splitter waits for it (one token), and only then.
    Decimals ("3.5") never break: a break needs whitespace after the punctuation.

    A clause break at a comma, semicolon, colon or dash is taken only once the pending text is at least
    ``min_clause_chars`` long, so the TTS is not fed fragments of one or two words that sound choppy; the
    first clause of a reply uses the lower ``first_min_clause_chars``, because first audio waits for it.
    Text with no break at all is cut at the last space before ``max_clause_chars``. With
    ``first_max_words``, the first clause also ends after that many whole words (a word is whole once the
    next one has begun), wherever that falls: first audio waits for the first clause's tokens and its
    synthesis, and a speculative head start made before the commit cuts at the same place as the reply.

    Chinese: 。！？ end a sentence and ，；： a clause with no space after them, and text without spaces
    is cut between characters. A Han character counts as ``HAN_WEIGHT`` characters against the lengths
    above, since one character is about one spoken word.
    """

    min_clause_chars: int = 40
    max_clause_chars: int = 220
    first_min_clause_chars: int = 24
    first_max_words: int | None = None
    _pending: str = field(default="", init=False)
    _released: int = field(default=0, init=False)

    def feed(self, token: str) -> list[str]:
        """Add a token; return the clauses that became complete."""
        self._pending += token
        ready: list[str] = []
        while (cut := self._cut_point()) is not None:
            clause, self._pending = self._pending[:cut].strip(), self._pending[cut:].lstrip()
            if clause:
                ready.append(clause)
                self._released += 1
        return ready

    @property
    def released(self) -> int:
        """Clauses handed out so far in this reply."""
        return self._released

    def take_words(self, min_words: int) -> str | None:
        """Hand out the pending text up to its last complete word, if it holds ``min_words`` words.

        For a clause that is slow in coming (a first clause after the LLM's deadline, a later one when the client
        is about to run out of audio): better a natural-sounding phrase now than a whole sentence after the LLM
        has crawled through it.
        """
        text = self._pending
        if _HAN.search(text[-1:]):  # Chinese: every character is whole, so all of it can go
            if len(_HAN.findall(text)) < min_words:
                return None
            self._pending = ""
            self._released += 1
            return text.strip()
        space = text.rstrip().rfind(" ") if not text.endswith(" ") else len(text.rstrip())
        head = text[:space].strip() if space > 0 else ""
        if len(head.split()) < min_words:
            return None
        self._pending = text[space:].lstrip()
        self._released += 1
        return head

    def flush(self) -> str | None:
        """Whatever is left at the end of the reply; the splitter is then ready for the next reply."""
        rest, self._pending = self._pending.strip(), ""
        self._released = 0
        return rest or None

    def _cut_point(self) -> int | None:
        text = self._pending
        limit = _raw_index(text, self.max_clause_chars)
        newline = text.find("\n")
        while newline >= 0 and not text[:newline].strip():
            newline = text.find("\n", newline + 1)
        chinese = _CJK_SENTENCE_END.search(text)
        if chinese is not None and chinese.start() < limit and not 0 <= newline < chinese.start():
            ends_earlier = _SENTENCE_END.search(text, 0, chinese.start())
            quote_open = text.count("“") > text.count("”") or text.count("「") > text.count("」")
            if quote_open and chinese.end() == len(text):
                return None  # its closing quote is probably the next token: wait for it
            if ends_earlier is None or self._ends_sentence(text, ends_earlier) is False:
                return chinese.end()
        for match in _SENTENCE_END.finditer(text):
            if 0 <= newline < match.start() or match.start() >= limit:
                break
            verdict = self._ends_sentence(text, match)
            if verdict is None:  # decided by a character that has not arrived yet
                return newline + 1 if 0 <= newline < limit else None
            if verdict:
                return match.end(3)
        if 0 <= newline < limit:
            return newline + 1
        minimum = self.first_min_clause_chars if self._released == 0 else self.min_clause_chars
        capped = self._word_cap(text)
        for match in _CLAUSE_END.finditer(text):
            if match.start() >= limit or (capped is not None and match.end() > capped):
                break
            if _weighted_length(text[:match.start() + 1]) >= minimum:
                return match.end()
        if capped is not None:
            return capped
        if len(text) > limit:
            space = text.rfind(" ", 0, limit)
            return space + 1 if space > 0 and not _HAN.search(text[space:limit]) else limit
        return None

    def _word_cap(self, text: str) -> int | None:
        """Where the first clause's ``first_max_words`` cap cuts ``text`` (before the next word), if it does."""
        if self.first_max_words is None or self._released or _HAN.search(text):
            return None
        starts = [match.start() for match in _WORD_START.finditer(text)]
        return starts[self.first_max_words] if len(starts) > self.first_max_words else None

    @staticmethod
    def _ends_sentence(text: str, match: re.Match[str]) -> bool | None:
        """Whether the punctuation of ``match`` ends a sentence; None when the next character decides."""
        punct, following = match.group(1), match.group(4)
        if following and following.islower():
            return False  # "e.g. this", "Wait... what", "3 p.m. today"
        if punct != ".":
            # "!" and "?" end a sentence at once; an ellipsis only before a capital.
            return True if ("!" in punct or "?" in punct or following) else None
        start = max(text.rfind(" ", 0, match.start()), text.rfind("\n", 0, match.start())) + 1
        word = text[start:match.start()].lstrip("\"'“‘([")
        key = word.lower()
        if key in _TITLES or (len(word) == 1 and word.isupper()):
            return False  # "Dr. Smith", "J. K. Rowling"
        if word.isdigit():
            line_start = text.rfind("\n", 0, start) + 1
            if not text[line_start:start].strip():
                return False  # a number opening a line is a list marker: "1. Open the box"
        elif key not in _ABBREVIATIONS and "." not in word:
            return True  # an ordinary word: no need to wait for the next character
        return None if not following else True


def has_words(text: str) -> bool:
    """True when ``text`` holds something to say: a letter or a digit. A clause of only punctuation, an
    ellipsis or emoji has none; a synthesiser makes no sound of it (Kokoro returns nothing), so it is not
    sent to one, though its text stays in the reply's transcript as the model wrote it."""
    return _SPOKEN.search(text) is not None


def _weighted_length(text: str) -> int:
    """Characters of ``text``, a Han character counting ``HAN_WEIGHT``."""
    return len(text) + (HAN_WEIGHT - 1) * len(_HAN.findall(text))


def _raw_index(text: str, weighted: int) -> int:
    """The index in ``text`` where its weighted length reaches ``weighted`` (``weighted`` when it has no Han)."""
    if not _HAN.search(text):
        return weighted
    total = 0
    for index, character in enumerate(text):
        total += HAN_WEIGHT if _HAN.match(character) else 1
        if total > weighted:
            return index
    return max(weighted, len(text))
