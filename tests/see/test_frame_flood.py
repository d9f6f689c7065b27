"""A session that sends 10,000 camera frames stays within its bound: the sampler's bytes, and the process's resident
memory grows by at most 50 MB (issue 44's figure), whatever the frames."""

from __future__ import annotations

import json
import os

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.realtime_session import RealtimeSession
from tests.support.pictures import data_url, encode, scene

pytestmark = pytest.mark.slow  # about half a minute of decoding


def resident_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_ten_thousand_frames_stay_within_the_bound() -> None:
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), FakeSynthesizer()))
    urls = [json.dumps({"type": "bargein.camera.frame", "image_url": data_url(encode(scene(k), "JPEG"))})
            for k in range(40)]
    session.eyes.sampler.speech_started()  # the clip fills too: the user talks over the whole flood
    for k in range(500):  # warm-up: allocator pools, thread stacks, the clip at its bound
        await session.handle_message(urls[k % len(urls)])
    before = resident_bytes()
    for k in range(10_000):
        await session.handle_message(urls[k % len(urls)])
        assert session.eyes.sampler.nbytes <= session.eyes.sampler.limits.max_bytes
    grown = resident_bytes() - before
    assert grown <= 50 * 1024 * 1024, f"resident memory grew {grown / 2**20:.1f} MB"
    assert len(session.eyes.sampler.clip) <= session.eyes.sampler.limits.max_frames
    assert len(session.conversation) == 0
