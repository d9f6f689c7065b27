"""Who may read ``/healthz``'s details and ``/metrics``, and what they show of URLs and errors.

A load balancer needs only "ready or not" (200 or 503) and "draining", so that is all ``/healthz`` tells
anyone. Its details (the engines, their health, the load) and ``/metrics`` need one of the API keys or the
``--metrics-key`` as ``Authorization: Bearer``; with no keys configured (local-only mode) a loopback client on
a ``Host`` that names this machine reads everything, as it may open sessions. Even then an engine's URL is shown
without its user, password or query (an ``--llm-url`` may carry credentials), and an engine's error shows only
its kind (the exception's class, a timeout), never the text an upstream server sent.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from bargein.config import Settings
from bargein.engines.think.openai_llm import public_url
from bargein.server.auth import host_allowed, is_loopback, origin_allowed, peer_address

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
"""A URL runs to the next space: its password or query may hold any of , ; ( ) ' (RFC 3986's sub-delims)."""
_TRAILING = re.compile(r"[;,.)\]>'\"]+$")
_ERROR_KIND = re.compile(r"^(retry: )?((?:vad|asr|llm|tts|turn) )?(timed out|[A-Za-z_][\w.]*(?=: )|\w+ returned \w+)")
WITHHELD = "details in the server's log"
LOAD_FAILED = "the engines failed to load"


def operator_allowed(request: Request, settings: Settings) -> bool:
    """True for a request that may read the details: a key (API or metrics) by Bearer, or, with no keys
    configured, a loopback peer whose ``Host`` and ``Origin`` pass the WebSocket's checks."""
    keys = [*settings.api_keys, *([settings.metrics_key] if settings.metrics_key else [])]
    if not keys:
        return is_loopback(peer_address(request.scope)) and host_allowed(request.scope, settings) \
            and origin_allowed(request.scope, settings)
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("bearer "):
        return False
    offered = header[7:].strip().encode("utf-8", "replace")
    # every key is compared (a list, not a short-circuiting generator): the time taken does not tell which matched
    return any([hmac.compare_digest(offered, key.encode()) for key in keys])


def redact_urls(text: str) -> str:
    """``text`` with every URL's user, password, query and fragment left out."""
    return _URL.sub(_bare_token, text)


def _bare_token(match: re.Match[str]) -> str:
    """The URL bared, and the punctuation after it (``;`` ``,`` ``)`` ...) kept: it came after the URL, or ended
    its query, which goes anyway."""
    token = match.group(0)
    trailing = _TRAILING.search(token)
    if trailing is not None and "@" not in token[trailing.start():]:
        return public_url(token[:trailing.start()]) + trailing.group(0)
    return public_url(token)


def error_kind(text: str | None) -> str | None:
    """An engine error reduced to its kind (stage, exception class or timeout), never its message."""
    if text is None:
        return None
    match = _ERROR_KIND.match(text)
    if match is None:
        return WITHHELD
    retry, stage, kind = match.groups()
    return f"{retry or ''}{stage or ''}{kind} ({WITHHELD})"


def redacted_description(description: Mapping[str, str]) -> dict[str, str]:
    """Each stage's engine description with its URLs' secrets left out."""
    return {stage: redact_urls(what) for stage, what in description.items()}


def redacted_stages(stages: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each stage's health snapshot with its ``last_error`` reduced to :func:`error_kind`."""
    return {name: {**view, "last_error": error_kind(view.get("last_error"))} for name, view in stages.items()}
