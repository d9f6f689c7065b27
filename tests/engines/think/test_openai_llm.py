"""The OpenAI-compatible engine: wire format, and streaming/cancelling against a real llama.cpp server."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from bargein.engines.think.llm_models import SMOLLM2_135M
from bargein.engines.think.llm_prompt import DEFAULT_SYSTEM_PROMPT
from bargein.engines.think.openai_llm import (
    LanguageModelError,
    OpenAICompatibleLanguageModel,
    delta_text,
    parse_sse_data,
    to_openai_messages,
)
from bargein.values import CancelToken, ChatImage, ChatMessage, GenerationOptions

PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0"
         "gAAAABJRU5ErkJggg==")


def test_images_become_image_url_parts() -> None:
    wire = to_openai_messages([
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="What is this?", images=(ChatImage(PIXEL),)),
        ChatMessage(role="assistant", content="A dot."),
    ])
    assert wire == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": PIXEL}}]},
        {"role": "assistant", "content": "A dot."},
    ]


def test_sse_lines() -> None:
    chunk = parse_sse_data('data: {"choices":[{"delta":{"content":"Hi"}}]}')
    assert chunk is not None and delta_text(chunk) == "Hi"
    assert parse_sse_data("data: [DONE]") is None
    assert parse_sse_data(": keep-alive") is None
    assert parse_sse_data("event: ping") is None
    role_only = parse_sse_data('data: {"choices":[{"delta":{"role":"assistant"}}]}')
    assert role_only is not None and delta_text(role_only) == ""
    with pytest.raises(LanguageModelError, match="overloaded"):
        parse_sse_data('data: {"error": {"message": "overloaded"}}')


async def test_request_body_carries_system_prompt_options_and_images() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        assert request.headers["authorization"] == "Bearer sk-test"
        body = 'data: {"choices":[{"delta":{"content":"Fine."}}]}\n\ndata: [DONE]\n\n'
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler),
                               headers={"Authorization": "Bearer sk-test"})
    llm = OpenAICompatibleLanguageModel("http://llm.test/v1/", "some-model", client=client)
    messages = [ChatMessage(role="user", content="Look", images=(ChatImage(PIXEL),))]
    pieces = [p async for p in llm.stream(messages, cancel=CancelToken(),
                                          options=GenerationOptions(max_tokens=7, temperature=0.2))]
    await client.aclose()
    assert pieces == ["Fine."]
    body = seen[0]
    assert body["model"] == "some-model" and body["stream"] is True
    assert body["max_tokens"] == 7 and body["temperature"] == 0.2
    sent = body["messages"]
    assert isinstance(sent, list)
    assert sent[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert sent[1]["content"][1] == {"type": "image_url", "image_url": {"url": PIXEL}}


class _StallingStream(httpx.AsyncByteStream):
    """One chunk, then nothing until closed: a server that hangs mid-reply."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'data: {"choices":[{"delta":{"content":"Once"}}]}\n\n'
        await self.closed.wait()

    async def aclose(self) -> None:
        self.closed.set()


async def test_cancel_while_the_server_stalls_returns_and_hangs_up() -> None:
    stream = _StallingStream()
    client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})))
    llm = OpenAICompatibleLanguageModel("http://llm.test/v1", "m", client=client)
    cancel = CancelToken()
    received: list[str] = []

    async def consume() -> None:
        async for piece in llm.stream([ChatMessage(role="user", content="Story?")], cancel=cancel):
            received.append(piece)
            asyncio.get_running_loop().call_soon(cancel.cancel)  # cancel while the next read waits

    await asyncio.wait_for(consume(), timeout=5)
    await client.aclose()
    assert received == ["Once"]
    assert stream.closed.is_set(), "the HTTP stream must be closed so the server stops generating"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``llama_cpp.server`` on loopback serving the packaged SmolLM2."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # A file, not a pipe: the server logs a lot while loading and would block on a full pipe.
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(SMOLLM2_135M.path()),
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--model_alias", "smollm2"],
        env=env, stdout=log_file, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"llama_cpp.server exited with {process.returncode}: {tail}")
            try:
                if httpx.get(f"{base}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama_cpp.server did not come up")
            time.sleep(0.3)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log_file.close()


@pytest.mark.slow
async def test_streams_a_reply_from_a_real_server(llama_server: str) -> None:
    llm = OpenAICompatibleLanguageModel(llama_server, "smollm2")
    pieces = [p async for p in llm.stream([ChatMessage(role="user", content="Describe a sunny day at the beach.")],
                                          cancel=CancelToken(), options=GenerationOptions(max_tokens=24))]
    await llm.aclose()
    assert len(pieces) > 1, "the reply must arrive in pieces, not at once"
    assert "".join(pieces).strip()


@pytest.mark.slow
async def test_cancel_stops_the_stream_within_one_chunk(llama_server: str) -> None:
    llm = OpenAICompatibleLanguageModel(llama_server, "smollm2")
    cancel = CancelToken()
    received: list[str] = []
    story = [ChatMessage(role="user", content="Tell me a very long story about a dragon.")]
    async for piece in llm.stream(story, cancel=cancel, options=GenerationOptions(max_tokens=400)):
        received.append(piece)
        if len(received) == 2:
            cancel.cancel("barge-in")
    assert len(received) == 2, "nothing may be yielded after the cancel"
    # The server is free again right away: a new request streams normally.
    again = [p async for p in llm.stream([ChatMessage(role="user", content="Say hi.")],
                                         cancel=CancelToken(), options=GenerationOptions(max_tokens=8))]
    await llm.aclose()
    assert again


@pytest.mark.slow
async def test_a_cancel_before_the_first_chunk_yields_nothing(llama_server: str) -> None:
    llm = OpenAICompatibleLanguageModel(llama_server, "smollm2")
    cancel = CancelToken()
    cancel.cancel()
    assert [p async for p in llm.stream([ChatMessage(role="user", content="Hi")], cancel=cancel)] == []
    await llm.aclose()


@pytest.mark.slow
async def test_a_server_error_is_reported(llama_server: str) -> None:
    llm = OpenAICompatibleLanguageModel(llama_server.removesuffix("/v1") + "/nowhere", "smollm2")
    with pytest.raises(LanguageModelError, match="404"):
        async for _ in llm.stream([ChatMessage(role="user", content="Hi")], cancel=CancelToken()):
            pass
    await llm.aclose()
