"""WebRTC calls held to the WebSocket's limits: bad offers get a 400 with a reason, keys as the WebSocket's, a call
whose ICE never completes is reaped and releases its place, a hangup ends the call, a sideband WebSocket sees the
call's events and may act on its session."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import websockets
from aiortc import RTCPeerConnection

from bargein.config import Settings
from bench.harness import phone_provider
from bench.harness.webrtc_peer import WebRtcPeer
from tests.server.webrtc.test_webrtc_call import engines

SDP = {"Content-Type": "application/sdp"}


async def offer_sdp() -> tuple[RTCPeerConnection, str]:
    """A real offer (audio and the events channel) from a peer that will never take the answer."""
    pc = RTCPeerConnection()
    pc.createDataChannel("oai-events")
    pc.addTransceiver("audio", direction="sendrecv")
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


async def test_bad_offers_get_a_400_with_the_reason() -> None:
    with phone_provider.phone_server(engines(), Settings(max_sdp_bytes=4096)) as (host, _):
        pc, sdp = await offer_sdp()
        await pc.close()
        url = f"http://{host}/v1/realtime/calls"
        async with httpx.AsyncClient(timeout=10) as client:
            cases = [
                (b"hello", SDP, "v=0"),
                (sdp.encode() + b"a=x-padding:" + b"x" * 5000 + b"\r\n", SDP, "over the limit"),
                (b"x" * 400_000, SDP, "over"),
                (sdp.replace("m=audio", "m=video").encode(), SDP, "no audio m-line"),
                (sdp.encode(), {"Content-Type": "text/plain"}, "Content-Type"),
                (b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n",
                 SDP, "could not be negotiated"),
            ]
            for body, headers, reason in cases:
                response = await client.post(url, content=body, headers=headers)
                assert response.status_code == 400, (reason, response.text)
                assert reason in response.json()["error"]["message"], response.text
            multipart = await client.post(url, files={"sdp": (None, sdp), "session": (None, "[1, 2]")})
            assert multipart.status_code == 400 and "JSON object" in multipart.json()["error"]["message"]
            missing = await client.post(url, files={"session": (None, "{}")})
            assert missing.status_code == 400 and "'sdp'" in missing.json()["error"]["message"]


async def test_with_keys_a_call_needs_the_server_key() -> None:
    with phone_provider.phone_server(engines(), Settings(api_keys=["sk-test"])) as (host, _):
        with pytest.raises(ConnectionError, match="401"):
            async with WebRtcPeer(f"http://{host}"):
                pass
        with pytest.raises(ConnectionError, match="401"):
            async with WebRtcPeer(f"http://{host}", "sk-wrong"):
                pass
        async with WebRtcPeer(f"http://{host}", "sk-test") as peer:
            await peer.next_event("session.created")


async def test_a_call_that_never_completes_ice_is_reaped_and_releases_its_place() -> None:
    settings = Settings(webrtc_connect_timeout_s=3.0, max_connections_per_client=1)
    with phone_provider.phone_server(engines(), settings) as (host, state):
        url = f"http://{host}/v1/realtime/calls"
        pc, sdp = await offer_sdp()  # answered, but this peer never takes the answer: ICE never completes
        async with httpx.AsyncClient(timeout=10) as client:
            first = await client.post(url, content=sdp, headers=SDP)
            assert first.status_code == 201
            second = await client.post(url, content=sdp, headers=SDP)
            assert second.status_code == 429, "the unconnected call holds the address's one place"
            deadline = time.monotonic() + 10
            while state.calls.calls and time.monotonic() < deadline:  # noqa: ASYNC110 (polls the server's state)
                await asyncio.sleep(0.1)
            assert not state.calls.calls, "the call was reaped"
            assert not state.registry.live
        await pc.close()
        async with WebRtcPeer(f"http://{host}") as peer:  # the place is free again
            await peer.next_event("session.created")


async def test_hangup_ends_the_call_and_only_its_caller_or_the_server_key_may() -> None:
    with phone_provider.phone_server(engines(), Settings(api_keys=["sk-test"])) as (host, state):
        async with WebRtcPeer(f"http://{host}", "sk-test") as peer:
            await peer.next_event("session.created")
            assert len(state.registry.live) == 1
            async with httpx.AsyncClient(timeout=10) as client:
                stranger = await client.post(f"http://{host}/v1/realtime/calls/{peer.call_id}/hangup",
                                             headers={"Authorization": "Bearer sk-other"})
                assert stranger.status_code == 404
            assert (await peer.hangup()).status_code == 200
            deadline = time.monotonic() + 10
            while (state.registry.live or state.calls.calls) and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            assert not state.registry.live and not state.calls.calls
            assert (await peer.hangup()).status_code == 404


async def test_a_sideband_websocket_sees_the_calls_events_and_may_update_its_session() -> None:
    with phone_provider.phone_server(engines(), Settings(api_keys=["sk-test"])) as (host, _):
        async with WebRtcPeer(f"http://{host}", "sk-test") as peer:
            await peer.next_event("session.created")
            uri = f"ws://{host}/v1/realtime?call_id={peer.call_id}"
            with pytest.raises(websockets.InvalidStatus):
                async with websockets.connect(uri):
                    pass
            async with websockets.connect(uri, additional_headers={"Authorization": "Bearer sk-test"}) as side:
                await side.send(json.dumps({"type": "session.update", "session": {"instructions": "From the side."}}))
                seen = json.loads(await asyncio.wait_for(side.recv(), 10))
                assert seen["type"] == "session.updated"
                assert seen["session"]["instructions"] == "From the side."
                _, on_channel = await peer.next_event("session.updated")
                assert on_channel["session"]["instructions"] == "From the side."


async def test_a_data_channel_flood_is_held_to_the_event_rate_and_ended_without_starving_another_call() -> None:
    settings = Settings(events_per_s=50, event_burst=50, rate_limit_sustain_s=2.0)
    with phone_provider.phone_server(engines(), settings) as (host, state):
        async with WebRtcPeer(f"http://{host}") as flooder, WebRtcPeer(f"http://{host}") as honest:
            await flooder.next_event("session.created")
            await honest.next_event("session.created")
            flood = json.dumps({"type": "conversation.item.retrieve", "item_id": "item_missing"})
            for _ in range(3000):
                flooder.channel.send(flood)
            round_trips = []
            for index in range(5):
                await asyncio.sleep(0.2)
                asked = time.monotonic()
                honest.send({"type": "session.update", "session": {"instructions": f"Reply {index}."}})
                found, _ = await honest.next_event("session.updated", after=len(honest.events))
                round_trips.append(honest.arrival(found) - asked)
            assert max(round_trips) < 1.5, round_trips  # a starved call would wait the flood's minute
            deadline = time.monotonic() + 15
            while len(state.registry.live) > 1 and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            assert len(state.registry.live) == 1, "the flooder's call was ended, the honest one goes on"
            await asyncio.sleep(1.0)
            errors = [event["error"] for _, event in flooder.events if event["type"] == "error"]
            assert errors and errors[-1]["code"] == "rate_limit_exceeded" and "for 2 s" in errors[-1]["message"]


async def test_the_drain_tells_a_call_why_and_ends_it() -> None:
    with phone_provider.phone_server(engines()) as (host, state):
        async with WebRtcPeer(f"http://{host}") as peer:
            await peer.next_event("session.created")
            assert state.drain.loop is not None
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(state.drain.run(), state.drain.loop))
            _, error = await peer.next_event("error")
            assert error["error"]["code"] == "server_shutting_down"
            deadline = time.monotonic() + 10
            while state.calls.calls and time.monotonic() < deadline:  # noqa: ASYNC110 (polls the server's state)
                await asyncio.sleep(0.05)
            assert not state.calls.calls and not state.registry.live
            async with httpx.AsyncClient(timeout=10) as client:
                refused = await client.post(f"http://{host}/v1/realtime/calls", content=peer.answer_sdp, headers=SDP)
            assert refused.status_code == 503, refused.text


async def test_a_client_secret_opens_one_call_with_its_bound_session_and_may_hang_it_up() -> None:
    with phone_provider.phone_server(engines(), Settings(api_keys=["sk-test"])) as (host, _):
        async with httpx.AsyncClient(timeout=10) as client:
            minted = await client.post(f"http://{host}/v1/realtime/client_secrets",
                                       headers={"Authorization": "Bearer sk-test"},
                                       json={"session": {"type": "realtime", "instructions": "Bound."}})
        secret = minted.json()["value"]
        async with WebRtcPeer(f"http://{host}", secret) as peer:
            _, created = await peer.next_event("session.created")
            assert created["session"]["instructions"] == "Bound."
            with pytest.raises(ConnectionError, match="401"):
                async with WebRtcPeer(f"http://{host}", secret):
                    pass
            assert (await peer.hangup()).status_code == 200, "the secret that opened the call hangs it up"


async def test_a_call_is_ended_at_the_longest_session_length() -> None:
    with phone_provider.phone_server(engines(), Settings(max_session_s=1.5)) as (host, state):
        async with WebRtcPeer(f"http://{host}") as peer:
            await peer.next_event("session.created")
            _, error = await peer.next_event("error", timeout=10)
            assert error["error"]["code"] == "session_expired"
            deadline = time.monotonic() + 10
            while state.calls.calls and time.monotonic() < deadline:  # noqa: ASYNC110 (polls the server's state)
                await asyncio.sleep(0.05)
            assert not state.calls.calls and not state.registry.live


async def test_an_offer_sent_a_trickle_at_a_time_is_given_up_after_the_handshake_time() -> None:
    with phone_provider.phone_server(engines(), Settings(handshake_timeout_s=1.0)) as (host, state):
        hostname, port = host.split(":")
        reader, writer = await asyncio.open_connection(hostname, int(port))
        writer.write(f"POST /v1/realtime/calls HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/sdp\r\n"
                     "Content-Length: 4000\r\n\r\nv=0\r\n".encode())
        await writer.drain()
        started = time.monotonic()
        status = await asyncio.wait_for(reader.readline(), 10)
        assert time.monotonic() - started < 5
        assert status.split()[1] == b"408", status
        writer.close()
        assert not state.calls.calls


async def test_an_event_too_large_for_the_data_channel_is_refused_by_name_and_the_call_goes_on() -> None:
    with phone_provider.phone_server(engines(), Settings(api_keys=["sk-test"])) as (host, _):
        async with WebRtcPeer(f"http://{host}", "sk-test") as peer:
            await peer.next_event("session.created")
            uri = f"ws://{host}/v1/realtime?call_id={peer.call_id}"
            async with websockets.connect(uri, additional_headers={"Authorization": "Bearer sk-test"},
                                          max_size=None) as side:
                await side.send(json.dumps({"type": "session.update", "session": {"instructions": "é" * 100_000}}))
                seen = json.loads(await asyncio.wait_for(side.recv(), 10))
                assert seen["type"] == "session.updated", seen
                _, error = await peer.next_event("error")
                assert error["error"]["code"] == "event_too_large" and "session.updated" in error["error"]["message"]
                await side.send(json.dumps({"type": "session.update", "session": {"instructions": "Short."}}))
                _, updated = await peer.next_event("session.updated")
                assert updated["session"]["instructions"] == "Short."


async def test_a_page_on_an_allowed_origin_may_post_its_offer_across_origins_and_read_the_call_id() -> None:
    settings = Settings(api_keys=["sk-test"], allow_origins=["https://app.example.com"])
    with phone_provider.phone_server(engines(), settings) as (host, _):
        url = f"http://{host}/v1/realtime/calls"
        asking = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
                  "Access-Control-Request-Headers": "authorization, content-type, x-openai-agents-sdk"}
        async with httpx.AsyncClient(timeout=10) as client:
            allowed = await client.options(url, headers=asking)
            assert allowed.status_code == 204
            assert allowed.headers["access-control-allow-origin"] == "https://app.example.com"
            assert "x-openai-agents-sdk" in allowed.headers["access-control-allow-headers"]
            stranger = await client.options(url, headers={**asking, "Origin": "https://evil.example.com"})
            assert stranger.status_code == 403 and "access-control-allow-origin" not in stranger.headers
            pc, sdp = await offer_sdp()
            answered = await client.post(url, content=sdp, headers={**SDP, "Authorization": "Bearer sk-test",
                                                                    "Origin": "https://app.example.com"})
            await pc.close()
            assert answered.status_code == 201
            assert answered.headers["access-control-expose-headers"] == "Location"
            assert answered.headers["access-control-allow-origin"] == "https://app.example.com"
            refused = await client.post(url, content=sdp, headers={**SDP, "Authorization": "Bearer sk-test",
                                                                   "Origin": "https://evil.example.com"})
            assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
