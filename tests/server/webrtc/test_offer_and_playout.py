"""The pure parts of a WebRTC call: reading an offer's body, and what the caller heard of what was sent."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import av
import numpy as np
import pytest

from bargein.config import Settings
from bargein.server.webrtc.media import ice_configuration
from bargein.server.webrtc.offer import OfferError, body_limit, parse_offer, read_bounded
from bargein.server.webrtc.playout import DEFAULT_PLAYOUT_DELAY_MS, PlayoutDelay, heard_ms, still_playing
from bargein.server.webrtc.tracks import InputClock, OnWire

OFFER = ("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"
         "a=rtpmap:111 opus/48000/2\r\n")


def multipart(fields: dict[str, str], boundary: str = "XyZ") -> tuple[str, bytes]:
    parts = "".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                    for name, value in fields.items())
    return f"multipart/form-data; boundary={boundary}", f"{parts}--{boundary}--\r\n".encode()


def test_an_sdp_body_and_a_multipart_body_with_a_session_are_read() -> None:
    assert parse_offer("application/sdp", OFFER.encode(), 4096).sdp == OFFER
    content_type, body = multipart({"sdp": OFFER, "session": '{"instructions": "Be brief."}'})
    offer = parse_offer(content_type, body, 4096)
    assert offer.sdp == OFFER and offer.session == {"instructions": "Be brief."}


@pytest.mark.parametrize(("content_type", "body", "reason"), [
    ("application/sdp", b"", "v=0"),
    ("application/sdp", b"v=0\r\nthis is not sdp\r\n", "<type>=<value>"),
    ("application/sdp", b"v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n", "no audio m-line"),
    ("application/sdp", b"\xff\xfe", "UTF-8"),
    ("application/sdp", OFFER.encode() + b"a=x:" + b"y" * 5000 + b"\r\n", "over the limit"),
    ("application/json", OFFER.encode(), "Content-Type"),
    ("", OFFER.encode(), "Content-Type"),
    ("multipart/form-data; boundary=nothere", b"--other\r\n\r\n", "malformed multipart"),
    (*multipart({"session": "{}"}), "'sdp'"),
    (*multipart({"sdp": OFFER, "session": "not json"}), "not JSON"),
    (*multipart({"sdp": OFFER, "session": '"a string"'}), "JSON object"),
])
def test_a_bad_offer_is_refused_with_its_reason(content_type: str, body: bytes, reason: str) -> None:
    with pytest.raises(OfferError, match=re.escape(reason)):
        parse_offer(content_type, body, 4096)


async def test_the_body_is_read_only_up_to_its_bound() -> None:
    read: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for index in range(100):
            read.append(index)
            yield b"x" * 1024

    with pytest.raises(OfferError, match="over"):
        await read_bounded(chunks(), 10 * 1024)
    assert len(read) == 11, "reading stops at the first chunk past the bound"
    assert body_limit(4096) > 4096


def test_heard_is_what_was_sent_less_what_is_still_on_its_way() -> None:
    sent = OnWire("resp_1", "item_1", item_ms=2000.0, start_ms=0.0, sent_at=10.0)
    assert heard_ms(sent, 60.0, now=10.0) == pytest.approx(1940.0)
    assert heard_ms(sent, 60.0, now=10.03) == pytest.approx(1970.0), "part of the delay has passed since"
    assert heard_ms(sent, 60.0, now=11.0) == pytest.approx(2000.0), "long since sent: all of it played"
    resumed = OnWire("resp_1", "item_1", item_ms=1520.0, start_ms=1500.0, sent_at=10.0)
    assert heard_ms(resumed, 60.0, now=10.0) == 1500.0, "never before where a resumed stretch began"
    assert still_playing(sent, 60.0, now=10.05) and not still_playing(sent, 60.0, now=10.07)
    assert not still_playing(None, 60.0, now=10.0)


def test_the_playout_delay_follows_the_receiver_reports() -> None:
    delay = PlayoutDelay()
    assert delay.delay_ms == DEFAULT_PLAYOUT_DELAY_MS and not delay.reported
    delay.update(None, None)
    assert not delay.reported, "a report with nothing in it changes nothing"
    delay.update(0.040, 48 * 5)  # 40 ms round trip, 5 ms of jitter: 20 one way, the 40 ms floor, one frame
    assert delay.delay_ms == pytest.approx(80.0) and delay.reported
    delay.update(0.100, 48 * 30)  # 30 ms of jitter: the buffer grows to three times it
    assert delay.delay_ms == pytest.approx(50.0 + 90.0 + 20.0)
    delay.update(30.0, 0)
    assert delay.delay_ms == 1000.0, "a glitch is bounded"


def opus_frame(pts: int, value: int = 1000) -> av.AudioFrame:
    """A decoded frame as aiortc's Opus decoder gives it: 20 ms of packed stereo s16 at 48 kHz."""
    frame = av.AudioFrame.from_ndarray(np.full((1, 2 * 960), value, dtype=np.int16), format="s16", layout="stereo")
    frame.sample_rate = 48_000
    frame.pts = pts
    return frame


def test_lost_audio_is_filled_with_silence_and_late_audio_dropped_so_the_callers_clock_holds() -> None:
    clock = InputClock()
    first = clock.place(opus_frame(0))
    assert first is not None and len(first) == 960 and first[0] == pytest.approx(1000 / 32768)
    assert clock.place(opus_frame(960)) is not None
    after_loss = clock.place(opus_frame(2880))  # the frame at 1920 was lost
    assert after_loss is not None and len(after_loss) == 2 * 960
    assert not after_loss[:960].any() and after_loss[960:].all()
    assert clock.place(opus_frame(1920)) is None, "it came too late: its time was filled already"
    restarted = clock.place(opus_frame(2880 + 960 + 48_000 * 5))  # a sender that paused for 5 s
    assert restarted is not None and len(restarted) == 960
    assert clock.filled_samples == 960 and clock.dropped_frames == 1


def test_the_ice_servers_come_from_the_flags_and_the_credential_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.cli.test_cli_inputs import _served_settings

    monkeypatch.setenv("BARGEIN_ICE_CREDENTIAL", "s3cret")
    settings = _served_settings(["serve", "--engines", "fake", "--ice-server", "stun:stun.example.com:3478",
                                 "--ice-server", "turn:turn.example.com:3478", "--ice-username", "bargein"],
                                monkeypatch)
    servers = ice_configuration(settings).iceServers
    assert servers is not None
    (server,) = servers
    assert server.urls == ["stun:stun.example.com:3478", "turn:turn.example.com:3478"]
    assert (server.username, server.credential) == ("bargein", "s3cret")
    assert ice_configuration(Settings()).iceServers == [], "none: host candidates only"
