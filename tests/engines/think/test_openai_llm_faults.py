"""The OpenAI-compatible engine against servers that misbehave: late answers past a deadline, a 200 that is
not an event stream, an endless error body. Each fault must cost one turn (an apology, a failure recorded),
never a connection held open for good, memory without bound, or a silent reply that looks like success."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from bargein.engines.health import StageHealth
from bargein.engines.resilience import LLM_APOLOGY, Deadlines, ResilientLanguageModel
from bargein.engines.think.openai_llm import LanguageModelError, OpenAICompatibleLanguageModel
from bargein.values import CancelToken, ChatMessage

HELLO = [ChatMessage(role="user", content="Hello?")]
SSE = {"content-type": "text/event-stream"}


class _Body(httpx.AsyncByteStream):
    """A response body that records whether anyone closed it."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks
        self.closed = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        self.closed.set()


async def test_a_deadline_missed_while_the_server_has_not_answered_leaves_no_response_open() -> None:
    """The first-token deadline fires while the request waits for the server's headers: when the server
    answers late, that response must be hung up (or the request abandoned), not left holding a connection
    of the shared pool for good."""
    release = asyncio.Event()
    settled = asyncio.Event()  # the late response was closed, or the request was abandoned before it
    body = _Body(b'data: {"choices":[{"delta":{"content":"Late"}}]}\n\n', b"data: [DONE]\n\n")

    async def handler(request: httpx.Request) -> httpx.Response:
        try:
            await release.wait()
        except asyncio.CancelledError:
            settled.set()
            raise
        return httpx.Response(200, stream=body, headers=SSE)

    async def closed() -> None:
        await body.closed.wait()
        settled.set()

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    llm = OpenAICompatibleLanguageModel("http://llm.test/v1", "m", client=client)
    health = StageHealth("llm")
    resilient = ResilientLanguageModel(llm, health, Deadlines(llm_first_token_s=0.05))
    pieces = [piece async for piece in resilient.stream(HELLO, cancel=CancelToken())]
    assert pieces == [LLM_APOLOGY] and health.failures == 1
    watcher = asyncio.ensure_future(closed())
    release.set()
    try:
        await asyncio.wait_for(settled.wait(), timeout=10)
    finally:
        watcher.cancel()
        await client.aclose()


async def test_a_200_that_is_not_an_event_stream_is_a_failure_not_an_empty_reply() -> None:
    """A server that answers 200 with a JSON error body (a proxy, a server that cannot stream) gave no reply:
    the engine says so, and behind the resilience layer the user hears the apology and the failure counts."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json={"error": {"message": "model is loading"}})))
    llm = OpenAICompatibleLanguageModel("http://llm.test/v1", "m", client=client)
    with pytest.raises(LanguageModelError):
        _ = [piece async for piece in llm.stream(HELLO, cancel=CancelToken())]
    health = StageHealth("llm")
    pieces = [piece async for piece in ResilientLanguageModel(llm, health, Deadlines()).stream(
        HELLO, cancel=CancelToken())]
    await client.aclose()
    assert pieces == [LLM_APOLOGY]
    assert health.failures == 1 and health.successes == 0


async def test_an_empty_event_stream_is_a_failure() -> None:
    """A 200 whose body ends before any event (the server gave up at once) is no reply either."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, text="", headers=SSE)))
    llm = OpenAICompatibleLanguageModel("http://llm.test/v1", "m", client=client)
    with pytest.raises(LanguageModelError):
        _ = [piece async for piece in llm.stream(HELLO, cancel=CancelToken())]
    await client.aclose()


async def test_a_stream_with_only_done_is_an_empty_reply_not_a_failure() -> None:
    """``[DONE]`` alone is a well-formed (if empty) reply: the model chose to say nothing."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, text="data: [DONE]\n\n", headers=SSE)))
    llm = OpenAICompatibleLanguageModel("http://llm.test/v1", "m", client=client)
    assert [piece async for piece in llm.stream(HELLO, cancel=CancelToken())] == []
    await client.aclose()


class _EndlessBody(httpx.AsyncByteStream):
    """An error body far larger than anyone should read (counts what was read)."""

    def __init__(self, chunks: int) -> None:
        self.chunks = chunks
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.chunks):
            self.sent += 65_536
            yield b"x" * 65_536

    async def aclose(self) -> None:
        pass


async def test_an_error_status_reads_only_the_start_of_its_body() -> None:
    """The error's body is for the log (its first 500 characters): a huge or endless one is not read whole."""
    body = _EndlessBody(chunks=512)  # 32 MiB
    client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(503, stream=body)))
    llm = OpenAICompatibleLanguageModel("http://llm.test/v1", "m", client=client)
    with pytest.raises(LanguageModelError, match="503"):
        _ = [piece async for piece in llm.stream(HELLO, cancel=CancelToken())]
    await client.aclose()
    assert body.sent <= 1_048_576


async def test_an_llm_url_with_credentials_appears_in_no_log_or_description(caplog: pytest.LogCaptureFixture) -> None:
    """``--llm-url http://user:password@host/v1?key=...``: the startup line, httpx's line for every request
    (INFO) and the error line name the server without the user, the password or the query."""
    from bargein.config import Settings
    from bargein.engines.loaders import load_llm

    url = "http://alice:hunter2@llm.test/v1?api_key=sk-upstream"
    llm, description = load_llm(Settings(llm_url=url, llm_model="m"))
    assert isinstance(llm, OpenAICompatibleLanguageModel) and description == "m at http://llm.test/v1"
    await llm.aclose()
    answers = iter([httpx.Response(200, text='data: {"choices":[{"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n',
                                   headers=SSE), httpx.Response(500, text="upstream failure")])
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: next(answers)))
    llm = OpenAICompatibleLanguageModel(url, "m", client=client)
    with caplog.at_level(logging.INFO):
        assert [piece async for piece in llm.stream(HELLO, cancel=CancelToken())] == ["Hi"]
        with pytest.raises(LanguageModelError, match="500"):
            _ = [piece async for piece in llm.stream(HELLO, cancel=CancelToken())]
    await client.aclose()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "llm.test/v1" in logged, "nothing was logged: the test would prove nothing"
    assert [secret for secret in ("alice", "hunter2", "sk-upstream") if secret in logged] == []
