"""Real recorded speech for the endpoint set: a held-out family no policy is ever fitted on.

The recordings are the ones Debian's ``pocketsphinx-testdata`` ships: five LibriVox sentences read
aloud (*Sense and Sensibility*, 4 to 23 words) and three short commands (``goforward``, ``numbers``,
``something``). Each is a **complete** clip (the turn should end soon after its last word). Each
LibriVox sentence also gives **paused** clips: silence (600, 900 or 1,200 ms) spliced in at a real word
boundary, found from Whisper's word timings and moved to the quietest 10 ms nearby, at every boundary
that leaves at least two words on each side. The speaker's voice before the splice is their real
mid-sentence voice (not a synthetic comma); what it lacks is the breath and hesitation sounds a real
pause would have. Few speakers (one reader, one command speaker): read the figures as a check, not as a
survey.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from testdata.endpoint_clips import (
    LEAD_S,
    PAUSES_MS,
    RATE,
    Audio,
    Clip,
    Family,
    frame_db,
    loud_bounds,
    place,
    write_clip,
)

DATA = Path("/usr/share/pocketsphinx/test/data")
LIBRIVOX = ("0870", "0880", "0890", "0920", "0930")
COMMANDS = ("goforward", "numbers", "something")
FAMILY: Family = "librivox"


def _recording(name: str) -> Audio:
    from testdata.speech import librivox_clip

    if name in COMMANDS:
        pcm = np.fromfile(DATA / f"{name}.raw", dtype="<i2")
        return (pcm.astype(np.float32) / 32768.0).astype(np.float32)
    return librivox_clip(name)


def _words(audio: Audio) -> list[tuple[str, float, float]]:
    """Whisper's words with their start and end (s)."""
    from faster_whisper import WhisperModel

    from bargein.engines.transcribe.asr_models import resolve_model

    global _MODEL
    if _MODEL is None:
        _MODEL = WhisperModel(str(resolve_model("tiny.en").path), device="cpu", compute_type="int8",
                              cpu_threads=2, local_files_only=True)
    segments, _ = _MODEL.transcribe(audio, language="en", beam_size=1, word_timestamps=True,
                                    condition_on_previous_text=False)
    return [(w.word.strip(), float(w.start), float(w.end)) for s in segments for w in (s.words or [])]


_MODEL = None


def _quietest(audio: Audio, near_s: float, window_s: float = 0.08) -> int:
    """The sample at the start of the quietest 10 ms frame within ``window_s`` of ``near_s``."""
    db = frame_db(audio)
    frame = RATE // 100
    centre = int(near_s * 100)
    low, high = max(1, centre - int(window_s * 100)), min(len(db) - 1, centre + int(window_s * 100) + 1)
    return (low + int(np.argmin(db[low:high]))) * frame


def speech_end(audio: Audio) -> int:
    """Where the last word ends (sample): the last 10 ms frame whose 50 ms median level is 12 dB above
    the recording's own noise floor (its 10th percentile) and within 40 dB of its loudest (a recording's
    noise lies above the synthetic families' fixed 40 dB floor; the median ignores lone clicks). An
    estimate: a soft final consonant or a breath can move it by a few hundred ms."""
    db = frame_db(audio)
    level = np.median(np.lib.stride_tricks.sliding_window_view(np.pad(db, 2, mode="edge"), 5), axis=1)
    loud = np.flatnonzero(level >= max(db.max() - 40.0, float(np.percentile(db, 10)) + 12.0))
    return int((loud[-1] + 1) * (RATE // 100))


def build_real(out: Path) -> list[Clip]:
    """Make every clip of the real family under ``out`` (the caller caches the manifest)."""
    clips: list[Clip] = []
    for index, name in enumerate(LIBRIVOX + COMMANDS):
        raw = _recording(name)
        start, _ = loud_bounds(raw)
        speech = raw[start:]  # the recording's own quiet tail stays: its noise is part of the test
        end = speech_end(speech)
        rng = np.random.default_rng(7_000 + index)
        words = _words(speech[:end])
        text = " ".join(word for word, _, _ in words)
        slug = f"{FAMILY}-{name}"
        clips.append(write_clip(out, Clip(f"{slug}-complete", FAMILY, name, index, text, "complete", 0, 0.0,
                                          LEAD_S + end / RATE, f"{slug}-complete.wav"), place(speech, rng)))
        if name in COMMANDS:
            continue
        for cut in range(2, len(words) - 1):
            at = _quietest(speech, (words[cut - 1][2] + words[cut][1]) / 2)
            pause_ms = PAUSES_MS[(index + cut) % len(PAUSES_MS)]
            gap = np.zeros(int(pause_ms * RATE / 1000), np.float32)
            spliced = np.concatenate([speech[:at], gap, speech[at:]])
            said = " ".join(w for w, _, _ in words[:cut]) + "... " + " ".join(w for w, _, _ in words[cut:])
            clips.append(write_clip(out, Clip(f"{slug}-paused{cut:02d}", FAMILY, name, index, said, "paused",
                                              pause_ms, LEAD_S + at / RATE, LEAD_S + (end + len(gap)) / RATE,
                                              f"{slug}-paused{cut:02d}.wav"), place(spliced, rng)))
    return clips
