"""Finished questions as benchmark clips, in voices the tiered endpoint was not fitted on.

The LibriVox clips ``bench.latency.first_audio`` streams by default are read narration cut mid-sentence ("he might
even have been made amiable himself", followed in the book by "had he married a more amiable woman"): an
end-of-turn model that hears them as unfinished is right to wait. A user of a voice agent mostly asks
something and stops. These clips are such turns: questions synthesised by Flite's ``slt``, Festival's
``ked`` diphone voice and Festival's HTS ``slt`` voice, and finished sentences recorded by a human speaker
(the Asterisk prompts). None of these voices is among the training voices of ``training/endpoint_tiers.py``
(Kokoro, eSpeak NG, Flite rms/awb/kal16), and none of the texts is among its sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.harness.realtime_harness import SpeechClip, speech_clip

SYNTHESISED_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("flite-slt", "Why is the sky blue?"),
    ("festival-ked", "How far away is the moon?"),
    ("festival-slt-hts", "What is a good name for a black cat?"),
    ("flite-slt", "What should I cook for dinner tonight?"),
    ("festival-ked", "Can you tell me a short joke?"),
    ("festival-slt-hts", "How many legs does a spider have?"),
)
"""(voice family of ``testdata/voices.py``, question): held-out synthesisers."""

ASTERISK_PROMPTS: dict[str, str] = {
    "Which folder should I save the message to?": "vm-savefolder.wav",
    "Change to which folder?": "vm-changeto.wav",
    "I'm sorry I did not understand your response.": "vm-sorry.wav",
    "Weasels have eaten our phone system.": "tt-weasels.wav",
}
"""Recorded human speech, text to file (Debian's ``asterisk-core-sounds-en-wav``; its ``core-sounds-en.txt`` gives
the words)."""

ORDER = ("s0", "r0", "s1", "s2", "r1", "s3", "r2", "s4", "s5", "r3")
"""The turns in the order streamed (s: synthesised, r: recorded, by index): no voice speaks two turns in a row."""

SEED = 11
"""The synthesisers' drawn rate and pitch, fixed so every run streams the same audio."""
LEAD_S = 0.2
"""Silence put before each turn: a recording may start on its first word."""


@dataclass(frozen=True)
class Turn:
    """One finished turn: its short name, its words and its audio (float32 at the wire rate, without the lead)."""

    name: str
    text: str
    audio: npt.NDArray[np.float32]


def question_turns() -> list[Turn]:
    """The ten turns in :data:`ORDER`, synthesised (deterministically) or read from the recordings."""
    from testdata.voices import FAMILIES, asterisk_prompt

    rng = np.random.default_rng(SEED)
    synthesised = [Turn(_name(family, text), text, FAMILIES[family].say(text, rng))
                   for family, text in SYNTHESISED_QUESTIONS]
    recorded = [Turn(_name("asterisk", text), text, asterisk_prompt(file)) for text, file in ASTERISK_PROMPTS.items()]
    return [(synthesised if key[0] == "s" else recorded)[int(key[1:])] for key in ORDER]


def question_clips() -> list[SpeechClip]:
    """The ten turns as clips of 24 kHz pcm16 with their speech bounds, each after :data:`LEAD_S` of silence."""
    return [speech_clip(turn.name, turn.audio, lead_s=LEAD_S) for turn in question_turns()]


def _name(family: str, text: str) -> str:
    """A short clip name for the per-turn lines: the voice and the text's first two words."""
    words = "-".join(text.lower().replace("'", "").rstrip("?.!").split()[:2])
    return f"{family}/{words}"
