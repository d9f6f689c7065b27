"""An offer flood from one address is refused before its body is read: 429 with ``Retry-After``, no SDP parsed, no
peer connection built; another address is unaffected; the book of addresses stays bounded."""

from __future__ import annotations

import httpx
import pytest

from bargein.config import Settings
from bargein.server.app import create_app
from bargein.server.webrtc import routes
from bargein.server.webrtc.offer import Offer, parse_offer
from bargein.server.webrtc.offer_rate import OfferRate
from tests.server.webrtc.test_webrtc_call import engines
from tests.server.webrtc.test_webrtc_limits import offer_sdp

SDP = {"Content-Type": "application/sdp"}


class Counts:
    """How far the server got with each offer."""

    def __init__(self) -> None:
        self.parsed = 0
        self.peers = 0


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    """Count the offers parsed and the peer connections built (each refused at negotiation, so none lives on)."""
    seen = Counts()
    def counting_parse(content_type: str, body: bytes, max_sdp_bytes: int) -> Offer:
        seen.parsed += 1
        return parse_offer(content_type, body, max_sdp_bytes)

    class CountingMedia:
        def __init__(self, settings: Settings) -> None:
            seen.peers += 1

        async def answer(self, sdp: str) -> str:
            raise ValueError("not negotiated in this test")

        async def close(self) -> None:
            pass

    monkeypatch.setattr(routes, "parse_offer", counting_parse)
    monkeypatch.setattr(routes, "CallMedia", CountingMedia)
    return seen


async def _post(app: object, address: str, sdp: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        return await http.post(routes.CALLS_PATH, content=sdp, headers=SDP)


async def test_an_offer_burst_from_one_address_gets_429s_before_any_parsing_or_peer(counts: Counts) -> None:
    app = create_app(Settings(webrtc_offers_per_s=0.5, webrtc_offer_burst=3), engines())
    pc, sdp = await offer_sdp()
    await pc.close()
    statuses = [(await _post(app, "127.0.0.1", sdp)) for _ in range(12)]
    assert [response.status_code for response in statuses] == [400] * 3 + [429] * 9  # 400: CountingMedia refuses
    assert counts.parsed == 3 and counts.peers == 3, "a refused offer was neither parsed nor given a peer"
    refused = statuses[-1]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    other = await _post(app, "127.0.0.2", sdp)
    assert other.status_code == 400 and counts.peers == 4, "another address still reaches negotiation"


def test_the_bucket_refills_at_the_rate_and_a_refused_offer_costs_nothing() -> None:
    now = [0.0]
    rate = OfferRate(2.0, 2, clock=lambda: now[0])
    assert rate.admit("a") == 0.0 and rate.admit("a") == 0.0
    assert rate.admit("a") == pytest.approx(0.5)
    now[0] = 0.25
    assert rate.admit("a") == pytest.approx(0.25), "the refused offer before did not push the wait out"
    now[0] = 0.5
    assert rate.admit("a") == 0.0
    assert rate.admit("b") == 0.0


def test_the_book_of_addresses_stays_bounded_and_forgets_the_idle_first() -> None:
    now = [0.0]
    rate = OfferRate(1.0, 5, max_addresses=3, clock=lambda: now[0])
    for address in ("a", "b", "c"):
        rate.admit(address)
        now[0] += 1.0
    rate.admit("d")  # nobody has refilled (5 s): the longest idle, "a", is forgotten
    assert list(rate.buckets) == ["b", "c", "d"]
    now[0] += 10.0
    rate.admit("e")  # everyone has refilled: all forgotten but the newcomer
    assert list(rate.buckets) == ["e"]
    for index in range(100):
        rate.admit(f"flood-{index}")
    assert len(rate.buckets) <= 3
