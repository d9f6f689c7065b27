"""The parent's shared engines for ``bargein serve --workers N``: each model loaded once for every session worker.

Before the session workers start, :func:`shared_engines` loads each stage that runs in a supervised
worker process (Whisper, the embedded LLM, Kokoro) once, in the parent, and puts an
:class:`~bargein.engines.process.shared.EngineHub` in front of each on ``<directory>/<stage>.sock`` in a
private directory (mode 0700). The session workers inherit the directory's name
(:data:`~bargein.engines.process.shared.SHARED_DIR_ENV`) and their engines connect there instead of
spawning workers of their own. The parent's supervisors restart a dead engine worker; the session
workers see :class:`~bargein.engines.process.wire.WorkerDied` for their requests in flight and reconnect.
Stages in process (``--llm-in-process``...), remote stages and the fakes are not shared.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator

from bargein.config import Settings
from bargein.engines.process.client import ProcessClient
from bargein.engines.process.shared import SHARED_DIR_ENV, EngineHub, socket_path

log = logging.getLogger(__name__)


def _load(settings: Settings) -> list[ProcessClient]:
    from bargein.engines.loaders import load_asr, load_llm

    engines: list[object] = []
    if settings.asr_process and "asr" not in settings.ray_stages:
        engines.append(load_asr(settings, worker_process=True)[0])
    if settings.llm_process and "llm" not in settings.ray_stages and not settings.llm_url:
        engines.append(load_llm(settings, worker_process=True)[0])
    if settings.tts_process and "tts" not in settings.ray_stages and settings.tts_engine == "kokoro":
        from bargein.engines.process.wire import WorkerSpec
        from bargein.engines.speak.tts_process import ProcessSynthesizer

        with contextlib.suppress(ImportError):  # Kokoro missing: each session worker falls back to flite
            import bargein.engines.speak.kokoro_tts  # noqa: F401

            engines.append(ProcessSynthesizer(WorkerSpec("bargein.engines.loaders:load_voice", {"settings": settings})))
    return [engine for engine in engines if isinstance(engine, ProcessClient)]


@contextlib.contextmanager
def shared_engines(settings: Settings) -> Iterator[list[str]]:
    """Load and share the worker-process stages while the block runs; yields the stages shared."""
    if settings.engines != "default" or not settings.shared_engines or os.environ.get(SHARED_DIR_ENV):
        yield []
        return
    directory = tempfile.mkdtemp(prefix="bargein-engines-")  # mkdtemp makes it 0700
    clients: list[ProcessClient] = []
    hubs: list[EngineHub] = []
    try:
        clients = _load(settings)
        for client in clients:
            label = client.process.launch.command[-1]
            hubs.append(EngineHub(client.process, socket_path(directory, label)))
        os.environ[SHARED_DIR_ENV] = directory
        yield [client.process.launch.command[-1] for client in clients]
    finally:
        os.environ.pop(SHARED_DIR_ENV, None)
        for hub in hubs:
            hub.close()
        for client in clients:
            client.close()
        shutil.rmtree(directory, ignore_errors=True)
