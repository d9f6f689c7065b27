"""Word lists for telling an interruption from a backchannel or a vocal sound, and the recogniser's slips.

Whisper tiny.en often turns a short command said over a noisy line into a near word ("Cancel that." as
"Council that", "Pause." as "Pies."). :data:`MISHEARD` lists such slips, collected from the *training*
voice families only (``training/fit_listening.py`` prints the candidates it sees); a word there counts as
the command it stands for, but only as a feature the model weighs, never alone.
"""

from __future__ import annotations

import re

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
