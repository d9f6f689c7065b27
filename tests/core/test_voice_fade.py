"""The endpoint silence counted from where the voice fell to the room's level (``voice_fade``), on scripted
timelines of Silero probabilities and frame levels: Silero's slow decay no longer adds to every endpoint, and
soft speech, a short gap and a noisy room are not taken for the voice's end."""

from __future__ import annotations

from dataclasses import replace

from bargein.session import core as dx
from bargein.session.core.voice_fade import MAX_BACKDATE_MS
from tests.support.timelines import FRAME_MS, NO_CLASSIFIER, Timeline, of

ROOM_DB = -60.0
VOICE_DB = -20.0
TAIL_DB = -55.0
"""Under the quiet line (the floor + 12 dB): the room's level, though Silero still calls it speech."""
SILERO_ONLY = replace(NO_CLASSIFIER, endpointing=replace(NO_CLASSIFIER.endpointing, voice_fade=False))


def spoken(settings: dx.TurnSettings = NO_CLASSIFIER, *, room_db: float = ROOM_DB) -> Timeline:
    """A timeline that heard 640 ms of the room (the noise floor learns it), then 1 s of a clear voice."""
    t = Timeline(settings)
    t.frames(0.05, 640, room_db)
    assert of(t.frames(0.9, 1024, VOICE_DB), dx.SpeechStarted)
    return t


def test_the_silence_begins_where_the_voice_faded_not_where_silero_decayed() -> None:
    t = spoken()
    faded_at = t.now_ms
    tail = t.frames(0.8, 160, TAIL_DB)  # Silero's probability still high over the room's level
    began = of(tail, dx.SilenceBegan)
    assert [b.at_ms for b in began] == [faded_at]  # backdated to the fade, told 96 ms into it
    assert not of(tail, dx.SpeechStopped)
    ended = t.frames(0.05, 500 - 160, ROOM_DB)
    stopped = of(ended, dx.SpeechStopped)
    assert stopped == [dx.SpeechStopped(began[0].item_id, faded_at)]
    assert of(ended, dx.CommitBuffer)[0].end_ms == faded_at + 512  # 500 ms after the fade, whole frames


def test_without_the_fade_the_silence_waits_for_silero() -> None:
    t = spoken(SILERO_ONLY)
    faded_at = t.now_ms
    assert not of(t.frames(0.8, 160, TAIL_DB), dx.SilenceBegan)
    silero_at = t.now_ms
    ended = t.frames(0.05, 512, ROOM_DB)
    assert [b.at_ms for b in of(ended, dx.SilenceBegan)] == [silero_at]
    assert of(ended, dx.CommitBuffer)[0].end_ms == silero_at + 512 > faded_at + 512


def test_soft_speech_that_silero_hears_is_the_voice() -> None:
    t = spoken()
    assert of(t.frames(0.8, 160, TAIL_DB), dx.SilenceBegan)
    # Silero still hears speech MAX_BACKDATE_MS into the quiet stretch: soft speech, not a fade
    assert of(t.frames(0.8, MAX_BACKDATE_MS, TAIL_DB), dx.SpeechResumed)
    assert not of(t.frames(0.8, 640, TAIL_DB), dx.SilenceBegan)  # and no new fade in it
    silero_at = t.now_ms
    ended = t.frames(0.05, 512, ROOM_DB)
    assert [b.at_ms for b in of(ended, dx.SilenceBegan)] == [silero_at]
    assert of(ended, dx.CommitBuffer)[0].end_ms == silero_at + 512


def test_the_endpoint_waits_for_silero_and_counts_little_before_it() -> None:
    t = spoken()
    t.frames(0.4, 704, TAIL_DB)  # quiet for longer than the 500 ms, Silero unsure (between its two thresholds)
    assert not of(t.actions, dx.CommitBuffer)
    silero_at = t.now_ms
    ended = t.frames(0.05, 320, ROOM_DB)
    commit = of(ended, dx.CommitBuffer)[0]
    # at most MAX_BACKDATE_MS is counted before Silero's offset, so the commit comes at the first frame end
    # 500 - MAX_BACKDATE_MS after it (244 ms: the eighth frame)
    assert MAX_BACKDATE_MS == 256 and commit.end_ms == silero_at + 8 * FRAME_MS


def test_a_short_gap_begins_no_silence_and_the_voice_coming_back_resumes_the_turn() -> None:
    t = spoken()
    assert not of(t.frames(0.9, 64, TAIL_DB), dx.SilenceBegan)  # a stop consonant, a gap between words
    t.frames(0.9, 320, VOICE_DB)
    assert of(t.frames(0.9, 128, TAIL_DB), dx.SilenceBegan)
    assert of(t.frames(0.9, 64, VOICE_DB), dx.SpeechResumed)
    t.frames(0.05, 448, ROOM_DB)  # a new silence of 448 ms: short of the 500 ms
    assert not of(t.actions, dx.CommitBuffer)


def test_silero_over_the_room_does_not_end_the_fade() -> None:
    """A frame Silero calls speech but at the room's level neither resumes the turn nor restarts its silence."""
    t = spoken()
    faded_at = t.now_ms
    t.frames(0.05, 128, TAIL_DB)
    assert not of(t.frames(0.9, 96, TAIL_DB), dx.SpeechResumed)
    ended = t.frames(0.05, 320, ROOM_DB)
    assert of(ended, dx.SpeechStopped)[0].audio_end_ms == faded_at


def test_in_a_noisy_room_silero_alone_decides() -> None:
    """A voice only 20 dB above the floor: the quiet line would lie in its own soft sounds, so it is not used."""
    t = spoken(room_db=-40.0)
    tail = t.frames(0.8, 160, -45.0)
    assert not of(tail, dx.SilenceBegan)
    silero_at = t.now_ms
    assert [b.at_ms for b in of(t.frames(0.05, 64, -40.0), dx.SilenceBegan)] == [silero_at]
