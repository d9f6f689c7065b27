"""The WebRTC attacks of ``bench/robustness/abuse.py``: offers as fast as one address can send them, calls whose ICE
never completes, and a data channel that floods the session with events.

Like the WebSocket attacks, each comes from 127.0.0.2 while the honest session of the benchmark keeps measuring
its round trips from 127.0.0.1. An answered call holds its address's place (``--max-connections-per-client``)
from the answer on, connected or not, until it ends or is reaped (``--webrtc-connect-timeout``): the attacks
check that the cap bites and that the places come back.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx

from bench.robustness.attack_target import ATTACKER, Attack, Outcome, Target

CALLS_PATH = "/v1/realtime/calls"


async def real_offer() -> str:
    """An offer as a WebRTC client makes it (aiortc: a sendrecv audio transceiver and the ``oai-events`` data
    channel), its candidates gathered; the peer that made it is closed, so nothing will ever answer checks."""
    from aiortc import RTCPeerConnection

    peer = RTCPeerConnection()
    try:
        peer.addTransceiver("audio", direction="sendrecv")
        peer.createDataChannel("oai-events")
        await peer.setLocalDescription(await peer.createOffer())
        return str(peer.localDescription.sdp)
    finally:
        await peer.close()


def attacker_client() -> httpx.AsyncClient:
    """An HTTP client whose connections leave from the attacker's address."""
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=ATTACKER), timeout=15.0)


async def post_offer(client: httpx.AsyncClient, target: Target, sdp: str) -> httpx.Response:
    """``POST /v1/realtime/calls`` with ``sdp``."""
    return await client.post(f"http://{target.host_port}{CALLS_PATH}?model=abuse", content=sdp,
                             headers={"Content-Type": "application/sdp"})


async def probe_and_hang_up(client: httpx.AsyncClient, target: Target, sdp: str) -> int:
    """One more offer's status; a call it opened is hung up at once, so it holds no place for the next attack."""
    answer = await post_offer(client, target, sdp)
    if answer.status_code == 201 and (location := answer.headers.get("location")):
        await client.post(f"http://{target.host_port}{location}/hangup")
    return answer.status_code


async def _sessions(target: Target) -> int:
    async with httpx.AsyncClient() as client:
        return int((await client.get(f"http://{target.host_port}/healthz", timeout=5)).json()["sessions"])


async def offer_flood(target: Target) -> Outcome:
    """Offers from one address, eight at a time, for the flood's duration: the address's cap refuses all but
    its places (429, or its connection closed at once when over the address's young connections), and every
    answered call that never connects is reaped."""
    sdp = await real_offer()
    statuses: Counter[str] = Counter()
    end = time.monotonic() + target.duration_s

    async def sender(client: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            try:
                statuses[str((await post_offer(client, target, sdp)).status_code)] += 1
            except httpx.TransportError:  # the server's cap on one address's young connections closed it
                statuses["closed"] += 1

    async with attacker_client() as client:
        await asyncio.gather(*(sender(client) for _ in range(8)))
        answered_at_most = statuses["201"]
        await asyncio.sleep(target.webrtc_connect_timeout_s + 2.0)
        after = await probe_and_hang_up(client, target, sdp)
    sessions = await _sessions(target)
    unexpected = set(statuses) - {"201", "429", "503", "closed"}
    held = not unexpected and after == 201 and sessions <= 1 and \
        answered_at_most <= target.per_client * (1 + target.duration_s / target.webrtc_connect_timeout_s)
    summary = ", ".join(f"{count}x {status}" for status, count in statuses.most_common())
    return Outcome(held, f"{summary}; after the reaping: a new offer {after}, sessions {sessions}")


async def never_connecting(target: Target) -> Outcome:
    """As many answered calls as the address may hold, none of which ever completes ICE: one more is refused
    while they wait, and once they are reaped their places are free again."""
    sdp = await real_offer()
    await asyncio.sleep(target.offer_refill_s)
    async with attacker_client() as client:
        began = time.monotonic()
        answers = await asyncio.gather(*(post_offer(client, target, sdp) for _ in range(target.per_client)))
        held_places = sum(answer.status_code == 201 for answer in answers)
        one_more = await probe_and_hang_up(client, target, sdp)
        await asyncio.sleep(max(0.0, target.duration_s - (time.monotonic() - began)))
        await asyncio.sleep(max(0.0, began + target.webrtc_connect_timeout_s + 2.0 - time.monotonic()))
        after = await probe_and_hang_up(client, target, sdp)
    held = held_places == target.per_client and one_more == 429 and after == 201
    return Outcome(held, f"{held_places} answered and left unconnected; one more: {one_more}; after "
                         f"{target.webrtc_connect_timeout_s:g} s (reaped): {after}")


async def data_channel_flood(target: Target) -> Outcome:
    """A connected call whose data channel sends valid no-op events as fast as SCTP takes them while reading:
    served at most at the event rate after its burst, and ended once held back for the tolerance.

    The answers are counted against what the server's bucket allows over the time it served them, bounded by
    causality rather than a wall-clock window (which a loaded machine stretches or shortens at either end): no
    event was admitted before the first was sent and none served after the last answer arrived, so a server that
    holds the rate answers at most ``burst + rate * (last answer - first send)``, however slowly either side ran."""
    from bench.harness.webrtc_peer import WebRtcPeer

    flood = '{"type":"session.update","session":{}}'
    began = time.monotonic()
    first_sent: float | None = None
    sent = 0
    async with WebRtcPeer(f"http://{target.host_port}", model="abuse") as peer:
        while time.monotonic() - began < target.duration_s and peer.channel.readyState == "open":
            if peer.channel.bufferedAmount < 256 * 1024:  # keep SCTP busy without piling up memory here
                first_sent = time.monotonic() if first_sent is None else first_sent
                for _ in range(50):
                    peer.channel.send(flood)
                sent += 50
            await asyncio.sleep(0.001)
        await asyncio.sleep(1.0)
        answered = [at for at, event in peer.events if event.get("type") == "session.updated"]
        codes = {str(event["error"].get("code")) for _at, event in peer.events if event.get("type") == "error"}
        ended = peer.channel.readyState != "open" or peer.pc.connectionState in ("closed", "failed")
    served_s = answered[-1] - first_sent if answered and first_sent is not None else 0.0
    allowed = target.event_burst + target.events_per_s * served_s
    return Outcome(len(answered) <= allowed + 1,  # one for the rounding of the bucket's float arithmetic
                   f"{sent} sent, {len(answered)} served in {served_s:.1f} s (at most {allowed:.0f} allowed: "
                   f"{target.event_burst} at once, then {target.events_per_s:g}/s); errors {sorted(codes)}; "
                   f"call ended by the server: {ended}")

WEBRTC_ATTACKS: dict[str, Attack] = {
    "WebRTC offer flood": offer_flood,
    "WebRTC ICE never completes": never_connecting,
    "WebRTC data channel flood": data_channel_flood,
}
