"""Finished questions as benchmark clips, in voices the tiered endpoint was not fitted on.

The LibriVox clips ``bench.first_audio`` streams by default are read narration cut mid-sentence ("he might
even have been made amiable himself", followed in the book by "had he married a more amiable woman"): an
end-of-turn model that hears them as unfinished is right to wait. A user of a voice agent mostly asks
something and stops. These clips are such turns: questions synthesised by Flite's ``slt``, Festival's
``ked`` diphone voice and Festival's HTS ``slt`` voice, and finished sentences recorded by a human speaker
(the Asterisk prompts). None of these voices is among the training voices of ``bench/endpoint_tiers.py``
(Kokoro, eSpeak NG, Flite rms/awb/kal16), and none of the texts is among its sentences.
"""

from __future__ import annotations

import numpy as np

from bench.realtime_harness import WIRE_RATE, SpeechClip, speech_clip

SYNTHETIC: tuple[tuple[str, str], ...] = (
    ("flite-slt", "Why is the sky blue?"),
    ("festival-ked", "How far away is the moon?"),
    ("festival-slt-hts", "What is a good name for a black cat?"),
    ("flite-slt", "What should I cook for dinner tonight?"),
    ("festival-ked", "Can you tell me a short joke?"),
    ("festival-slt-hts", "How many legs does a spider have?"),
)
"""(voice family, question) of ``tests/data/voices.py``: held-out synthesisers."""

RECORDED: dict[str, str] = {
    "vm-savefolder.wav": "Which folder should I save the message to?",
    "vm-changeto.wav": "Change to which folder?",
    "vm-sorry.wav": "I'm sorry I did not understand your response.",
    "tt-weasels.wav": "Weasels have eaten our phone system.",
}
"""Recorded human speech (Debian's ``asterisk-core-sounds-en-wav``; its ``core-sounds-en.txt`` gives the words)."""

SEED = 11
"""The synthesisers' drawn rate and pitch, fixed so every run streams the same audio."""


def question_clips() -> list[SpeechClip]:
    """Ten finished turns as 24 kHz pcm16 clips with their speech bounds, synthetic and recorded in turn."""
    from tests.data.voices import FAMILIES, asterisk_prompt

    rng = np.random.default_rng(SEED)
    spoken = [(_name(family, text), FAMILIES[family].say(text, rng)) for family, text in SYNTHETIC]
    recorded = [(_name("asterisk", text), asterisk_prompt(name)) for name, text in RECORDED.items()]
    order = [spoken[0], recorded[0], spoken[1], spoken[2], recorded[1], spoken[3], recorded[2], spoken[4],
             spoken[5], recorded[3]]
    lead = np.zeros(int(0.2 * WIRE_RATE), np.float32)  # a recording may start on its first word
    return [speech_clip(name, np.concatenate([lead, audio])) for name, audio in order]


def _name(family: str, text: str) -> str:
    """A short clip name for the per-turn lines: the voice and the text's first two words."""
    words = "-".join(text.lower().replace("'", "").rstrip("?.!").split()[:2])
    return f"{family}/{words}"
