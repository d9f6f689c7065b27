"""What a client receives when the language model raises during a reply (engines not wrapped for resilience).

The wrapped engines a server loads speak an apology instead (``tests/server/test_faults.py``); an LLM that raises
reaches the session bare only without that wrapper, and then the reply fails with one ``error`` event.
"""

from __future__ import annotations

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from tests.support.faults import FaultyLanguageModel
from tests.support.session_harness import Harness

TALK = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "talk"}]}


@pytest.mark.parametrize("modality", ["audio", "text"])
@pytest.mark.parametrize("after", [0, 6], ids=["at_the_first_token", "mid_reply"])
async def test_an_llm_raising_in_a_reply_is_one_engine_error_and_the_next_turn_is_answered(
        after: int, modality: str) -> None:
    llm = FaultyLanguageModel(FakeLanguageModel(filler="and some more words to say", token_delay_s=0.02))
    llm.fault, llm.after = "raise", after
    h = Harness(Engines(FakeVad(), FakeRecognizer(), llm, FakeSynthesizer(ms_per_char=5)))
    await h.send(type="session.update", session={"output_modalities": [modality]})
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="response.done")
    failed = h.events[-1]["response"]
    errors = [e["error"] for e in h.events if e["type"] == "error"]
    assert failed["status"] == "failed"
    assert [(e["type"], e["code"]) for e in errors] == [("server_error", "engine_error")], "one error per reply"
    kinds = h.types()
    assert kinds.index("error") < kinds.index("response.done")
    if after:  # what was said before the failure went out
        assert any(k.endswith(".delta") for k in kinds)
    llm.fault = None
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="response.done")
    assert h.events[-1]["response"]["status"] == "completed"
    assert len([e for e in h.events if e["type"] == "error"]) == 1
    await h.session.close()
