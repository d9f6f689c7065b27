"""Synthetic sounds for the listening set: backgrounds and non-speech events, all seeded and at 24 kHz.

Each generator takes a ``numpy.random.Generator`` and returns float32 audio at :data:`RATE` with an
arbitrary level; the set builder scales it. Filtering is done in the frequency domain (numpy only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

RATE = 24_000
Audio = npt.NDArray[np.float32]


def _samples(seconds: float) -> int:
    return max(1, round(seconds * RATE))


def band(audio: npt.NDArray[np.floating], low_hz: float, high_hz: float) -> Audio:
    """Band-pass by zeroing FFT bins outside ``[low_hz, high_hz]`` (soft 1-octave skirts, no ringing to speak of)."""
    spectrum = np.fft.rfft(audio)
    freqs = np.fft.rfftfreq(len(audio), 1.0 / RATE)
    gain = np.ones_like(freqs)
    with np.errstate(divide="ignore"):
        below = np.clip(np.log2(np.maximum(freqs, 1e-3) / low_hz) + 1.0, 0.0, 1.0) if low_hz > 0 else 1.0
        above = np.clip(1.0 - np.log2(np.maximum(freqs, 1e-3) / high_hz), 0.0, 1.0)
    gain = gain * below * above
    return np.fft.irfft(spectrum * gain, n=len(audio)).astype(np.float32)


def _coloured(rng: np.random.Generator, seconds: float, exponent: float) -> Audio:
    """Noise whose power falls as 1/f**exponent (0 white, 1 pink, 2 brown)."""
    n = _samples(seconds)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1.0 / RATE)
    freqs[0] = freqs[1] if n > 1 else 1.0
    spectrum *= freqs ** (-exponent / 2)
    spectrum[0] = 0.0
    audio = np.fft.irfft(spectrum, n=n)
    return (audio / (np.std(audio) + 1e-12)).astype(np.float32)


def white(rng: np.random.Generator, seconds: float) -> Audio:
    """Flat-spectrum noise (a fan, a hiss)."""
    return rng.standard_normal(_samples(seconds)).astype(np.float32)


def pink(rng: np.random.Generator, seconds: float) -> Audio:
    """1/f noise (rain, a room, traffic far away)."""
    return _coloured(rng, seconds, 1.0)


def hum_room(rng: np.random.Generator, seconds: float) -> Audio:
    """Brown noise with a mains hum and its harmonics (an office with machines)."""
    n = _samples(seconds)
    t = np.arange(n) / RATE
    mains = rng.choice([50.0, 60.0])
    hum = np.zeros(n)
    for k in (1, 2, 3, 5):
        hum += np.sin(2 * np.pi * mains * k * t + rng.uniform(0, 2 * np.pi)) / k
    brown = band(_coloured(rng, seconds, 2.0), 40, 4000)
    audio = 0.5 * hum / np.std(hum) + brown / (np.std(brown) + 1e-12)
    return audio.astype(np.float32)


def _envelope(n: int, attack_s: float, decay_s: float) -> npt.NDArray[np.float64]:
    t = np.arange(n) / RATE
    attack = np.clip(t / max(attack_s, 1e-4), 0.0, 1.0)
    return attack * np.exp(-np.maximum(t - attack_s, 0.0) / max(decay_s, 1e-4))


def _place(total: int, pieces: Sequence[tuple[int, npt.NDArray[Any]]]) -> Audio:
    out = np.zeros(total, np.float64)
    for start, piece in pieces:
        end = min(total, start + len(piece))
        if end > start:
            out[start:end] += piece[:end - start]
    return out.astype(np.float32)


def clicks(rng: np.random.Generator, seconds: float) -> Audio:
    """A keyboard-like train: short bright clicks with a soft thump, irregular typing rhythm."""
    n = _samples(seconds)
    pieces = []
    at = rng.uniform(0.0, 0.05)
    while at < seconds - 0.02:
        length = _samples(rng.uniform(0.004, 0.012))
        click = band(rng.standard_normal(length + 256), 1500, 9000)[:length] * _envelope(length, 0.0005, 0.0025)
        thump_t = np.arange(length) / RATE
        thump = 0.4 * np.sin(2 * np.pi * rng.uniform(150, 320) * thump_t) * _envelope(length, 0.0005, 0.004)
        pieces.append((_samples(at), (click + thump) * 10 ** (rng.uniform(-6, 0) / 20)))
        at += rng.uniform(0.07, 0.26)  # 4-14 keys a second
    return _place(n, pieces)


def bursts(rng: np.random.Generator, seconds: float) -> Audio:
    """Cough-like events: 1-3 band-passed noise bursts of 100-300 ms with a fast attack."""
    n = _samples(seconds)
    pieces = []
    at = 0.0
    for _ in range(int(rng.integers(1, 4))):
        length = _samples(rng.uniform(0.1, 0.3))
        noise = band(rng.standard_normal(length), rng.uniform(150, 400), rng.uniform(2500, 5000))
        pieces.append((_samples(at), noise * _envelope(length, 0.008, rng.uniform(0.04, 0.1))))
        at += length / RATE + rng.uniform(0.12, 0.35)
        if at > seconds - 0.1:
            break
    return _place(n, pieces)


def tones(rng: np.random.Generator, seconds: float) -> Audio:
    """Beeps (a microwave, a phone): 1-3 pure or dual tones with 5 ms ramps."""
    n = _samples(seconds)
    dual = rng.random() < 0.4
    freqs = (440.0, 480.0) if dual else (float(rng.choice([600.0, 800.0, 1000.0, 1400.0, 2000.0])),)
    pieces = []
    at = 0.0
    for _ in range(int(rng.integers(1, 4))):
        length = _samples(rng.uniform(0.15, 0.6))
        t = np.arange(length) / RATE
        tone = sum(np.sin(2 * np.pi * f * t) for f in freqs)
        ramp = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.005)
        pieces.append((_samples(at), tone * ramp))
        at += length / RATE + rng.uniform(0.1, 0.3)
        if at > seconds - 0.15:
            break
    return _place(n, pieces)


_TRIADS = ((0, 4, 7), (0, 3, 7), (0, 4, 7, 11), (0, 3, 7, 10), (0, 5, 7))


def chords(rng: np.random.Generator, seconds: float) -> Audio:
    """Music-like: a progression of 2-4 plucked chords, each note a decaying harmonic series."""
    n = _samples(seconds)
    count = int(rng.integers(2, 5))
    length = n // count
    t = np.arange(length) / RATE
    pieces = []
    for index in range(count):
        root = 110.0 * 2 ** (int(rng.integers(0, 12)) / 12)
        chord = np.zeros(length)
        for step in _TRIADS[int(rng.integers(0, len(_TRIADS)))]:
            f0 = root * 2 ** (step / 12) * 2 ** int(rng.integers(0, 2))
            chord += sum(np.sin(2 * np.pi * f0 * k * t) / k ** 1.3 for k in range(1, 7) if f0 * k < RATE / 2)
        pieces.append((index * length, chord * _envelope(length, 0.006, rng.uniform(0.25, 0.7))))
    return _place(n, pieces)


NOISES: dict[str, Callable[[np.random.Generator, float], Audio]] = {
    "white": white, "pink": pink, "clicks": clicks, "bursts": bursts, "tones": tones, "chords": chords,
}
"""Non-speech event generators by name (the backchannels come from the TTS instead)."""
BACKGROUNDS: dict[str, Callable[[np.random.Generator, float], Audio]] = {
    "pink": pink, "white": white, "room": hum_room,
}
"""Continuous beds that every case is mixed over."""


def active_level_db(audio: npt.NDArray[np.floating], *, floor_db: float = 30.0) -> float:
    """RMS level in dBFS over the 10 ms frames within ``floor_db`` of the loudest: the sound, not its gaps."""
    frame = RATE // 100
    count = len(audio) // frame
    if count == 0:
        return -120.0
    power = np.mean(np.square(audio[:count * frame].reshape(count, frame), dtype=np.float64), axis=1)
    db = 10 * np.log10(power + 1e-12)
    active = power[db >= db.max() - floor_db]
    return float(10 * np.log10(np.mean(active) + 1e-12))


def active_bounds(audio: npt.NDArray[np.floating], *, floor_db: float = 35.0) -> tuple[float, float]:
    """First and last second at which ``audio`` is within ``floor_db`` of its loudest 10 ms frame."""
    frame = RATE // 100
    count = len(audio) // frame
    power = np.mean(np.square(audio[:count * frame].reshape(count, frame), dtype=np.float64), axis=1)
    db = 10 * np.log10(power + 1e-12)
    loud = np.flatnonzero(db >= db.max() - floor_db)
    if not len(loud):
        return 0.0, 0.0
    return float(loud[0] * frame / RATE), float((loud[-1] + 1) * frame / RATE)
