"""How much silence ends a turn: tiered by default, fixed for ``server_vad`` with a client's own silence,
judged from the sound and the words for ``semantic_vad``.

The default endpoint (:class:`TieredPreset`) is server_vad's 500 ms of silence unless the end-of-turn model
and the speculative words agree that the turn is finished (then a short silence) or unfinished (a long one).

Semantic endpointing asks two witnesses when the VAD first sees silence in a turn: the end-of-turn model
(Smart Turn, which hears intonation and rhythm) gives the probability that the speaker has finished, and
speculative recognition gives the words so far. The turn ends after a short silence only when the sound
says finished *and* the words do not lead on ("a table for", "and", "the"); otherwise, or while either
witness has not answered yet, it waits a long silence; a sound the model is unsure about (between two
thresholds) waits a middle silence. Eagerness sets the thresholds and the silences; the medium preset
is the one fitted by ``bench/quality/endpoint_quality.py`` (on Kokoro voices; reported on flite and espeak-ng
voices and real recorded speech it never saw). Confirm mode (storm guard) doubles the wait. Pure code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

EAGERNESS_SILENCE_MS = {"high": 300, "medium": 500, "auto": 500, "low": 800}
"""The plain silence reported as ``silence_duration_ms`` for each eagerness."""
CONFIRM_MS = 1000


@dataclass(frozen=True)
class SemanticPreset:
    """A graded wait: end after ``short_ms`` of silence when the turn sounds finished (probability >=
    ``high``), after ``middle_ms`` when the sound is unsure (``low`` <= probability < ``high``), after
    ``long_ms`` when it sounds unfinished; words that lead on always wait ``long_ms``."""

    high: float
    low: float
    short_ms: int
    middle_ms: int
    long_ms: int

    def silence_ms(self, probability: float | None, words: str | None) -> int:
        """The silence for this evidence; a witness that has not answered counts as "not finished"."""
        if probability is None or words is None or leads_on(words):
            return self.long_ms
        if probability >= self.high:
            return self.short_ms
        return self.middle_ms if probability >= self.low else self.long_ms


SEMANTIC_PRESETS = {
    "high": SemanticPreset(0.9, 0.5, 100, 500, 1200),
    "medium": SemanticPreset(0.91, 0.9, 100, 500, 1500),
    "auto": SemanticPreset(0.91, 0.9, 100, 500, 1500),
    "low": SemanticPreset(0.95, 0.5, 300, 1000, 2000),
}
"""``medium``/``auto`` as fitted on the Kokoro family (the budget of 5 % false cut-offs leaves the middle band
almost empty there); ``high`` waits at most the old fixed 500 ms unless the sound says unfinished (< 0.5) or
the words lead on; ``low`` is patient. Held-out figures in
docs/results/2026-11-30-endpoint-quality-semantic-vad-fit.md."""
_LEADING = """
a an the my your his her its our their some any every each no
and but or nor so because if when while although though unless until since than as
to of for at by with from into onto between through during without within against among
about near toward towards upon via per despite amid amongst beneath underneath
um uh er erm i he she we they which whose
"""
LEADING_WORDS = frozenset(_LEADING.split())
"""Closed-class words (articles, possessives, conjunctions, prepositions, subject pronouns, fillers) after which an
English sentence rarely ends: a turn whose words so far end on one most likely goes on. Words that often end a
sentence are left out (object pronouns and demonstratives as in "repeat that", particles as in "turn it on",
question words as in "why?"). Prepositions are in as a class, every one that is not also a common particle or
adverb ("turn it on", "come over", "see you after", "look around" end sentences; "a joke about", "a pharmacy near"
do not). English grammar, not fitted on the endpoint set."""
_AUXILIARY = ("is are was were am be been being will would shall should can could may might must "
              "do does did have has had")
AUXILIARIES = frozenset(_AUXILIARY.split())
"""Auxiliaries lead on too ("I need the table to be ... ready by six"), except in a sentence the recogniser marked
as a question ("do you know where it is?") and in a short answer of at most :data:`SHORT_ANSWER_WORDS` words ("yes
I can.", "it is.")."""
SHORT_ANSWER_WORDS = 3
_POLITE_END = re.compile(r",\s*please\W*$")
"""A closing "please" ("two coffees, please."); "please" leads on otherwise ("can you please ... turn it off"),
except in a sentence marked as a question ("could you speak slower please?") whose "please" does not follow "you"
straight away: "could you please?" has no verb yet, whatever mark the recogniser put after it."""
_WORD = re.compile(r"[a-z0-9']+")
_OPEN_END = re.compile(r"(?:,|\.\.\.|…)[\"')\]]*$")


def leads_on(words: str) -> bool:
    """True when ``words`` end on a word that leads on to more (:data:`LEADING_WORDS`, :data:`AUXILIARIES`, an
    unclosing "please"), or on a comma or an ellipsis; a recogniser's final full stop is ignored (Whisper puts one
    after almost anything)."""
    found = _WORD.findall(words.lower())
    if not found:
        return False
    text = words.strip()
    if found[-1] in LEADING_WORDS or _OPEN_END.search(text) is not None:
        return True
    if found[-1] == "please":
        asks_no_verb = len(found) > 1 and found[-2] == "you"
        return (asks_no_verb or not text.endswith("?")) and _POLITE_END.search(text.lower()) is None
    return found[-1] in AUXILIARIES and not text.endswith("?") and len(found) > SHORT_ANSWER_WORDS


_FINAL = re.compile(r"[.?!][\"')\]]*$")
DOUBTED_LAST_WORD = 0.6
"""Under this probability the recogniser doubts the last word of its guess. At a mid-sentence pause Whisper tiny.en
tidies the fragment into a sentence: it drops or mishears the word that leads on ("My flight leads." for "my flight
leaves at", "I was wondering it." for "... if") and is unsure of the word it wrote there. On issue 43's training
split (``testdata/words_splits.py``'s ``train``: 95 paused sentences in six training voices) 12 of the 23 pauses cut
off ended on a last word under 0.6, all at the plain silence, and 13 of the 96 finished sentences; the threshold was
chosen there. It first applied at every tier; the fresh held-out set showed finished sentences that Smart Turn and
the words agreed on waiting 1.5 s for it (7 of 64), so it now applies at the plain silence only, which loses none of
the training split's cut-offs (docs/results/2026-12-05-turn-words-fresh-set.md)."""


def trails_off(words: str) -> bool:
    """True when ``words`` end without a full stop, question or exclamation mark, or with "...": Whisper
    leaves the mark off, or writes an ellipsis, where the voice trails off mid-sentence."""
    text = words.strip()
    return text.endswith("...") or _FINAL.search(text) is None


def reads_finished(words: str, min_words: int) -> bool:
    """True when ``words`` read as a finished sentence: at least ``min_words`` words, a final mark
    (:func:`trails_off` is false) and no last word that leads on."""
    return len(_WORD.findall(words.lower())) >= min_words and not trails_off(words) and not leads_on(words)


@dataclass(frozen=True)
class TieredPreset:
    """The default endpoint: a plain silence (``middle_ms``, server_vad's 500 ms) unless the witnesses agree.

    Ends after ``short_ms`` when the sound says finished (probability >= ``high``) *and* the words read as a
    finished sentence (:func:`reads_finished`); waits ``long_ms`` when the words lead on (:func:`leads_on`, however
    sure the sound is, and before it is scored), or the sound says unfinished (probability < ``low``) and the words
    trail off (:func:`trails_off`). Words that have not come back yet count as leading on (issue 43: "I need a table
    for ..." must not be answered for want of its words), so the turn waits ``long_ms`` at most for them; the
    machine re-checks the endpoint when they arrive. Where the plain silence would end the turn, words whose last
    word the recogniser doubts (``last_word_probability`` under :data:`DOUBTED_LAST_WORD`) wait ``long_ms`` too: at
    a pause it tidies a fragment into a sentence by dropping or mishearing the word that leads on. Not where Smart
    Turn and the words agree the turn is finished (the short silence). A score that has not come back leaves the
    plain silence.
    With :attr:`text_end_below`, the language model's end-of-sentence estimate for the guess's words (asked with the
    pause's speculative reply, back 44-168 ms after the guess) weighs at the plain and the short silence: under the
    threshold either becomes the long one, and the short one waits for an estimate still coming, up to the plain
    silence (issue 43: Smart Turn and the words agreed on "How many calories are in?"; the estimate did not).
    Short answers ("Yes.", "Stop.") need no word count to avoid the long wait.

    The sound is scored only once the silence has lasted ``score_after_ms``: a pause the speech resumes from
    sooner costs no end-of-turn pass, and a score asked then (of the same audio, cut where the silence began)
    is still in time for ``short_ms`` when the pass takes under ``short_ms - score_after_ms``."""

    high: float
    low: float
    min_words: int
    short_ms: int
    middle_ms: int
    long_ms: int
    score_after_ms: int = 96
    text_end_below: float | None = None
    """Under this, the language model's estimate that the guess's words end the sentence (:class:`TextEndEstimate`)
    reads them as leading on: the long silence, where the plain or (with :attr:`text_end_short`) the short one would
    end the turn (``None``: never, and no tier waits for it)."""
    text_end_short: bool = True
    """The estimate weighs at the short silence too: while an estimate asked for the guess's words has not come back,
    the short silence counts as the plain one (the machine re-checks the endpoint when it comes), and one under
    :attr:`text_end_below` turns it into the long one. Off: it weighs at the plain silence only, and the short
    silence never waits for it (the rule before issue 43's every-tier one, kept for side-by-side figures)."""

    def silence_ms(self, probability: float | None, words: str | None,
                   last_word_probability: float | None = None, text_end: float | None = None, *,
                   text_end_pending: bool = False) -> int:
        """The silence for this evidence (``last_word_probability``: the recogniser's for the guess's last word,
        where it says; ``text_end``: the language model's estimate for these words, once back;
        ``text_end_pending``: that estimate was asked for these words and has not come back yet)."""
        silence = self._tier(probability, words, last_word_probability)
        short = silence == self.short_ms and self.text_end_short
        if self.text_end_below is None or not (short or silence == self.middle_ms):
            return silence
        if self.says_leads_on(text_end):
            return self.long_ms
        if short and text_end is None and text_end_pending:
            return self.middle_ms  # at most the plain silence waits for it: a late estimate costs no more
        return silence

    def says_leads_on(self, text_end: float | None) -> bool:
        """Whether the language model's estimate (``None``: none, or not back yet) reads the words as leading on."""
        return self.text_end_below is not None and text_end is not None and text_end < self.text_end_below

    def _tier(self, probability: float | None, words: str | None, last_word_probability: float | None) -> int:
        if words is None or leads_on(words):
            return self.long_ms
        # a doubted last word turns the plain silence into the long one; it does not overrule both witnesses
        plain = self.middle_ms
        if last_word_probability is not None and last_word_probability < DOUBTED_LAST_WORD:
            plain = self.long_ms
        if probability is None:
            return plain
        if probability >= self.high and reads_finished(words, self.min_words):
            return self.short_ms
        if probability < self.low and trails_off(words):
            return self.long_ms
        return plain


DEFAULT_TIERS = TieredPreset(high=0.93, low=0.91, min_words=4, short_ms=200, middle_ms=500, long_ms=1500,
                             text_end_below=0.05)
"""Fitted by ``training/endpoint_tiers.py`` on the training voices of the endpoint set (the middle and long
silences given: server_vad's 500 ms and semantic_vad's 1.5 s); held-out figures in
docs/results/2026-11-30-tiered-endpoint.md."""


@dataclass(frozen=True)
class TurnEndScored:
    """The end-of-turn model's probability that turn ``item_id`` is complete, for the silence that began at
    ``at_ms`` (``None``: the model failed, or refused an optional score for want of CPU; the tiered endpoint then
    waits its plain silence, ``semantic_vad`` its long one)."""

    item_id: str
    at_ms: float
    probability: float | None


@dataclass(frozen=True)
class TextEndEstimate:
    """The language model's probability that the guess ``words`` of turn ``item_id`` end the sentence (a final
    mark or the end of the turn next: :mod:`bargein.engines.think.text_end`), read with the pause's speculative
    reply (:class:`~bargein.session.core.listen_vocabulary.PrefetchReply` with ``estimate_end``). It counts only
    for the guess whose words it was read for. ``probability`` ``None``: none will come (the model failed, the
    estimate was dropped with its guess, or it was never started), so no tier waits for it."""

    item_id: str
    words: str
    probability: float | None


@dataclass
class TurnEvidence:
    """What the witnesses said about the current silence of one turn."""

    silence_at_ms: float | None = None
    probability: float | None = None
    words: str | None = None
    last_word_probability: float | None = None
    """How sure the recogniser was of the guess's last word, where it says."""
    text_end: float | None = None
    """The language model's estimate that :attr:`words` end the sentence, once back (:class:`TextEndEstimate`)."""
    text_end_asked: bool = False
    """That estimate was asked for :attr:`words` and has not come back, nor been reported lost."""

    @property
    def text_end_pending(self) -> bool:
        """An estimate for the current words is still coming."""
        return self.text_end_asked and self.text_end is None

    def silence(self, at_ms: float) -> None:
        """A new silence began: what was said about an earlier one no longer counts."""
        self.silence_at_ms, self.probability, self.words, self.last_word_probability = at_ms, None, None, None
        self.text_end, self.text_end_asked = None, False

    def ask_text_end(self, words: str) -> None:
        """The language model's estimate was asked for ``words``: pending, if they are this silence's guess's."""
        if self.words is not None and self.words.strip() == words.strip():
            self.text_end_asked = True

    def take(self, event: Any) -> None:
        """Record a score (for this silence only), the words of the guess made at this silence, or the language
        model's estimate for exactly those words (or the news that none will come); a partial transcript (no
        ``transcript`` field) is ignored, as it may predate the silence."""
        if isinstance(event, TurnEndScored):
            if event.at_ms == self.silence_at_ms:
                self.probability = event.probability
        elif isinstance(event, TextEndEstimate):
            if self.words is not None and event.words == self.words.strip():
                self.text_end, self.text_end_asked = event.probability, False
        elif ((transcript := getattr(event, "transcript", None)) is not None and self.silence_at_ms is not None
              and getattr(event, "at_ms", None) in (None, self.silence_at_ms)):
            if str(transcript.text) != self.words:  # an estimate was (or is being) read for the older words
                self.words, self.text_end, self.text_end_asked = str(transcript.text), None, False
            timings = getattr(transcript, "words", ())
            self.last_word_probability = timings[-1].probability if timings else None

    def silence_ms(self, preset: SemanticPreset) -> int:
        """The silence after which this turn ends, as the witnesses' answers so far say."""
        return preset.silence_ms(self.probability, self.words)


def endpoint_silence_ms(base_ms: int, *, eagerness: str | None, evidence: TurnEvidence | None,
                        confirm: bool, tiers: TieredPreset | None = None) -> int:
    """The silence that ends the current turn: ``base_ms`` (``silence_duration_ms``) for plain ``server_vad``;
    with ``tiers`` (the default endpoint) their short, plain or long silence; with ``eagerness`` (semantic
    VAD) the preset's short, middle or long silence; each as the evidence says."""
    silence = base_ms
    if tiers is not None and evidence is not None:
        silence = tiers.silence_ms(evidence.probability, evidence.words, evidence.last_word_probability,
                                   evidence.text_end, text_end_pending=evidence.text_end_pending)
    if eagerness is not None:
        preset = SEMANTIC_PRESETS[eagerness]
        silence = preset.long_ms if evidence is None else evidence.silence_ms(preset)
    if confirm:
        silence = max(silence * 2, CONFIRM_MS)
    return silence
