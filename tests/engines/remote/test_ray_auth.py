"""The Ray cluster of the remote stages: an open one is refused, and no key travels to the deployments."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bargein.config import Settings, Stage

ray = pytest.importorskip("ray")
HEAD = Path(__file__).resolve().parents[2] / "support" / "ray_head.py"
KEYED = Settings(api_keys=["sk-client-key"], llm_api_key="sk-upstream-key", llm_url="http://10.0.0.5:8080/v1",
                 asr_model="base", llm_model="qwen", tts_engine="flite")


def test_the_deployments_receive_their_stages_settings_and_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from bargein.engines.remote import deployments

    bound: dict[str, str] = {}

    class Captured:
        def __init__(self, stage: str) -> None:
            self.stage = stage

        def options(self, **_options: Any) -> Captured:
            return self

        def bind(self, settings_json: str) -> str:
            bound[self.stage] = settings_json
            return settings_json

    stages: list[Stage] = ["vad", "asr", "llm", "tts"]
    monkeypatch.setattr(deployments, "DEPLOYMENTS", {stage: Captured(stage) for stage in stages})
    monkeypatch.setattr(deployments.serve, "start", lambda **_kwargs: None)
    monkeypatch.setattr(deployments.serve, "run", lambda *_args, **_kwargs: None)
    deployments.deploy(KEYED, stages)
    assert set(bound) == set(stages)
    for stage, settings_json in bound.items():
        assert "sk-" not in settings_json, f"the {stage} deployment would receive a key: {settings_json}"
    assert deployments.replica_settings(bound["asr"]).asr_model == "base"
    llm = deployments.replica_settings(bound["llm"])
    assert (llm.llm_model, llm.llm_url) == ("qwen", "http://10.0.0.5:8080/v1")
    assert deployments.replica_settings(bound["tts"]).tts_engine == "flite"


def test_a_ray_client_address_needs_the_operators_word() -> None:
    from bargein.engines.remote.ray_auth import RayAuthError, check_cluster

    with pytest.raises(RayAuthError, match="--ray-insecure"):
        check_cluster("ray://10.0.0.9:10001", insecure=False)
    check_cluster("ray://10.0.0.9:10001", insecure=True)  # said: no check, no connection here


@pytest.fixture(scope="module")
def heads() -> Iterator[dict[str, str]]:
    """Two local heads: one with token authentication, one without; their GCS addresses."""
    started: list[subprocess.Popen[str]] = []
    addresses: dict[str, str] = {}
    homes = [tempfile.mkdtemp(prefix="bgray", dir="/tmp") for _ in range(2)]  # short: Ray's socket paths
    try:
        for mode, home in zip(("token", "disabled"), homes, strict=True):
            head = subprocess.Popen([sys.executable, str(HEAD), mode, home], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
            started.append(head)
            assert head.stdout is not None
            addresses[mode] = head.stdout.readline().strip()
            assert addresses[mode], f"the {mode} head did not start"
        yield addresses
    finally:
        for head in started:
            if head.stdin is not None:
                head.stdin.close()
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                head.kill()
        for home in homes:
            subprocess.run(["rm", "-rf", home], check=False)


@pytest.mark.slow
def test_a_head_started_with_token_auth_refuses_a_client_without_the_token(heads: dict[str, str]) -> None:
    from bargein.engines.remote.ray_auth import cluster_is_open

    assert not cluster_is_open(heads["token"])
    assert cluster_is_open(heads["disabled"])


@pytest.mark.slow
def test_serve_refuses_an_open_cluster_unless_told(heads: dict[str, str]) -> None:
    from bargein.engines.remote.connect import RemoteEngineConfigError, _checked

    with pytest.raises(RemoteEngineConfigError, match="without a token"):
        _checked(heads["disabled"], Settings(ray_address=heads["disabled"]), joining=False)
    _checked(heads["disabled"], Settings(ray_address=heads["disabled"], ray_insecure=True), joining=False)
    _checked(heads["token"], Settings(ray_address=heads["token"]), joining=False)
