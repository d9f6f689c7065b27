"""Signed, expiring phone-line tokens: the API key's stand-in where a provider cannot send a header.

A telephony provider opens the media-stream WebSocket itself, and not every setup lets it send
``Authorization: Bearer``; Twilio's ``<Stream url>`` takes no query string either. So the URL path (or a
``token`` query parameter, where the provider allows one) may carry ``v1.<expiry>.<signature>``: the expiry in
Unix seconds and an HMAC-SHA256 of it under one of the server's API keys. It grants one thing, a phone session on
``/v1/telephony/*``, until it expires; it never reveals the key. Mint one with
``echo "$KEY" | python -m bargein.server.phone_tokens --ttl-s 86400`` (the key is read from stdin, never argv).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import logging
import re
import sys
import time
from collections.abc import Sequence

PREFIX = "v1"
DOMAIN = b"bargein-phone-token-v1:"
"""Signed before the expiry, so a signature made for anything else under the same key never passes."""
MAX_TOKEN_CHARS = 128
_TOKEN = re.compile(r"v1\.\d{1,12}\.[A-Za-z0-9_-]{20,}")
_QUERY_TOKEN = re.compile(r"([?&]token=)[^&\s\"']*")
_PATH_TOKEN = re.compile(r"(/v1/telephony/[a-z]+/)[^\s\"?/]+")
LOGGERS = ("uvicorn.error", "uvicorn.access")
"""Where uvicorn names a WebSocket's path (with its query) as it accepts or refuses it."""


def mint_token(key: str, ttl_s: float, *, now: float | None = None) -> str:
    """A token valid for ``ttl_s`` seconds from now, signed with ``key``."""
    expiry = int((time.time() if now is None else now) + ttl_s)
    return f"{PREFIX}.{expiry}.{_signature(key, expiry)}"


def token_valid(token: str, keys: Sequence[str], *, now: float | None = None) -> bool:
    """The token is well formed, not expired, and signed by one of ``keys`` (every key is compared, so the time
    taken does not tell which matched)."""
    if len(token) > MAX_TOKEN_CHARS:
        return False
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1].isdigit() or len(parts[1]) > 12:
        return False
    expiry = int(parts[1])
    if expiry <= (time.time() if now is None else now):
        return False
    offered = parts[2].encode()
    return any([hmac.compare_digest(offered, _signature(key, expiry).encode()) for key in keys])


def _signature(key: str, expiry: int) -> str:
    digest = hmac.new(key.encode(), DOMAIN + str(expiry).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def redact(text: str) -> str:
    """``text`` (a log line naming a request path) with any phone token, or ``token=`` query value, hidden."""
    text = _PATH_TOKEN.sub(r"\1<token>", _TOKEN.sub("<token>", text))
    return _QUERY_TOKEN.sub(r"\1<token>", text)


class RedactTokens(logging.Filter):
    """Hides phone tokens in the records of the logger it is added to (uvicorn logs every WebSocket path)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message with its tokens hidden; never drops a record."""
        message = record.getMessage()
        hidden = redact(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


def install_log_redaction() -> None:
    """Add :class:`RedactTokens` to uvicorn's loggers, once."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactTokens) for existing in logger.filters):
            logger.addFilter(RedactTokens())


def main(argv: Sequence[str] | None = None) -> int:
    """Print a token for the key on stdin."""
    parser = argparse.ArgumentParser(description="mint a phone-line token (the API key is read from stdin)")
    parser.add_argument("--ttl-s", type=float, default=86_400.0, help="seconds until it expires (default a day)")
    args = parser.parse_args(argv)
    key = sys.stdin.readline().strip()
    if not key:
        print("no API key on stdin", file=sys.stderr)
        return 2
    print(mint_token(key, args.ttl_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
