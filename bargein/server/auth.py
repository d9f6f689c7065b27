"""Who may open a session: API keys from configuration, or loopback clients in local-only mode."""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass

from starlette.websockets import WebSocket

KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."


@dataclass(frozen=True)
class AuthResult:
    """The decision and the subprotocol to echo back to the browser."""

    allowed: bool
    reason: str = ""
    subprotocol: str | None = None


def offered_key(websocket: WebSocket) -> str | None:
    """The key from ``Authorization: Bearer`` or the browser subprotocol, if any."""
    header = websocket.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    for protocol in websocket.scope.get("subprotocols", []):
        if protocol.startswith(KEY_SUBPROTOCOL_PREFIX):
            return str(protocol[len(KEY_SUBPROTOCOL_PREFIX):])
    return None


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and in-process test clients."""
    if host in (None, "testclient", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def authorize(websocket: WebSocket, api_keys: list[str]) -> AuthResult:
    """Check the client's key (or, with no keys configured, that it is on this machine)."""
    subprotocol = "realtime" if "realtime" in websocket.scope.get("subprotocols", []) else None
    if not api_keys:
        client_host = websocket.client.host if websocket.client else None
        if is_loopback(client_host):
            return AuthResult(True, subprotocol=subprotocol)
        return AuthResult(False, "local-only mode: no API key is configured, so only loopback clients may connect")
    key = offered_key(websocket)
    if key is None:
        return AuthResult(False, "missing API key (Authorization: Bearer or openai-insecure-api-key subprotocol)")
    if any(hmac.compare_digest(key.encode(), allowed.encode()) for allowed in api_keys):
        return AuthResult(True, subprotocol=subprotocol)
    return AuthResult(False, "invalid API key")
