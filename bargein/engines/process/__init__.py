"""Engines in supervised worker processes: a crash in native inference code costs the requests it was serving.

:mod:`~bargein.engines.process.supervisor` runs one worker process (spawn, health, restart with backoff,
per-request failure when the worker dies, streaming replies over a pipe, bounded queues) and
:mod:`~bargein.engines.process.spawn` starts it (with a scrubbed environment);
:mod:`~bargein.engines.process.wire` names the messages, carried in
:mod:`~bargein.engines.process.frames`' tagged frames (values only, never code);
:mod:`~bargein.engines.process.shared` shares one worker between the session worker processes of
``bargein serve --workers N`` (a hub on a Unix socket; :mod:`~bargein.engines.process.hub_link` is the
session workers' way in, with the server's key); :mod:`~bargein.engines.process.child` is the worker's
side for engines that live in bargein's own environment. Each engine kind adapts its protocol to requests
and streamed items in its own module (``think/llm_process.py``, ``transcribe/asr_process.py``,
``speak/tts_process.py``); the Mandarin voice's worker (``speak/zhtts_worker.py``) speaks the same wire
protocol from its own virtualenv.
"""
