"""Word lists for telling an interruption from a backchannel or a vocal sound, and the recogniser's slips.

Whisper tiny.en often turns a short command said over a noisy line into a near word ("Cancel that." as
"Council that", "Pause." as "Pies."). :data:`MISHEARD` lists such slips, collected from the *training*
voice families only (``training/fit_listening.py`` prints the candidates it sees); a word there counts as
the command it stands for, but only as a feature the model weighs, never alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BACKCHANNELS = frozenset({
    "uh-huh", "uh huh", "uhhuh", "mhm", "mm-hmm", "mm hmm", "mmhmm", "mm", "hmm", "hm", "mmm", "yeah", "yep",
    "yes", "okay", "ok", "right", "sure", "uh", "um", "ah", "oh", "aha", "i see", "got it", "alright", "cool",
    "all right", "yeah yeah", "okay okay", "uh-huh uh-huh", "mm-hmm mm-hmm", "yes yes", "right right",
})
"""Acknowledgements: over the agent's reply they say "go on", not "stop"."""
COMMAND_WORDS = frozenset({
    "stop", "wait", "hold", "hang", "pause", "next", "skip", "louder", "quieter", "softer", "slower", "faster",
    "repeat", "again", "cancel", "enough", "no", "nope", "quiet", "shush", "hush", "sorry", "excuse", "pardon",
    "hey", "help", "listen", "actually", "back", "continue", "go", "hello", "goodbye", "moment", "try",
    "tomorrow", "shut", "halt", "never", "mind",
})
"""Words that can cut the agent short on their own."""
QUESTION_WORDS = frozenset({"what", "why", "how", "who", "where", "when", "which", "huh"})
MISHEARD: frozenset[str] = frozenset()
"""Near words the recogniser wrote for a command in the training families (see the module docstring)."""
VOCAL_SOUNDS = frozenset({
    "ha", "hah", "heh", "ahem", "achoo", "atchoo", "ugh", "argh", "phew", "whew", "pfft", "psst", "tsk", "hmm",
    "hmmm", "hm", "mm", "mmm", "shh", "sh", "ow", "ahh", "aah", "ooh", "ah", "oh", "uh", "um", "huh",
})
_LAUGH = re.compile(r"(?:[a-z]{0,2}-?)?(?:h[aeiou]-?){2,}h?")
_VOWEL = re.compile(r"[aeiouy0-9]")
_LATIN = re.compile(r"[a-z'’-]+")
YES_SOUNDS = frozenset({"mhm", "mm-hmm", "mm hmm", "mmhmm"})


ACKNOWLEDGEMENTS_MAX_WORDS = 6
"""At most this many words make a run of acknowledgements; a longer utterance says more."""
ACKNOWLEDGEMENTS = BACKCHANNELS | frozenset({
    "thanks", "sure thing", "fair enough", "makes sense", "of course", "exactly",
})
"""Over a reply, also thanks and agreement ("got it, thanks", "sure thing"): they say "go on" as a backchannel does.
Kept apart from :data:`BACKCHANNELS`, which the fitted interruption model's features read as it was fitted. Not
"thank you": Whisper writes it for speech it did not make out (a "Says who?" on a phone line), so it decides
nothing by rule."""


def only_acknowledgements(words: list[str]) -> bool:
    """The words are one acknowledgement of :data:`ACKNOWLEDGEMENTS` or a few in a row ("okay, sure", "oh, I see",
    "okay, got it", "got it, thanks"): over a reply they say "go on" as a single one does."""
    if not words or len(words) > ACKNOWLEDGEMENTS_MAX_WORDS:
        return False
    at = 0
    while at < len(words):
        if at + 1 < len(words) and f"{words[at]} {words[at + 1]}" in ACKNOWLEDGEMENTS:
            at += 2
        elif words[at] in ACKNOWLEDGEMENTS:
            at += 1
        else:
            return False
    return True


def sounds_like_command(words: list[str]) -> bool:
    """A command word, or a near word the recogniser writes for one, within the first three words."""
    return any(w in COMMAND_WORDS or w in MISHEARD for w in words[:3])


def spells_a_sound(words: list[str]) -> bool:
    """The words spell a vocal sound (laughter, "ahem", no vowel at all), not speech."""
    if not words:
        return False
    if all(w in VOCAL_SOUNDS or _LAUGH.fullmatch(w) for w in words):
        return True
    latin = all(_LATIN.fullmatch(w) for w in words)
    return latin and not any(_VOWEL.search(w) for w in words) and " ".join(words) not in YES_SOUNDS


# -- what the words are: questions and corrections over a reply (turn_words.py reads these) ----------------------


@dataclass(frozen=True)
class TurnWords:
    """One language's words that make a segment over a reply a turn of its own, whatever its acoustics: a question
    (a question word, a final question mark, a fragment led by a conjunction or a preposition that continues the
    conversation) or a bare correction. English and Mandarin rows below (:data:`TURN_WORDS`); a language without a
    row has no such rule."""

    question_words: frozenset[str]
    """Words (English) or phrases (Mandarin, matched anywhere in the utterance) that ask."""
    follow_up_leads: frozenset[str]
    """Conjunctions and prepositions that lead a follow-up leaning on the reply when it asks ("but how ...",
    "for whom?", "and then?")."""
    objecting_leads: frozenset[str]
    """Leads that take the turn even without a question word or mark: "but ..." objects, "or ..." offers another
    way ("or maybe tomorrow"); "and ..." or "so ..." alone may only acknowledge ("so true")."""
    adding_leads: frozenset[str]
    """Prepositions that lead a fragment adding to what was asked ("with milk", "for two people", "about the second
    one"): it takes the turn even without a question word or mark (Whisper often drops the mark of a short one),
    unless it is one of :attr:`not_follow_ups`."""
    not_follow_ups: frozenset[str]
    """Set phrases of agreement that open with a lead but add nothing ("for sure", "with pleasure", "at last")."""
    hollow_words: frozenset[str]
    """Pronouns and articles: a preposition followed by only these adds nothing to what was asked ("at you", the
    recogniser's near words for a sneeze; "for me" must ask to take the turn)."""
    corrections: frozenset[str]
    """Whole utterances that say "that's wrong" ("nope", "not that one", 不对)."""
    correction_leads: frozenset[str]
    """First words (English) or opening phrases (Mandarin) that make a short utterance a correction ("no, the
    other one"), unless the utterance is one of :attr:`not_corrections`."""
    not_corrections: frozenset[str]
    """Set phrases that open like a correction but are not one ("no problem", 没事)."""
    question_endings: frozenset[str]
    """Sentence-final particles that ask (Mandarin 吗, 呢); none in English."""
    invented: frozenset[str]
    """What the recogniser invents for noise or silence ("thank you", "you", 谢谢观看): never a question, whatever
    its punctuation."""


ENGLISH_TURN_WORDS = TurnWords(
    question_words=frozenset({
        "what", "why", "how", "who", "whom", "whose", "where", "when", "which", "what's", "how's", "who's",
        "where's", "when's", "why's", "whereabouts",
    }),
    follow_up_leads=frozenset({
        "but", "and", "or", "so", "then", "for", "with", "about", "from", "to", "by", "in", "on", "at", "after",
        "before", "without", "instead", "like", "than", "unless", "because", "except", "although",
    }),
    objecting_leads=frozenset({"but", "or", "instead", "except", "although"}),
    adding_leads=frozenset({
        "with", "without", "for", "about", "from", "to", "by", "in", "on", "at", "after", "before",
    }),
    not_follow_ups=frozenset({
        "for sure", "for real", "with pleasure", "by all means", "in fact", "at last", "at least", "in a way",
        "on it", "about right", "about time", "after all", "to be fair", "in a sense", "for a fact",
    }),
    hollow_words=frozenset({
        "you", "me", "him", "her", "it", "us", "them", "i", "we", "he", "she", "they", "that", "this", "these",
        "those", "there", "here", "the", "a", "an", "ya", "yours", "mine",
    }),
    corrections=frozenset({
        "no", "nope", "nah", "wrong", "incorrect", "not that", "not that one", "not this one", "not this",
        "not quite", "not really", "not like that", "that's wrong", "that's not right", "that's not it",
        "that's not what i asked", "that's not what i meant", "that's not what i said", "not what i asked",
        "not what i meant", "wrong one", "the other one", "no no", "no no no", "nope nope", "you're wrong",
        "that is wrong", "that isn't right", "that's incorrect",
    }),
    correction_leads=frozenset({"no", "nope", "nah", "wrong", "incorrect"}),
    not_corrections=frozenset({
        "no problem", "no worries", "no way", "no kidding", "nope that's fine", "no that's fine", "not bad",
        "no doubt", "no wonder",
    }),
    question_endings=frozenset(),
    invented=frozenset({
        "you", "thank you", "thanks", "thank you for watching", "thanks for watching", "bye", "so", "the",
        "please subscribe", "subtitles by the amara.org community", "i'm sorry", "huh", "okay", "thank you so much",
        "thank you very much", "oh", "uh", "um", "hmm",
    }),
)
"""English: question words, leads of a follow-up, corrections. Written from English grammar, not fitted."""

MANDARIN_TURN_WORDS = TurnWords(
    question_words=frozenset({
        "什么", "为什么", "为啥", "怎么", "怎样", "怎么样", "谁", "哪", "哪里", "哪儿", "哪个", "几", "多少", "啥",
        "何时", "什么时候", "多久", "多长",
    }),
    follow_up_leads=frozenset({
        "但是", "可是", "那", "那么", "还是", "或者", "而且", "然后", "所以", "给", "为了", "跟",
    }),
    objecting_leads=frozenset({"但是", "可是", "还是", "或者"}),
    adding_leads=frozenset({"给", "跟", "为了"}),
    not_follow_ups=frozenset(),
    hollow_words=frozenset({"你", "我", "他", "她", "它", "你们", "我们", "他们", "这", "那", "这个", "那个"}),
    corrections=frozenset({
        "不", "不对", "不是", "错了", "不对不对", "不是不是", "不是这个", "不是那个", "不要这个", "搞错了", "说错了",
        "你错了", "不是这样", "不是这样的", "另一个", "不对吧",
    }),
    correction_leads=frozenset({"不对", "不是", "错了", "搞错"}),
    not_corrections=frozenset({"不是吗", "不错", "不客气", "不用谢", "不好意思"}),
    question_endings=frozenset({"吗", "呢", "么"}),
    invented=frozenset({
        "谢谢", "谢谢观看", "谢谢大家", "谢谢收看", "请不吝点赞订阅转发打赏支持明镜与点点栏目",
        "字幕由amaraorg社区提供", "明镜与点点栏目", "嗯", "啊",
    }),
)
"""Mandarin: question words and particles, leads of a follow-up, corrections (with the language table's commands
in :mod:`bargein.languages`, which already cut on 不对, 不是, 错了 and 为什么). Written, not fitted."""

TURN_WORDS: dict[str, TurnWords] = {"en": ENGLISH_TURN_WORDS, "zh": MANDARIN_TURN_WORDS}
"""The rows by language code."""
