"""Where a WebRTC barge-in stop's time goes, term by term: a trace the benchmark's server writes, read per cut.

``bench.latency.webrtc`` parts a to c serve with :func:`traced_instant_engines`: in the server's process it wraps,
for the benchmark only, the receive buffer (each caller packet's arrival and RTP timestamp), the Silero stream
(each 512-sample frame's submission, result and probability, by frame index), the connection's event forwarding
(``input_audio_buffer.speech_started`` and ``bargein.reply.paused`` as the writer carries them out) and the reply
track (its clear, and the first packet after it leaving), and appends them to the JSON-lines file named by
``BENCH_ONSET_TRACE``. The client's microphone notes the RTP timestamp its clip began at
(:attr:`~bench.harness.webrtc_peer.MicrophoneTrack.starts`), so the clip's onset is a position in the server's
stream: 16 kHz sample ``n`` is 48 kHz RTP timestamp ``3 n`` from the first packet (the listen path's resamplers
shift nothing, ``bargein/audio/resample.py``). :func:`stop_terms` splits each cut's stop (ms, on the one
``time.monotonic`` clock both processes read):

- **receive**: the onset's packet leaving the client to its arrival in the server's receive buffer;
- **speech**: the onset to the end of the first Silero frame at or over the threshold (its ``audio_start_ms``), in
  ms of audio, and how many frames after the onset's own frame that was (``frames``): the main grid's, with or
  without the half-hop onset stream (whose frames only hold the reply's audio, :mod:`bargein.session.core.onset_hold`);
- **assembly**: that frame's end (the onset's send time plus ``speech``) to the frame reaching Silero: the packet
  that completes it (the benchmark's microphone sends a packet as its 20 ms begins, so this can be negative), the
  listen path's resamplers (a frame whose last sample falls in a packet's last few milliseconds waits for the next
  packet) and the session's work;
- **vad**: the frame's submission to its probability (the batcher's loop passes and the inference);
- **core**: the probability to the writer carrying out ``speech_started`` (the machine, the outbound queue);
- **cut**: that to the reply track's clear (the writer carries out ``bargein.reply.paused`` next);
- **send**: the clear to the first packet after it leaving;
- **tail**: that packet's leaving to the last voiced reply packet's arrival at the client (negative when the
  onset fell in a gap between the reply's words, or when a half-hop probe's hold stopped the reply first);
- **held**: how long before the clear a half-hop probe's hold (``ReplyAudioTrack.hold``) stopped the reply's packets
  (0 without one); the holds released (no barge-in followed: a hiccup in the reply) are counted over the run.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bargein.engines.base import Engines

TRACE_ENV = "BENCH_ONSET_TRACE"
FRAME_SAMPLES = 512
LISTEN_RATE = 16_000
RTP_PER_LISTEN_SAMPLE = 3
THRESHOLD = 0.5
HOLD_WINDOW_S = 0.2
"""A hold this long before a cut's clear is that cut's (the core's window is 48 ms of stream time)."""


class _Trace:
    """Appends records to the trace file, flushed at the events a cut is read by."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1 << 16)  # noqa: SIM115 - open for the server's life

    def note(self, record: dict[str, Any], *, flush: bool = False) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        if flush:
            self._file.flush()


def traced_instant_engines() -> Engines:
    """:func:`~bench.latency.webrtc_engines.instant_engines`, with the trace installed when ``BENCH_ONSET_TRACE``
    names a file."""
    from bench.latency.webrtc_engines import instant_engines

    engines = instant_engines()
    path = os.environ.get(TRACE_ENV)
    if path:
        _install(_Trace(path), engines)
    return engines


def _install(trace: _Trace, engines: Engines) -> None:
    from bargein.engines.listen.silero_vad import SileroStream
    from bargein.server.webrtc.connection import WebRtcConnection
    from bargein.server.webrtc.receive import ReceiveBuffer

    add = ReceiveBuffer.add

    def traced_add(self: Any, packet: Any) -> tuple[bool, None]:
        first = getattr(self, "_first_timestamp", None)
        first = packet.timestamp if first is None else first
        trace.note({"k": "pkt", "t": time.monotonic(), "ts": (packet.timestamp - first) % (1 << 32),
                    "id": id(self)})
        return add(self, packet)

    probability = SileroStream.probability

    async def traced_probability(self: Any, frame: Any) -> float:
        index = self.__dict__.setdefault("_trace_frames", 0)
        self._trace_frames = index + 1
        submitted = time.monotonic()
        result = await probability(self, frame)
        trace.note({"k": "vad", "s": id(self), "i": index, "t0": submitted, "t1": time.monotonic(), "p": result})
        return result

    forward = WebRtcConnection._forward

    async def traced_forward(self: Any, item: Any) -> None:
        kind = item.event.get("type")
        if kind in ("input_audio_buffer.speech_started", "bargein.reply.paused"):
            trace.note({"k": kind, "t": time.monotonic(), "ms": item.event.get("audio_start_ms")}, flush=True)
        await forward(self, item)

    ReceiveBuffer.add = traced_add  # type: ignore[method-assign]
    SileroStream.probability = traced_probability  # type: ignore[method-assign]
    WebRtcConnection._forward = traced_forward  # type: ignore[method-assign]
    _install_track(trace)


def _install_track(trace: _Trace) -> None:
    """Trace the reply track's clears, holds, releases and the first packet after a clear."""
    from bargein.server.webrtc.tracks import ReplyAudioTrack

    clear = ReplyAudioTrack.clear

    def traced_clear(self: Any) -> Any:
        had = self.holds_audio
        trace.note({"k": "clear", "t": time.monotonic(), "had": had}, flush=True)
        self._trace_cut = had
        return clear(self)

    hold, release = ReplyAudioTrack.hold, ReplyAudioTrack.release

    def traced_hold(self: Any, response_id: str) -> None:
        trace.note({"k": "hold", "t": time.monotonic()}, flush=True)
        hold(self, response_id)

    def traced_release(self: Any, response_id: str) -> None:
        trace.note({"k": "release", "t": time.monotonic()}, flush=True)
        release(self, response_id)

    recv = ReplyAudioTrack.recv

    async def traced_recv(self: Any) -> Any:
        packet = await recv(self)
        if getattr(self, "_trace_cut", False):
            self._trace_cut = False
            trace.note({"k": "after_cut", "t": time.monotonic()}, flush=True)
        return packet

    ReplyAudioTrack.clear = traced_clear  # type: ignore[method-assign]
    ReplyAudioTrack.recv = traced_recv  # type: ignore[method-assign]
    ReplyAudioTrack.hold = traced_hold  # type: ignore[method-assign]
    ReplyAudioTrack.release = traced_release  # type: ignore[method-assign]


@dataclass
class StopTerms:
    """One cut's stop split into its terms (ms; see the module docstring)."""

    receive: float
    speech: float
    frames: int
    assembly: float
    vad: float
    core: float
    cut: float
    send: float
    tail: float
    stop: float
    held: float = 0.0

    def line(self) -> str:
        """One printed line."""
        return (f"receive {self.receive:5.1f}  speech {self.speech:5.1f} ({self.frames} frame(s) after the onset's)  "
                f"assembly {self.assembly:5.1f}  vad {self.vad:4.1f}  core {self.core:4.1f}  cut {self.cut:4.1f}  "
                f"send {self.send:4.1f}  tail {self.tail:6.1f}  = stop {self.stop:6.1f}  held {self.held:4.1f}")


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The trace's records (a line the server was writing as it stopped is skipped)."""
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def stop_terms(records: list[dict[str, Any]], onset_at: float, onset_pts: int,
               last_packet_at: float) -> StopTerms | None:
    """The terms of one cut: the onset sent at ``onset_at`` (client clock) as RTP timestamp ``onset_pts``, the
    interrupted reply's last voiced packet arriving at ``last_packet_at``; None when the trace lacks a step."""
    packets = [r for r in records if r["k"] == "pkt"]
    if not packets:
        return None
    call = packets[-1]["id"]  # the WebRTC call (parts a to c hold one)
    arrival = next((r["t"] for r in packets if r["id"] == call and r["ts"] >= onset_pts
                    and r["t"] > onset_at - 1.0), None)
    started = next((r for r in records if r["k"] == "input_audio_buffer.speech_started" and r["t"] > onset_at - 0.2),
                   None)
    if arrival is None or started is None or started["ms"] is None:
        return None
    onset_at_sample = round(started["ms"] * LISTEN_RATE / 1000)
    voiced_index = onset_at_sample // FRAME_SAMPLES  # the main grid's (a half-hop probe begins no turn)
    frames = [r for r in records if r["k"] == "vad" and abs(r["t1"] - started["t"]) < 1.0
              and r["i"] == voiced_index]
    clears = [r for r in records if r["k"] == "clear" and r["t"] >= started["t"] - 0.05]
    after = [r for r in records if r["k"] == "after_cut" and clears and r["t"] >= clears[0]["t"]]
    if not frames or not clears or not after:
        return None
    frame = min(frames, key=lambda r: abs(r["t1"] - started["t"]))
    holds = [r["t"] for r in records if r["k"] == "hold" and 0.0 <= clears[0]["t"] - r["t"] < HOLD_WINDOW_S]
    onset_sample = onset_pts / RTP_PER_LISTEN_SAMPLE
    end_sample = onset_at_sample + FRAME_SAMPLES
    speech_ms = 1000.0 * (end_sample - onset_sample) / LISTEN_RATE
    frame_end_at = onset_at + speech_ms / 1000.0
    ms = 1000.0
    return StopTerms(
        receive=ms * (arrival - onset_at), speech=speech_ms,
        frames=voiced_index - int(onset_sample // FRAME_SAMPLES),
        assembly=ms * (frame["t0"] - frame_end_at), vad=ms * (frame["t1"] - frame["t0"]),
        core=ms * (started["t"] - frame["t1"]), cut=ms * (clears[0]["t"] - started["t"]),
        send=ms * (after[0]["t"] - clears[0]["t"]), tail=ms * (last_packet_at - after[0]["t"]),
        stop=ms * (last_packet_at - onset_at), held=ms * (clears[0]["t"] - holds[-1]) if holds else 0.0)


def report(trace_path: Path, cuts: list[tuple[float, int, float]]) -> list[StopTerms]:
    """Print each cut's terms and their medians (and maxima); the terms."""
    records = read_trace(trace_path) if trace_path.is_file() else []
    terms = [t for cut in cuts if (t := stop_terms(records, *cut)) is not None]
    released = sum(1 for r in records if r["k"] == "release")
    print(f"   where the stop went, per cut ({len(terms)} of {len(cuts)} cuts traced; ms; half-hop holds "
          f"{sum(1 for r in records if r['k'] == 'hold')}, released {released}):")
    for each in terms:
        print(f"    {each.line()}")
    if terms:
        import statistics

        names = ("receive", "speech", "assembly", "vad", "core", "cut", "send", "tail", "stop", "held")
        print("    median: " + "  ".join(f"{n} {statistics.median(getattr(t, n) for t in terms):.1f}" for n in names))
        print("    max:    " + "  ".join(f"{n} {max(getattr(t, n) for t in terms):.1f}" for n in names))
    return terms


def _through_webrtc(pcm: Any) -> Any:
    """``pcm`` (24 kHz) encoded as the benchmark's client does (32 kbit/s, FEC), decoded as the server does
    (:data:`~bargein.server.webrtc.receive.DECODE_RATE`) and resampled to 16 kHz by the session's listen path."""
    import numpy as np

    from bargein.audio.resample import LowDelayResampler
    from bargein.server.webrtc.opus import OpusEncoder
    from bargein.server.webrtc.receive import DECODE_RATE, ConcealingDecoder
    from bargein.server.webrtc.reorder import Release
    from bargein.server.webrtc.tracks import OPUS_FRAME_SAMPLES, OpusRateFrames
    from bench.harness.realtime_harness import WIRE_RATE
    from bench.harness.webrtc_peer import BROWSER_BIT_RATE

    chunk = WIRE_RATE // 50
    encoder, to_opus, decoder = OpusEncoder(BROWSER_BIT_RATE), OpusRateFrames(WIRE_RATE), ConcealingDecoder(
        DECODE_RATE)
    listen = LowDelayResampler(decoder.rate, LISTEN_RATE)
    out = []
    for index in range(len(pcm) // chunk):
        packet = bytes(encoder.encode(to_opus.frame(pcm[index * chunk:(index + 1) * chunk]),
                                      index * OPUS_FRAME_SAMPLES))
        for frame in decoder.decode(Release(index * OPUS_FRAME_SAMPLES, packet)):
            out.append(listen.process(frame.to_ndarray().reshape(-1).astype(np.float32) / 32768.0))
    return np.concatenate(out)


def _first_voiced_end(model: Any, audio: Any, phase: int, onset: int, begin: int = 0) -> int:
    """The end of the first frame over the threshold that ends after the onset (the turn before fires too), the
    stream starting at the first frame that starts at or after ``begin``."""
    import numpy as np

    padded = np.concatenate([np.zeros(phase, np.float32), audio])
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros((1, 64), np.float32)
    for start in range(0, len(padded) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        if start - phase < begin:
            continue
        frame = padded[None, start:start + FRAME_SAMPLES]
        probability, state = model.step(frame, context, state)
        context = frame[:, -64:]
        if probability[0] >= THRESHOLD and start + FRAME_SAMPLES - phase > onset:
            return start + FRAME_SAMPLES - phase
    return len(audio)


def onset_phases(phase_step: int = 16, *, probe_from_silence: bool = False) -> dict[str, list[tuple[float, float]]]:
    """Offline, per clip: the speech Silero needs before its first frame at or over the threshold, at every phase of
    its 512-sample grid against the clip (``phase_step`` samples apart), alone and with a second stream on the grid
    offset by 256 samples (the first voiced frame of either: what a half-hop onset would buy).

    Each clip is played as a cut does it: the turn before it (the clip before it in the benchmark's order), 2 s of
    silence (its reply's first audio and the 1.2 s it plays), then the clip from 100 ms before its onset; encoded as
    the benchmark's client does (32 kbit/s, FEC), decoded as the server does (:data:`~bargein.server.webrtc.receive.
    DECODE_RATE`) and resampled to 16 kHz by the session's listen path. Silero starts afresh at the turn before, so
    its state at the onset is a session's after a turn and a silence (from silence alone it is slower to fire).
    ``probe_from_silence``: the half-hop stream starts afresh 300 ms into the silence, as a session's starts with the
    reply (``AudioInput``'s half-hop stream runs while a reply is live), instead of at the turn before."""
    import numpy as np

    from bargein.engines.listen.silero_vad import SileroModel
    from bench.harness.question_clips import question_clips
    from bench.harness.realtime_harness import WIRE_RATE
    from bench.latency.webrtc_turns import CUT_IN_LEAD_S, even_levels

    model = SileroModel()
    lead = int(2.0 * WIRE_RATE)
    figures: dict[str, list[tuple[float, float]]] = {}
    clips = even_levels(question_clips())
    for index, clip in enumerate(clips):
        before = np.frombuffer(clips[index - 1].pcm, dtype="<i2")
        skip = max(0, clip.onset - int(CUT_IN_LEAD_S * WIRE_RATE))
        samples = np.frombuffer(clip.from_sample(skip), dtype="<i2")[:WIRE_RATE]
        audio = _through_webrtc(np.concatenate([before, np.zeros(lead, np.int16), samples]))
        onset = (len(before) + lead + clip.onset - skip) * LISTEN_RATE // WIRE_RATE
        ends = {phase: _first_voiced_end(model, audio, phase, onset) for phase in range(0, FRAME_SAMPLES, phase_step)}
        begin = (len(before) + int(0.3 * WIRE_RATE)) * LISTEN_RATE // WIRE_RATE if probe_from_silence else 0
        probes = ends if not begin else {phase: _first_voiced_end(model, audio, phase, onset, begin)
                                         for phase in range(0, FRAME_SAMPLES, phase_step)}
        half = FRAME_SAMPLES // 2
        either = {phase: min(end, probes.get((phase + half) % FRAME_SAMPLES, end)) for phase, end in ends.items()}
        figures[clip.name] = [(1000.0 * (end - onset) / LISTEN_RATE, 1000.0 * (either[phase] - onset) / LISTEN_RATE)
                              for phase, end in ends.items()]
    return figures


def main() -> None:
    """Print :func:`onset_phases` per clip and over all clips (``--probe-from-silence``: its half-hop stream starting
    with the reply, as a session's does)."""
    import sys

    import numpy as np

    figures = onset_phases(probe_from_silence="--probe-from-silence" in sys.argv[1:])
    print("ms of speech before Silero's first voiced frame, over the grid's phases: alone | with a half-hop stream")
    every = []
    for name, rows in figures.items():
        alone, both = [row[0] for row in rows], [row[1] for row in rows]
        every += rows
        print(f"  {name:30s} mean {np.mean(alone):5.1f} max {max(alone):5.1f} | mean {np.mean(both):5.1f} "
              f"max {max(both):5.1f}")
    for label, column in (("alone", 0), ("half-hop", 1)):
        values = [row[column] for row in every]
        print(f"  all clips, {label:8s}: p50 {np.percentile(values, 50):5.1f}  p90 {np.percentile(values, 90):5.1f}  "
              f"max {max(values):5.1f}  (n = {len(values)})")


if __name__ == "__main__":
    main()
