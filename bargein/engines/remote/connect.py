"""Start-up of the remote stages: reach the Ray cluster, find each stage's application, check it.

Every failure here stops the server before it accepts a session, with a message that names the
setting to fix: an unreachable ``ray_address``, a cluster that answers clients without a token (refused
unless ``ray_insecure``: :mod:`~bargein.engines.remote.ray_auth`), a stage in ``ray_stages`` with no
application under ``ray_app_prefix``, or an application that serves another model than ``asr_model`` /
``llm_model`` / ``tts_engine`` say.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any

from bargein.config import Settings, Stage
from bargein.engines.base import LanguageModel, SpeechRecognizer, SpeechSynthesizer, VoiceActivityDetector
from bargein.engines.remote.clients import (
    RemoteLanguageModel,
    RemoteRecognizer,
    RemoteSynthesizer,
    RemoteToolCallingModel,
    RemoteVad,
)

log = logging.getLogger(__name__)
DESCRIBE_TIMEOUT_S = 20.0
VAD_TIMEOUT_SHARE = 0.1
"""A VAD frame gets a tenth of ``ray_timeout_s``: a frame that late is better counted as lost."""


class RemoteEngineConfigError(RuntimeError):
    """A remote stage is misconfigured; the message names the setting."""


@dataclass
class RemoteStages:
    """The engines that are clients of remote deployments (``None``: load that stage here)."""

    vad: VoiceActivityDetector | None = None
    asr: SpeechRecognizer | None = None
    llm: LanguageModel | None = None
    tts: SpeechSynthesizer | None = None


def connect_remote_stages(settings: Settings, description: dict[str, str]) -> RemoteStages:
    """Clients for every stage in ``settings.ray_stages``, each checked against its application."""
    _init_ray(settings)
    stages = RemoteStages()
    for stage in dict.fromkeys(settings.ray_stages):
        handle, described = _checked_handle(settings, stage)
        origin = described.get("origin") or described.get("model", "?")
        description[stage] = f"{origin} on Ray Serve ({described['app']})"
        if stage == "vad":
            stages.vad = RemoteVad(handle, settings.ray_timeout_s * VAD_TIMEOUT_SHARE)
        elif stage == "asr":
            stages.asr = RemoteRecognizer(handle, settings.ray_timeout_s)
        elif stage == "llm":
            client = RemoteToolCallingModel if described.get("tools") else RemoteLanguageModel
            stages.llm = client(handle, settings.ray_timeout_s)
        else:
            stages.tts = RemoteSynthesizer(handle, settings.ray_timeout_s, int(described["sample_rate"]),
                                           listing=described)
    return stages


def _init_ray(settings: Settings) -> None:
    import ray

    address = settings.ray_address
    if not address:
        raise RemoteEngineConfigError(f"ray_stages {settings.ray_stages} need a Ray cluster: set --ray-address "
                                      "(BARGEIN_RAY_ADDRESS), e.g. 'auto' or 'HOST:6379'")
    if ray.is_initialized():  # connected already (a test's local cluster): still never an open one
        _checked(ray.get_runtime_context().gcs_address, settings, joining=False)
        return
    _reachable(address)
    _checked(address, settings, joining=True)
    try:
        ray.init(address=address, namespace="serve", log_to_driver=False, ignore_reinit_error=True,
                 logging_level=logging.WARNING)
    except Exception as error:
        raise RemoteEngineConfigError(f"--ray-address {address!r} (BARGEIN_RAY_ADDRESS): cannot join the Ray "
                                      f"cluster: {type(error).__name__}: {error}"[:600]) from error


def _checked(address: str, settings: Settings, *, joining: bool) -> None:
    from bargein.engines.remote.ray_auth import RayAuthError, check_cluster

    try:
        check_cluster(address, insecure=settings.ray_insecure, joining=joining)
    except RayAuthError as error:
        raise RemoteEngineConfigError(str(error)) from error


def _reachable(address: str) -> None:
    """Fail fast on an address nobody listens on (Ray itself retries for a minute)."""
    if address == "auto":
        return
    host_port = address.removeprefix("ray://")
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise RemoteEngineConfigError(f"--ray-address {address!r} (BARGEIN_RAY_ADDRESS): expected 'auto', "
                                      "'HOST:PORT' or 'ray://HOST:PORT'")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as error:
        raise RemoteEngineConfigError(f"--ray-address {address!r} (BARGEIN_RAY_ADDRESS): nothing answers at "
                                      f"{host}:{port} ({error})") from error


def _checked_handle(settings: Settings, stage: Stage) -> tuple[Any, dict[str, Any]]:
    from ray import serve

    from bargein.engines.remote.deployments import app_name

    name = app_name(settings, stage)
    try:
        handle = serve.get_app_handle(name)
        described: dict[str, Any] = dict(handle.describe.remote().result(timeout_s=DESCRIBE_TIMEOUT_S))
    except Exception as error:
        raise RemoteEngineConfigError(
            f"--ray-stages includes {stage!r} but the Ray cluster at {settings.ray_address!r} has no working Serve "
            f"application {name!r} (--ray-app-prefix {settings.ray_app_prefix!r}; deploy it with "
            f"`bargein ray-deploy --stages {stage}`): {type(error).__name__}: {error}"[:700]) from error
    described["app"] = name
    _check_model(settings, stage, described)
    return handle, described


def _check_model(settings: Settings, stage: Stage, described: dict[str, Any]) -> None:
    served = described.get("model", "?")
    if settings.engines != "default":
        wanted, setting = "fake", f"--engines {settings.engines}"
    elif stage == "asr":
        wanted, setting = settings.asr_model, "--asr-model"
    elif stage == "llm":
        wanted, setting = settings.llm_model, "--llm-model"
    elif stage == "tts":
        wanted, setting = settings.tts_engine, "--tts"
    else:
        return
    if stage != "vad" and served != wanted:
        raise RemoteEngineConfigError(f"{setting} asks for {wanted!r} but the Ray Serve application "
                                      f"{described['app']!r} serves {served!r}: redeploy it or change {setting}")
