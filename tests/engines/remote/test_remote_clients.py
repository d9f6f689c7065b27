"""The Ray Serve clients with fake deployment handles (no Ray): cancel while a replica stalls, calls past their
deadline or given up by their caller cancelled on the replica."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from bargein.engines.remote.clients import RemoteEngineFailure, RemoteLanguageModel, RemoteRecognizer, RemoteVad
from bargein.values import CancelToken, ChatMessage


class _StalledGenerator:
    """A Serve streaming response whose replica sends one token and then stalls until cancelled."""

    def __init__(self) -> None:
        self.sent = 0
        self.cancelled = False

    def __aiter__(self) -> _StalledGenerator:
        return self

    async def __anext__(self) -> Any:
        if self.sent == 0:
            self.sent += 1
            return "Once"
        await asyncio.Event().wait()  # the replica never answers again

    def cancel(self) -> None:
        self.cancelled = True


class _Handle:
    """Just enough of a deployment handle: ``options(stream=True)`` and ``stream.remote(...)``."""

    def __init__(self) -> None:
        self.generators: list[_StalledGenerator] = []
        self.stream = self

    def options(self, **_: Any) -> _Handle:
        return self

    def remote(self, *_: Any) -> _StalledGenerator:
        self.generators.append(_StalledGenerator())
        return self.generators[-1]


async def test_a_cancel_while_the_replica_stalls_returns_at_once_and_stops_the_replica() -> None:
    """Barge-in while the replica is silent: the stream ends now (not after the call's deadline) and the
    replica's generation is cancelled."""
    handle = _Handle()
    llm = RemoteLanguageModel(handle, timeout_s=3600)
    cancel = CancelToken()
    received: list[str] = []

    async def consume() -> None:
        async for token in llm.stream([ChatMessage(role="user", content="Story?")], cancel=cancel):
            received.append(token)
            asyncio.get_running_loop().call_soon(cancel.cancel)  # cancel while the next token is awaited

    await asyncio.wait_for(consume(), timeout=10)
    assert received == ["Once"]
    assert handle.generators[0].cancelled
    assert llm.queue_depth == 0


async def test_a_stalled_replica_still_fails_the_call_at_its_deadline() -> None:
    handle = _Handle()
    llm = RemoteLanguageModel(handle, timeout_s=0.05)
    with pytest.raises(RemoteEngineFailure, match="TimeoutError"):
        _ = [token async for token in llm.stream([ChatMessage(role="user", content="Story?")],
                                                 cancel=CancelToken())]
    assert handle.generators[0].cancelled and llm.queue_depth == 0


async def test_a_reply_that_ends_is_streamed_whole() -> None:
    class Finite(_StalledGenerator):
        async def __anext__(self) -> Any:
            self.sent += 1
            if self.sent > 3:
                raise StopAsyncIteration
            return f"t{self.sent}"

    handle = _Handle()
    handle.remote = lambda *_: handle.generators.append(Finite()) or handle.generators[-1]  # type: ignore[method-assign]
    llm = RemoteLanguageModel(handle, timeout_s=3600)
    tokens = [token async for token in llm.stream([ChatMessage(role="user", content="Hi")], cancel=CancelToken())]
    assert tokens == ["t1", "t2", "t3"] and llm.queue_depth == 0


class _RefusingHandle:
    """A recogniser deployment whose replica refuses every call for load, as Ray re-raises it: a type derived
    from the replica's own (``RecognizerBusy``)."""

    def __init__(self) -> None:
        self.transcribe = self

    def remote(self, *_: Any) -> Any:
        from bargein.engines.transcribe.whisper_asr import RecognizerBusy

        class RayTaskError(RecognizerBusy):  # Ray's dual type: its own error and the replica's
            pass

        async def refuse() -> Any:
            raise RayTaskError("3 recognitions are already waiting")
        return asyncio.ensure_future(refuse())


async def test_a_replica_refusing_for_load_leaves_the_stage_up() -> None:
    """Refused for load on a replica: the call fails for its caller, but three in a row do not mark speech
    recognition down for every session (they were counted as failures)."""
    import numpy as np

    from bargein.engines.health import StageHealth
    from bargein.engines.remote.clients import RemoteRecognizer
    from bargein.engines.resilience import ResilientRecognizer
    from bargein.engines.stage_calls import Deadlines, StageFailed

    health = StageHealth("asr")
    asr = ResilientRecognizer(RemoteRecognizer(_RefusingHandle(), timeout_s=5), health, Deadlines())
    for _ in range(3):
        with pytest.raises(StageFailed):
            await asr.transcribe(np.zeros(1600, np.float32))
    assert health.state == "ok" and health.refusals == 3 and health.failures == 0
    health.close()


class _Response:
    """A Serve DeploymentResponse whose replica never answers; records ``cancel()``."""

    def __init__(self) -> None:
        self.cancelled = False

    def __await__(self) -> Any:
        return asyncio.get_running_loop().create_future().__await__()  # never resolved

    def cancel(self) -> None:
        self.cancelled = True


class _Method:
    def __init__(self) -> None:
        self.responses: list[_Response] = []

    def remote(self, *_: Any) -> _Response:
        self.responses.append(_Response())
        return self.responses[-1]


class _TranscribeAndStepHandle:
    def __init__(self) -> None:
        self.transcribe = _Method()
        self.step = _Method()


async def test_a_remote_asr_call_past_its_deadline_is_cancelled_on_the_replica() -> None:
    handle = _TranscribeAndStepHandle()
    asr = RemoteRecognizer(handle, timeout_s=0.05)
    with pytest.raises(RemoteEngineFailure, match="TimeoutError"):
        await asr.transcribe(np.zeros(1600, np.float32))
    assert handle.transcribe.responses[0].cancelled
    assert asr.queue_depth == 0


async def test_a_remote_asr_call_whose_caller_gives_up_is_cancelled_on_the_replica() -> None:
    """The stage's own deadline (shorter than ``ray_timeout_s``) or a closed session cancels the caller."""
    handle = _TranscribeAndStepHandle()
    asr = RemoteRecognizer(handle, timeout_s=3600)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await asr.transcribe(np.zeros(1600, np.float32))
    assert handle.transcribe.responses[0].cancelled
    assert asr.queue_depth == 0


async def test_a_lost_remote_vad_frame_is_cancelled_on_the_replica() -> None:
    handle = _TranscribeAndStepHandle()
    vad = RemoteVad(handle, timeout_s=0.05)
    stream = vad.open_stream()
    assert await stream.probability(np.zeros(vad.frame_samples, np.float32)) == 0.0
    assert handle.step.responses[0].cancelled and vad.failures == 1
