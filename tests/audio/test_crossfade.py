"""The overlap-crossfade that joins a reply's speech chunks: no click at the seams, exact bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

from bargein.audio.crossfade import Crossfader, crossfade_all, fade_curves
from bargein.values import Float32Audio, SpeechChunk, WordTiming

SR = 24_000


def _tone(seconds: float, freq: float, *, dc: float, phase: float, amp: float = 0.3) -> Float32Audio:
    t = np.arange(round(seconds * SR)) / SR
    return (dc + amp * np.sin(2 * np.pi * freq * t + phase)).astype(np.float32)


def _speech_like(rng: np.random.Generator, count: int = 6, *, noise: float = 0.03) -> list[Float32Audio]:
    """Voiced tone plus a little broadband noise (as in speech), whose DC offset, phase, pitch and length
    change from chunk to chunk, so each naive seam is a step many times larger than any jump inside."""
    chunks = []
    for i in range(count):
        dc = 0.4 if i % 2 == 0 else -0.4
        audio = _tone(rng.uniform(0.05, 0.4), rng.uniform(120, 300), dc=dc + rng.uniform(-0.05, 0.05),
                      phase=rng.uniform(0, 2 * np.pi))
        audio += rng.uniform(-noise, noise, len(audio)).astype(np.float32)
        chunks.append(audio)
    return chunks


def _max_jump(audio: Float32Audio) -> float:
    return float(np.max(np.abs(np.diff(audio)))) if len(audio) > 1 else 0.0


def _stream(chunks: list[SpeechChunk], fader: Crossfader) -> list[SpeechChunk]:
    out = [fader.push(c) for c in chunks]
    out.append(fader.flush())
    return out


@pytest.mark.parametrize("shape", ["linear", "cosine", "equal_power"])
def test_fade_curves_run_from_old_to_new(shape: str) -> None:
    fade_out, fade_in = fade_curves(200, shape)  # type: ignore[arg-type]
    assert fade_out[0] > 0.99 and fade_in[0] < 0.01
    assert fade_out[-1] < 0.01 and fade_in[-1] > 0.99
    assert np.all(np.diff(fade_in) > 0) and np.all(np.diff(fade_out) < 0)
    if shape == "equal_power":
        np.testing.assert_allclose(fade_out**2 + fade_in**2, 1.0, atol=1e-6)
    else:
        np.testing.assert_allclose(fade_out + fade_in, 1.0, atol=1e-6)


@pytest.mark.parametrize("shape", ["linear", "cosine", "equal_power"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_no_seam_jumps_more_than_the_chunks_do(shape: str, seed: int) -> None:
    chunks = _speech_like(np.random.default_rng(seed))
    inside = max(_max_jump(c) for c in chunks)
    assert _max_jump(np.concatenate(chunks)) > 5 * inside, "the test signal must click when joined naively"

    fader = Crossfader(SR, overlap_ms=8.0, shape=shape)  # type: ignore[arg-type]
    emitted = _stream([SpeechChunk(c, SR) for c in chunks], fader)
    joined = np.concatenate([e.audio for e in emitted])
    # Where each seam lands in the joined audio: chunk k starts after the earlier chunks minus k overlaps.
    seams = np.cumsum([len(c) - fader.overlap for c in chunks])[:-1]
    # Equal-power gains sum to more than one mid-seam (up to sqrt 2), so coinciding noise peaks may
    # add up to that much; the amplitude-complementary shapes never exceed the chunks' own jumps.
    limit = inside * (np.sqrt(2.0) if shape == "equal_power" else 1.0)
    for seam in seams:
        region = joined[max(seam - 2 * fader.overlap, 0): seam + 2 * fader.overlap]
        assert _max_jump(region) <= limit, f"click at sample {seam}"
    assert _max_jump(joined) <= limit


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pure_tones_keep_the_seam_slope_close_to_the_signal_slope(seed: int) -> None:
    """Without noise to hide in, a seam between unrelated tones still only bends the slope a little
    (the residual is the step spread over the overlap), while the naive join jumps many times over."""
    chunks = _speech_like(np.random.default_rng(seed), noise=0.0)
    inside = max(_max_jump(c) for c in chunks)
    assert _max_jump(np.concatenate(chunks)) > 10 * inside
    joined = crossfade_all(chunks, SR, overlap_ms=8.0, shape="cosine")
    assert _max_jump(joined) <= 1.5 * inside


def test_streaming_equals_one_shot() -> None:
    rng = np.random.default_rng(7)
    # Lengths include chunks shorter than the overlap and an empty one.
    lengths = [5000, 3, 0, 150, 4000, 1, 191, 193, 2400]
    chunks = [rng.uniform(-0.5, 0.5, n).astype(np.float32) for n in lengths]
    fader = Crossfader(SR, overlap_ms=8.0)
    streamed = np.concatenate([e.audio for e in _stream([SpeechChunk(c, SR) for c in chunks], fader)])
    one_shot = crossfade_all(chunks, SR, overlap_ms=8.0)
    np.testing.assert_allclose(streamed, one_shot, atol=1e-7)


def test_total_length_accounting() -> None:
    chunks = [np.full(n, 0.1, np.float32) for n in (2400, 4800, 960, 7200)]
    fader = Crossfader(SR, overlap_ms=5.0)
    assert fader.overlap == 120
    emitted = [fader.push(SpeechChunk(c, SR)) for c in chunks]
    # Only the overlap is held back after every push: latency stays at one overlap.
    assert fader.held == 120
    for e, c in zip(emitted, chunks, strict=True):
        # The seam before a chunk is faded into its start (the old tail and its head become one
        # overlap) and the seam after it is held back: each emitted piece is one overlap shorter.
        assert len(e.audio) == len(c) - 120
    tail = fader.flush()
    assert len(tail.audio) == 120 and fader.held == 0
    total = sum(len(e.audio) for e in emitted) + len(tail.audio)
    assert total == sum(len(c) for c in chunks) - 3 * 120
    assert fader.samples_in == sum(len(c) for c in chunks) and fader.samples_out == total
    # Constant material stays constant across the seams (the gains sum to one).
    joined = np.concatenate([*(e.audio for e in emitted), tail.audio])
    np.testing.assert_allclose(joined, 0.1, atol=1e-6)


def test_word_timings_follow_the_audio() -> None:
    """A click (impulse) marks where each word starts; after joining, the timing must still point at it."""
    fader = Crossfader(SR, overlap_ms=8.0)
    chunks = []
    for length, marks in ((4800, (1000, 3000)), (7200, (500, 5000)), (2400, (1200,))):
        audio = np.zeros(length, np.float32)
        words = []
        for i, pos in enumerate(marks):
            audio[pos] = 1.0
            words.append(WordTiming(f"w{pos}_{i}", pos * 1000 / SR, (pos + 240) * 1000 / SR))
        chunks.append(SpeechChunk(audio, SR, tuple(words)))
    emitted = _stream(chunks, fader)
    found = 0
    for e in emitted:
        duration_ms = len(e.audio) * 1000 / SR
        for w in e.words:
            assert 0 <= w.start_ms <= w.end_ms <= duration_ms
            pos = round(w.start_ms * SR / 1000)
            assert e.audio[pos] == pytest.approx(1.0), f"{w.word} no longer points at its audio"
            found += 1
    assert found == 5


def test_words_at_the_very_end_are_clamped_to_the_emitted_audio() -> None:
    fader = Crossfader(SR, overlap_ms=10.0)
    chunk = SpeechChunk(np.zeros(2400, np.float32), SR, (WordTiming("end", 95.0, 100.0),))
    out = fader.push(chunk)
    assert len(out.audio) == 2400 - 240
    assert out.words[0].end_ms == pytest.approx(90.0)
    assert out.words[0].start_ms == pytest.approx(90.0)


def test_rejects_wrong_rate_and_starts_fresh_after_flush() -> None:
    fader = Crossfader(SR)
    with pytest.raises(ValueError):
        fader.push(SpeechChunk(np.zeros(10, np.float32), 16_000))
    fader.push(SpeechChunk(np.ones(1000, np.float32), SR))
    fader.flush()
    # A new reply does not fade into the previous one's tail.
    first = fader.push(SpeechChunk(np.full(1000, 0.5, np.float32), SR))
    np.testing.assert_allclose(first.audio, 0.5)
