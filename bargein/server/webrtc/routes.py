"""``POST /v1/realtime/calls`` (answer an SDP offer: a new call) and ``POST /v1/realtime/calls/{call_id}/hangup``.

Authorised exactly as the WebSocket is (a server key or an ``ek_`` client secret as ``Authorization: Bearer``; in
local-only mode, loopback clients only), admitted against the same limits (the server's sessions, per client
address, load and drain), with the WebSocket's query parameters (``model``, ``bargein_events=1``). The answer is
``201`` with the SDP answer and ``Location: /v1/realtime/calls/{call_id}``; a refusal is a JSON error with its
reason: 400 for the offer itself, 401/403 for who is asking, 429 over the address's calls or its offer rate
(checked first, before the body is read), 503 for a server that is loading, draining or full.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from bargein.server.auth import authorize, client_address, offered_key, peer_address
from bargein.server.client_secrets import BUSY_SECRETS, INVALID_SECRET, SecretOffer, check_offered_secret
from bargein.server.secrets_api import server_key_allowed
from bargein.server.session_host import TRY_LATER_CLOSE, Ending, SessionPlace, admit, session_config, spend
from bargein.server.session_locks import SessionLocks
from bargein.server.state import ServerState
from bargein.server.webrtc.calls import Call, CallRequest, CallServices, run_call
from bargein.server.webrtc.cors import preflight, with_cors
from bargein.server.webrtc.media import CallMedia
from bargein.server.webrtc.offer import Offer, OfferError, body_limit, parse_offer, read_bounded
from bargein.server.webrtc.offer_rate import OfferRate, retry_after

log = logging.getLogger(__name__)
CALLS_PATH = "/v1/realtime/calls"


def error_response(status: int, message: str, code: str, *, type_: str = "invalid_request_error") -> JSONResponse:
    """An OpenAI-shaped error body."""
    return JSONResponse({"error": {"message": message, "type": type_, "param": None, "code": code}},
                        status_code=status)


def _refused(reason: str) -> JSONResponse:
    """Who is asking may not open a call: 401 for a missing or wrong key, 403 for anything else (origin, host)."""
    if reason == BUSY_SECRETS:
        return error_response(503, reason, "server_unavailable", type_="server_error")
    if "API key" in reason or reason == INVALID_SECRET:
        return error_response(401, reason, "invalid_api_key")
    return error_response(403, reason, "forbidden")


def _ended(ending: Ending) -> JSONResponse:
    status = 503 if ending.close_code == TRY_LATER_CLOSE else 429 if ending.code == "too_many_sessions" else 401
    return error_response(status, ending.message, ending.code, type_="server_error" if status == 503 else
                          "invalid_request_error")


def add_webrtc_routes(app: FastAPI, state: ServerState) -> None:
    """Add the WebRTC call endpoints to ``app``."""
    offers = OfferRate(state.settings.webrtc_offers_per_s, state.settings.webrtc_offer_burst)

    @app.post(CALLS_PATH)
    async def create_call(request: Request) -> Response:
        return with_cors(await answer_call(request, state, offers), request, state.settings)

    @app.post(CALLS_PATH + "/{call_id}/hangup")
    async def hangup(call_id: str, request: Request) -> Response:
        return with_cors(_hang_up(call_id, request, state), request, state.settings)

    @app.options(CALLS_PATH)
    @app.options(CALLS_PATH + "/{call_id}/hangup")
    async def calls_preflight(request: Request) -> Response:
        return preflight(request, state.settings)


def _hang_up(call_id: str, request: Request, state: ServerState) -> Response:
    """End the call for its caller or the server key; the same 404 for a call that is not there and one that is
    not the caller's, so call ids cannot be probed."""
    call = state.calls.get(call_id)
    allowed = server_key_allowed(request, state.settings)
    if call is None or not (allowed or call.opened_by(offered_key(request))):
        return error_response(404, f"no call {call_id[:64]!r} of yours is live", "call_not_found")
    call.hang_up()
    return Response(status_code=200)


def _too_often(request: Request, offers: OfferRate) -> Response | None:
    """A 429 for an address over its offer rate, decided from the socket alone (no body read, no key looked up)."""
    wait_s = offers.admit(client_address(request.scope) or "unknown")
    if wait_s <= 0.0:
        return None
    response = error_response(429, f"too many call offers from this address; retry in {wait_s:.1f} s",
                              "rate_limit_exceeded")
    response.headers["Retry-After"] = retry_after(wait_s)
    return response


async def answer_call(request: Request, state: ServerState, offers: OfferRate) -> Response:
    """Authorise, read and check the offer, admit the call and answer it (or say why not)."""
    if (refused := _too_often(request, offers)) is not None:
        return refused
    settings = state.settings
    offer_secret = await check_offered_secret(request, state.client_secrets, settings)
    decision = authorize(request, settings) if offer_secret is None else offer_secret.decision
    if not decision.allowed:
        log.warning("refused a WebRTC call from %s: %s", peer_address(request.scope), decision.reason)
        return _refused(decision.reason)
    try:
        async with asyncio.timeout(settings.handshake_timeout_s):  # a body sent a byte at a time holds nothing long
            body = await read_bounded(request.stream(), body_limit(settings.max_sdp_bytes))
        offer = parse_offer(request.headers.get("content-type", ""), body, settings.max_sdp_bytes)
    except OfferError as error:
        return error_response(400, str(error), "invalid_offer")
    except TimeoutError:
        return error_response(408, f"the offer did not arrive within {settings.handshake_timeout_s:g} s",
                              "request_timeout")
    if state.engines is None:
        return error_response(503, "the server is still loading its models", "server_unavailable",
                              type_="server_error")
    if state.drain.draining:
        return error_response(503, "the server is shutting down; connect to another instance", "server_unavailable",
                              type_="server_error")
    if len(state.registry.live) + state.calls.connecting >= state.registry.max_sessions:
        return error_response(503, "too many sessions; retry on another worker", "server_unavailable",
                              type_="server_error")
    address = client_address(request.scope) or "unknown"
    if (ending := await admit(state.registry, state.metrics, state.refusal, address)) is not None:
        return _ended(ending)
    try:
        return await _open_call(request, state, offer, offer_secret,
                                SessionPlace(address, offer_secret.locks if offer_secret is not None
                                             else SessionLocks(), decision.memory_scope))
    except BaseException:
        await state.registry.addresses.release(address)
        raise


async def _open_call(request: Request, state: ServerState, offer: Offer, secret: SecretOffer | None,
                     place: SessionPlace) -> Response:
    """Answer the admitted offer and start the call's life; the place is released here on any refusal."""
    settings = state.settings
    assert state.engines is not None
    media = CallMedia(settings)
    try:
        async with asyncio.timeout(settings.handshake_timeout_s):
            answer = await media.answer(offer.sdp)
    except TimeoutError:
        await _give_up(media, state, place)
        return error_response(503, "gathering ICE candidates took too long", "server_unavailable",
                              type_="server_error")
    except Exception as error:  # aiortc refuses what it cannot negotiate (no Opus, no DTLS fingerprint, ...)
        await _give_up(media, state, place)
        return error_response(400, f"the offer could not be negotiated: {str(error)[:200] or type(error).__name__}",
                              "invalid_offer")
    if secret is not None and secret.secret is not None and \
            (ending := await spend(state.client_secrets, secret.secret)) is not None:
        await _give_up(media, state, place)
        return _ended(ending)
    call = state.calls.open(media, offered_key(request) if not settings.local_only else None)
    own_events = request.query_params.get("bargein_events", "").lower() in ("1", "true", "yes")
    config = session_config(settings, request.query_params.get("model"),
                            secret.config if secret is not None else None)
    services = CallServices(settings, state.engines, state.registry, state.metrics, state.memory, state.calls)
    call.task = asyncio.create_task(run_call(call, CallRequest(config, offer.session, own_events, place), services),
                                    name=f"webrtc-call-{call.call_id}")
    log.info("answered WebRTC call %s from %s", call.call_id, place.address)
    return Response(answer, status_code=201, media_type="application/sdp",
                    headers={"Location": f"{CALLS_PATH}/{call.call_id}"})


async def _give_up(media: CallMedia, state: ServerState, place: SessionPlace) -> None:
    await media.close()
    await state.registry.addresses.release(place.address)


__all__ = ["Call", "add_webrtc_routes", "answer_call"]
