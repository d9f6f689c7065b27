"""Every stage on Ray Serve: a local Ray cluster on this machine, the real models in its replicas.

The official openai client talks to the real server whose VAD, Whisper, LLM and Kokoro are Serve
deployments; a misconfigured remote stage stops start-up with a message naming the setting; a replica
killed in the middle of a reply costs that reply, and the same session answers the next request.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from bargein.config import Settings, Stage
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bargein.engines.remote.connect import RemoteEngineConfigError
from bargein.engines.resilience import LLM_CUT_APOLOGY
from tests.support.realtime_client import EventLog, collect, openai_client
from tests.support.server import free_port, running_server
from tests.support.spoken_turn import assert_heard_answered_and_spoken, spoken_turn

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow
STAGES: list[Stage] = ["vad", "asr", "llm", "tts"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, namespace="serve", log_to_driver=False)
    try:
        yield
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


def deployed(prefix: str, **settings: Any) -> Settings:
    """Deploy every stage under ``prefix``; the settings a server uses to reach them."""
    from bargein.engines.remote.deployments import deploy

    served = Settings(ray_address="auto", ray_stages=STAGES, ray_app_prefix=prefix, **settings)
    deploy(served, STAGES)
    return served


async def test_a_spoken_conversation_through_ray_serve(cluster: None) -> None:
    settings = deployed("real", llm_model="smollm2-135m")
    engines = await asyncio.to_thread(load_engines, settings)  # as the server does: off the event loop
    assert all("on Ray Serve" in engines.description[stage] for stage in STAGES), engines.description
    with running_server(engines) as host:
        log, done = await spoken_turn(host, "0880", timeout=180)
    assert_heard_answered_and_spoken(log, done, "0880")


def test_an_unreachable_ray_address_stops_the_server_naming_the_setting() -> None:
    server = subprocess.run([sys.executable, "-m", "bargein", "serve", "--engines", "instant", "--port",
                             str(free_port()), "--ray-address", "127.0.0.1:1", "--ray-stages", "asr"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert server.returncode != 0
    assert "--ray-address '127.0.0.1:1' (BARGEIN_RAY_ADDRESS): nothing answers" in server.stderr + server.stdout


def test_a_missing_application_or_another_model_fails_start_up_naming_the_setting(cluster: None) -> None:
    with pytest.raises(RemoteEngineConfigError, match="--ray-app-prefix 'nowhere'"):
        load_engines(Settings(engines="instant", ray_address="auto", ray_stages=["llm"], ray_app_prefix="nowhere"))
    deployed("fakes", engines="fake")
    with pytest.raises(RemoteEngineConfigError, match=r"--llm-model asks for 'qwen2\.5-0\.5b'.*serves 'fake'"):
        load_engines(Settings(llm_model="qwen2.5-0.5b", ray_address="auto", ray_stages=["llm"],
                              ray_app_prefix="fakes"))


async def test_a_replica_that_dies_mid_reply_ends_the_reply_with_an_apology_and_the_session_lives(
        cluster: None) -> None:
    settings = deployed("dying", engines="fake")
    engines = await asyncio.to_thread(load_engines, settings)
    long_text = " ".join(["word"] * 400)  # the fake LLM echoes it at 10 ms a token: 4 s of streaming
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein") as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await connection.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await connection.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": long_text}]})
            await connection.response.create()
            await log.wait_for(lambda e: e["type"] == "response.output_text.delta", timeout=60)
            _kill_replica("dying-llm")
            cut = await log.wait_for(lambda e: e["type"] == "response.done", timeout=60)
            await connection.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "again please"}]})
            await connection.response.create()
            second = await log.wait_for(lambda e: e["type"] == "response.done"
                                        and e["response"]["id"] != cut["response"]["id"], timeout=120)
            reader.cancel()
    # the resilience layer turns the lost stream into a spoken (here written) apology, not a failed reply
    texts = [e["text"] for e in log.of("response.output_text.done")]
    assert cut["response"]["status"] == "completed", log.types()
    assert texts[0].startswith("You") and texts[0].endswith(LLM_CUT_APOLOGY.strip()), texts[0][-80:]
    assert second["response"]["status"] == "completed", second
    assert "again please" in log.of("response.output_text.done")[-1]["text"]


def _kill_replica(app: str) -> None:
    from ray.util import list_named_actors

    names = [a["name"] for a in list_named_actors(all_namespaces=True) if app in a["name"]
             and "REPLICA" in a["name"].upper()]
    assert names, list_named_actors(all_namespaces=True)
    ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)


def test_engines_built_from_settings_stay_local_without_ray_stages() -> None:
    engines: Engines = load_engines(Settings(engines="instant"))
    assert "Ray" not in " ".join(engines.description.values())
