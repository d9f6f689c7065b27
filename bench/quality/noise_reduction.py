"""What input noise suppression (RNNoise, ``audio.input.noise_reduction``) costs and what it buys.

The session's input path (20 ms appends of pcm16 at 24 kHz, out at 16 kHz) runs with
``audio.input.noise_reduction`` on (RNNoise from ``pyrnnoise``) and off (the resampler alone). **Cost**: the median
time to denoise one 20 ms append, against the plain resampler it replaces. **Voice activity**: the share of Silero
VAD frames called speech on 20 s of noise alone, and the share of clean speech's speech frames still called speech
with noise at 5 dB SNR. **Recognition**: Whisper tiny.en's word error rate on the 5 LibriVox clips mixed with
seeded pink, room and white noise at 10, 5 and 0 dB SNR, with 0.5 s of noise before the speech so the suppressor
has learnt the noise when the words start, with and without suppression. No clip or setting here was tuned on.

    python -m bench.quality.noise_reduction [--model tiny.en] [--snr 10 5 0] [--noise pink room white]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import numpy as np
import numpy.typing as npt

from bargein.audio.framing import Framer
from bargein.audio.noise_suppression import NoiseSuppressor
from bargein.audio.resample import LowDelayResampler, resample
from bargein.engines.listen.silero_vad import SileroVad
from bargein.engines.transcribe.wer import word_error_rate
from bargein.engines.transcribe.whisper_asr import WhisperRecognizer, load_whisper
from testdata.noise_sources import BACKGROUNDS, NOISES
from testdata.speech import LIBRIVOX, librivox_clip, librivox_reference

Audio = npt.NDArray[np.float32]
APPEND = 480
"""One 20 ms append at 24 kHz."""


def clip_numbers() -> list[str]:
    """Every LibriVox clip of the test data."""
    return sorted(p.stem.rsplit("-", 1)[1] for p in LIBRIVOX.glob("sense_and_sensibility_*.wav"))


def _stream(process: object, audio24k: Audio) -> tuple[Audio, list[float]]:
    assert callable(process)
    times: list[float] = []
    out: list[Audio] = []
    for start in range(0, len(audio24k), APPEND):
        began = time.perf_counter()
        out.append(process(audio24k[start:start + APPEND]))
        times.append(time.perf_counter() - began)
    return np.concatenate(out), times


def denoise(audio24k: Audio) -> tuple[Audio, list[float]]:
    """The session's path with suppression on: 20 ms appends through a fresh suppressor."""
    suppressor = NoiseSuppressor(24_000, 16_000)
    try:
        return _stream(suppressor.process, audio24k)
    finally:
        suppressor.close()


def plain(audio24k: Audio) -> tuple[Audio, list[float]]:
    """The session's path with suppression off: the streaming resampler alone."""
    return _stream(LowDelayResampler(24_000, 16_000).process, audio24k)


def mix(speech16k: Audio, noise_name: str, snr_db: float, seed: int) -> Audio:
    """Speech over a noise bed at ``snr_db`` (RMS over the whole clip), 0.5 s of bed before it, at 24 kHz."""
    speech = resample(np.concatenate([np.zeros(8_000, np.float32), speech16k]), 16_000, 24_000)
    noise = BACKGROUNDS[noise_name](np.random.default_rng(seed), len(speech) / 24_000)[:len(speech)]
    gain = np.sqrt(np.mean(speech ** 2) / (np.mean(noise ** 2) + 1e-12)) * 10 ** (-snr_db / 20)
    mixed = speech + gain * noise
    return (mixed / max(1.0, float(np.max(np.abs(mixed))) / 0.99)).astype(np.float32)


async def speech_frames(vad: SileroVad, audio16k: Audio) -> npt.NDArray[np.bool_]:
    """Silero's speech decision (probability over 0.5) for each of its frames, from a fresh stream."""
    stream = vad.open_stream()
    try:
        return np.array([await stream.probability(f) > 0.5 for f in Framer(vad.frame_samples).push(audio16k)])
    finally:
        stream.close()


async def vad_effect(clips: dict[str, Audio], noises: list[str], snr_db: float) -> None:
    """False speech frames on noise alone, and speech frames kept in noise (against clean speech's own frames)."""
    vad = SileroVad()
    print(f"Silero VAD (speech = probability > 0.5); speech in noise at {snr_db:g} dB SNR")
    print("noise    false speech frames on noise alone (without / with)   "
          "speech frames found in noise (without / with)")
    for noise_name in noises:
        sound = {**NOISES, **BACKGROUNDS}[noise_name](np.random.default_rng(99), 20.0)
        alone = (0.1 * sound / (np.max(np.abs(sound)) + 1e-9)).astype(np.float32)  # peaks at -20 dBFS
        false_without = float(np.mean(await speech_frames(vad, plain(alone)[0])))
        false_with = float(np.mean(await speech_frames(vad, denoise(alone)[0])))
        found_without: list[float] = []
        found_with: list[float] = []
        for index, speech in enumerate(clips.values()):
            truth = await speech_frames(vad, np.concatenate([np.zeros(8_000, np.float32), speech]))
            noisy = mix(speech, noise_name, snr_db, seed=index) if noise_name in BACKGROUNDS else None
            if noisy is None:
                continue
            for found, audio in ((found_without, plain(noisy)[0]), (found_with, denoise(noisy)[0])):
                decided = await speech_frames(vad, audio)
                n = min(len(decided), len(truth))
                found.append(float(np.sum(decided[:n] & truth[:n]) / max(1, np.sum(truth[:n]))))
        kept = (f"{statistics.mean(found_without):.3f} / {statistics.mean(found_with):.3f}"
                if found_without else "-")
        print(f"{noise_name:8} {false_without:.3f} / {false_with:.3f}{'':37}{kept}", flush=True)


def _text(asr: WhisperRecognizer, audio16k: Audio) -> str:
    return asr.transcribe_sync(audio16k, language="en").text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--snr", type=float, nargs="+", default=[10.0, 5.0, 0.0])
    parser.add_argument("--noise", nargs="+", default=["pink", "room", "white"], choices=sorted(BACKGROUNDS))
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    clips = {n: librivox_clip(n) for n in clip_numbers()}
    references = {n: librivox_reference(n) for n in clips}

    on_ms: list[float] = []
    off_ms: list[float] = []
    for speech in clips.values():
        noisy = mix(speech, "pink", 5.0, seed=0)
        on_ms += [t * 1e3 for t in denoise(noisy)[1]]
        off_ms += [t * 1e3 for t in plain(noisy)[1]]
    on, off = statistics.median(on_ms), statistics.median(off_ms)
    print(f"cost per 20 ms append over {len(on_ms)} appends: suppression on {on:.3f} ms, off {off:.3f} ms "
          f"(median; {100 * (on - off) / 20:.2f}% of one core in real time for the suppressor)")

    asyncio.run(vad_effect(clips, [*args.noise, "clicks", "tones"], 5.0))

    asr = load_whisper(args.model, cpu_threads=1)
    clean = word_error_rate(references.values(), [_text(asr, s) for s in clips.values()])
    clean_nr = word_error_rate(references.values(),
                               [_text(asr, denoise(resample(s, 16_000, 24_000))[0]) for s in clips.values()])
    print(f"{args.model} WER on {len(clips)} clips, clean: {clean:.3f} without, {clean_nr:.3f} with suppression")
    print("noise  SNR dB  WER without  WER with")
    for noise_name in args.noise:
        for snr in args.snr:
            without: list[str] = []
            with_nr: list[str] = []
            for index, speech in enumerate(clips.values()):
                noisy = mix(speech, noise_name, snr, seed=index)
                without.append(_text(asr, plain(noisy)[0]))
                with_nr.append(_text(asr, denoise(noisy)[0]))
            print(f"{noise_name:6} {snr:6.1f}  {word_error_rate(references.values(), without):11.3f}  "
                  f"{word_error_rate(references.values(), with_nr):8.3f}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
