"""The phone line's pieces on their own: the provider's messages, 20 ms framing, the mark ledger, signed tokens."""

from __future__ import annotations

import json
import logging

import pytest

from bargein.protocol import twilio_media as tw
from bargein.server.phone_marks import MarkLedger
from bargein.server.phone_tokens import RedactTokens, mint_token, redact, token_valid


def test_the_provider_messages_are_read_and_anything_unreadable_is_refused() -> None:
    start = tw.parse_message(json.dumps({"event": "start", "streamSid": "MZ1", "start": {
        "streamSid": "MZ1", "callSid": "CA1", "customParameters": {"who": "alice"},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
    assert isinstance(start, tw.Start) and tw.supported_format(start) and start.parameters == {"who": "alice"}
    assert tw.parse_message('{"event":"media","media":{"payload":"/w=="}}') == tw.Media("/w==", "inbound")
    assert tw.parse_message('{"event":"mark","mark":{"name":"a@20"}}') == tw.Mark("a@20")
    assert tw.parse_message('{"event":"stop"}') == tw.Stop()
    assert isinstance(tw.parse_message('{"event":"surprise"}'), tw.Ignored)
    wide = tw.parse_message(json.dumps({"event": "start", "start": {"streamSid": "MZ1",
                                                                    "mediaFormat": {"sampleRate": 16000}}}))
    assert isinstance(wide, tw.Start) and not tw.supported_format(wide)
    for bad in ("{", "[]", '{"event": 5}', '{"event":"media","media":"x"}', '{"event":"media","media":{}}',
                json.dumps({"event": "mark", "mark": {"name": "x" * 500}}),
                json.dumps({"event": "start", "start": {"streamSid": "M" * 100}}),
                json.dumps({"event": "start", "start": {"streamSid": "MZ1", "customParameters": [1]}})):
        with pytest.raises(tw.MediaStreamError):
            tw.parse_message(bad)


def test_audio_is_cut_into_whole_20_ms_frames_and_the_tail_padded_with_silence() -> None:
    splitter = tw.FrameSplitter()
    assert [len(f) for f in splitter.frames("a", bytes(300))] == [160]
    assert [len(f) for f in splitter.frames("a", bytes(100))] == [160]  # 140 left + 100 = 240: one frame
    tail = splitter.flush("a")
    assert len(tail) == 160 and tail.endswith(b"\xff" * 80)
    splitter.frames("a", bytes(100))
    assert splitter.frames("b", bytes(160)) == [bytes(160)], "a new item drops the last one's remainder"
    assert splitter.flush("b") == b""
    assert json.loads(tw.clear_message("MZ1")) == {"event": "clear", "streamSid": "MZ1"}
    assert json.loads(tw.mark_message("MZ1", "a@20")) == {"event": "mark", "streamSid": "MZ1", "mark": {"name": "a@20"}}


def test_the_newest_echo_is_what_was_heard_and_a_clear_forgets_the_marks_it_dropped() -> None:
    ledger = MarkLedger()
    names = [ledger.sent("item_a", ms) for ms in (20.0, 40.0, 60.0, 80.0)]
    assert ledger.echoed("forged@999") is None
    heard = ledger.echoed(names[1])
    assert heard is not None and heard.audio_end_ms == 40.0 and ledger.outstanding == 2
    cut = ledger.clear()
    assert cut is not None and (cut.item_id, cut.audio_end_ms) == ("item_a", 40.0)
    assert ledger.echoed(names[2]) is None and ledger.echoed(names[3]) is None, "dropped by the clear: never heard"
    assert ledger.heard is not None and ledger.heard.audio_end_ms == 40.0
    ledger.sent("item_b", 20.0)
    cut = ledger.clear()
    assert cut is not None and (cut.item_id, cut.audio_end_ms) == ("item_b", 0.0), "nothing of it echoed"
    assert ledger.clear() is None


def test_the_ledger_stays_bounded_when_the_provider_never_echoes() -> None:
    ledger = MarkLedger(max_outstanding=8)
    for index in range(100):
        ledger.sent("item_a", 20.0 * index)
    assert ledger.outstanding == 8


def test_a_token_is_valid_until_it_expires_only_under_its_key_and_never_logged() -> None:
    token = mint_token("sk-one", 60, now=1000.0)
    assert token_valid(token, ["sk-two", "sk-one"], now=1059.0)
    assert not token_valid(token, ["sk-one"], now=1061.0)
    assert not token_valid(token, ["sk-two"], now=1001.0)
    forged = token.rsplit(".", 1)[0].replace("1060", "9999") + "." + token.rsplit(".", 1)[1]
    assert not token_valid(forged, ["sk-one"], now=1001.0), "the expiry is signed"
    for bad in ("", "v1", "v1.x.y", "v2.1060.abc", "v1.1060." + "a" * 200):
        assert not token_valid(bad, ["sk-one"], now=1001.0)
    line = f'127.0.0.1:5 - "WebSocket /v1/telephony/twilio/{token}" 403'
    assert token not in redact(line) and "/v1/telephony/twilio/<token>" in redact(line)
    assert redact("/v1/telephony/twilio?token=secret&x=1") == "/v1/telephony/twilio?token=<token>&x=1"
    record = logging.LogRecord("uvicorn.error", logging.INFO, "", 0, '%s - "WebSocket %s" %s',
                               ("127.0.0.1:5", f"/v1/telephony/twilio/{token}", 403), None)
    assert RedactTokens().filter(record) and token not in record.getMessage()
