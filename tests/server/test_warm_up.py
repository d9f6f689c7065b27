"""The start-up warm-up: the default session's real first prompt reaches the LLM before the server is ready."""

from __future__ import annotations

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeEndOfTurn, FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.protocol.session_config import SessionConfig
from bargein.server.warm_up import warm_first_turn
from bargein.tools.registry import default_registry


def engines(llm: FakeLanguageModel, turn: FakeEndOfTurn | None) -> Engines:
    return Engines(FakeVad(), FakeRecognizer(), llm, FakeSynthesizer(), turn)


async def test_the_default_prompt_with_the_builtin_tools_is_evaluated_and_the_turn_model_runs() -> None:
    llm, turn = FakeLanguageModel(), FakeEndOfTurn()
    await warm_first_turn(engines(llm, turn), default_registry())
    prompt = llm.seen[-1]
    assert prompt[0].role == "system" and prompt[0].content == SessionConfig().instructions
    offered = {tool["name"] for tool in llm.seen_options[-1].tools}
    assert offered == {tool["name"] for tool in default_registry().definitions()}
    assert turn.calls == 1


async def test_a_failing_engine_is_logged_not_raised() -> None:
    assert await warm_first_turn(engines(FakeLanguageModel(fail=True), None), None) >= 0.0
