"""bargein against Pipecat in one run: same engines, same clips, same client-side measurement.

    .venv-pipecat/bin/python -m bench.latency.vs_pipecat --turns 10

Needs an environment with ``pipecat-ai`` besides bargein (the set-up below); it starts, on
loopback, one ``python -m llama_cpp.server`` (SmolLM2-135M by default) that both systems use as their
OpenAI-compatible LLM, ``python -m bargein serve`` on its default engines, and a Pipecat pipeline
(``bench/latency/pipecat_server.py``) on the same engines from bargein's own factory (processes started by
``bench/latency/vs_pipecat_engines.py``), then alternates between them round by round (the
order flips every round), so machine noise hits both. It stops by itself (``--time-limit-s``).

Each round gives each system one fresh connection and one episode: 1 s of silence, clip A; when the first
audible agent sample of the reply arrives, clip B cuts in (from 0.1 s before its speech onset); the reply to B
plays for a second; the connection closes; a pause (``--settle-s``) follows. The client is a microphone: one 20 ms
chunk every 20 ms of 24 kHz pcm16 (silence between clips), every chunk's send time logged. bargein gets it as
``input_audio_buffer.append`` through the official ``openai`` client; Pipecat as audio frames of its
stock ``ProtobufFrameSerializer`` through a plain ``websockets`` client, resampled to 16 kHz in the
client by the streaming resampler bargein's server uses on its side.

* **first audio**: from the send time of the chunk holding the last speech sample of a clip (speech
  bounds from frame energy, offline) to the arrival of the first agent audio chunk holding a non-silent
  sample (above -60 dBFS) after it. Two per episode: clip A and clip B (the turn after a barge-in).
* **first audio heard**: the same, to when that sample would sound at a client with no jitter buffer
  (see :class:`Link`): bargein sends each clause's audio up to 1 s ahead in larger deltas,
  Pipecat 40 ms frames at twice real time.
* **barge-in signal**: from the send time of the chunk holding the first speech sample of clip B to the
  arrival of the server's interruption signal: ``input_audio_buffer.speech_started`` for bargein, the
  ``interruption`` frame Pipecat's output transport writes for its ``InterruptionFrame``
  (it writes it after it has dropped its queued audio). Both tell a client to flush its playback.
* **barge-in stop**: the later of the signal and the last audible agent chunk arriving between clip B's
  onset and its end (audio of the interrupted reply still coming), from the same onset. A client that
  flushes on the signal plays nothing of the interrupted reply after this moment. The agent audio that arrived
  after the signal is summed too.
* **paired difference**: for each round, clip and turn, Pipecat's first audio minus bargein's.
* **server-side stages**: what each system reports about itself, medians; the definitions differ (bargein's
  ``bargein.turn.metrics`` ledger; Pipecat's TTFB metrics: STT from the VAD stop to the transcript, LLM time to
  first token, TTS from a sentence's text to its first audio).

**Set-up (a separate environment).** Pipecat must not go into bargein's own virtualenv. It gets a second one
beside it, ``.venv-pipecat`` (``.venv*/`` is git-ignored): ``scripts/setup.sh test`` makes it with only what
Pipecat's Realtime client needs for ``tests/e2e/test_pipecat_client.py``
(``tests/pipecat_client/requirements.txt``). The benchmark needs more in it (Pipecat's Silero VAD, bargein itself,
the LLM server)::

    python3 -m venv .venv-pipecat  # if scripts/setup.sh test has not made it
    .venv-pipecat/bin/pip install -e ".[bench]" "pipecat-ai[websocket,silero,openai]==1.14.0" \
        "llama-cpp-python[server]" "openai[realtime]"
    .venv-pipecat/bin/python -m bench.latency.vs_pipecat --turns 20 --plot docs/benchmarks/vs_pipecat.png

Install the same llama-cpp-python wheel the project venv uses (``pip install --force-reinstall --no-deps
<that wheel>``): a wheel built for other CPU features can crash the shared LLM server on its first request.

Options: ``--turns N`` (first-audio turns per system, two per round; default 10), ``--llm NAME`` (a packaged GGUF,
default ``smollm2-135m``), ``--warmup K`` (unmeasured episodes per system, default 1), ``--pipecat-stop-secs S``
(Pipecat's VAD ``stop_secs``, default 0.2), ``--pipecat-smart-turn`` (below), ``--settle-s`` (pause between
episodes, default 2), ``--time-limit-s`` (no new round after this, default 840), ``--plot PATH``. With the defaults
it ends by itself in about 5 minutes; ``--turns 20`` takes about 9.

**What runs**: three loopback processes, all started and stopped by the script.

- **the LLM**: one ``python -m llama_cpp.server`` serving the packaged GGUF, with the thread count bargein's own
  policy gives (``bargein.engines.think.llama_llm.default_threads()``). Both systems talk to this one server, with
  the same system prompt (bargein's default session instructions), temperature (0.7) and token cap (80).
- **bargein**: ``python -m bargein serve --engines default --llm-url http://127.0.0.1:PORT/v1
  --llm-model smollm2-135m --asr-model tiny.en --tts kokoro``, the real entry point and engine factory.
- **Pipecat** (``bench/latency/pipecat_server.py``): a FastAPI WebSocket server (``FastAPIWebsocketTransport``,
  one pipeline per connection), the standard cascade ``transport in -> STT -> user aggregator (VAD,
  turn strategies) -> OpenAILLMService -> TTS -> transport out -> assistant aggregator``. Its engines
  come from bargein's own factory (``bargein.engines.factory.load_engines``), so they are the same classes,
  models and settings: Pipecat's own ``SileroVADAnalyzer`` (its bundled ``silero_vad.onnx`` is checked at start to
  have the sha256 bargein pins, or the bench stops); a ``SegmentedSTTService`` subclass around bargein's
  ``WhisperRecognizer``, which like Pipecat's ``WhisperSTTService`` transcribes each VAD segment when the VAD
  reports the stop; Pipecat's ``OpenAILLMService`` pointed at the shared server; a ``TTSService`` subclass around
  bargein's ``KokoroSynthesizer`` (an interruption cancels the synthesis); Pipecat's stock
  ``ProtobufFrameSerializer`` on the wire (pcm16, 16 kHz up, 24 kHz down, its ``InterruptionFrame`` and the stage
  metrics).

Turn-taking is matched to bargein's ``server_vad`` defaults: threshold 0.5 (Pipecat ``confidence``), a turn starts
on the first 32 ms frame over it (``start_secs=0.032``), no volume gate (``min_volume=0``), and 500 ms of silence
ends it (Pipecat's VAD ``stop_secs`` 0.2 plus ``SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.3)``).
With ``--pipecat-smart-turn`` the bench leaves bargein's ``silence_duration_ms`` unset, so bargein runs on its
tiered default endpoint, and Pipecat ends a turn with its ``LocalSmartTurnAnalyzerV3`` at each VAD stop, as its
users run it for low latency.

**What is still not equal.**

- **Endpoint.** bargein counts silence from the first frame below 0.35 (threshold minus hysteresis), Pipecat from
  the first frame below 0.5; Pipecat also waits for its transcript before it ends the turn.
- **Early work is each framework's own.** bargein recognises, and starts the LLM, speculatively when the silence
  begins, and transcribes partials during speech; Pipecat transcribes at the VAD stop and starts the LLM at the
  end of the turn. Pipecat aggregates whole sentences before its TTS (``TextAggregationMode.SENTENCE``); bargein
  speaks the first clause as soon as it is complete. Neither was turned off.
- **Settings matched to bargein, not Pipecat's defaults** (``confidence`` 0.7, ``start_secs`` 0.2, ``min_volume``
  0.6, ``user_speech_timeout`` 0.6 would make its barge-in later and its endpoint longer), and **Pipecat runs
  bargein's recogniser**, with bargein's short Whisper encoder window: both favour Pipecat.
- **One LLM server, one prompt cache.** Within a round the second system may reuse more of the cached prompt;
  the order flips every round.
- **Transport and client.** JSON with base64 24 kHz audio through the ``openai`` client against protobuf frames of
  16 kHz audio through ``websockets``; the client's own costs are small and outside both servers, but not
  identical.
- **Noise.** On a shared machine one slow turn on either side can come from someone else's job. Alternation
  spreads this over both systems and the paired difference compares turns taken seconds apart, but p95 and max
  are noise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.harness.plotting import pyplot
from bench.harness.realtime_harness import fmt_ms, load_clips, percentile
from bench.latency.vs_pipecat_engines import services
from bench.latency.vs_pipecat_episode import Episode, run_episode

SYSTEMS = ("bargein", "pipecat")


async def run_rounds(ports: dict[str, int], args: argparse.Namespace, started: float) -> list[Episode]:
    """Warm-up, then alternating rounds until ``--turns`` first-audio turns each or the time limit."""
    clips = load_clips()
    for system in SYSTEMS:
        for _ in range(args.warmup):
            print("warm-up " + (await run_episode(system, ports[system], clips[0], clips[1], args)).line(), flush=True)
    episodes: list[Episode] = []
    rounds = math.ceil(args.turns / 2)
    longest = 0.0
    for index in range(rounds):
        if time.monotonic() - started + 1.2 * longest > args.time_limit_s:
            print(f"time limit: stopping after {index} of {rounds} rounds", flush=True)
            break
        began = time.monotonic()
        first, second = clips[(2 * index) % len(clips)], clips[(2 * index + 1) % len(clips)]
        order = SYSTEMS if index % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            episode = await run_episode(system, ports[system], first, second, args)
            episode.round_index = index
            episodes.append(episode)
            print(f"round {index:2d} " + episode.line(), flush=True)
            await asyncio.sleep(args.settle_s)  # cancelled work (LLM, TTS) of the closed session drains
        longest = max(longest, time.monotonic() - began)
    return episodes


def summary(episodes: list[Episode]) -> None:
    """Both distributions side by side and the ratio of the first-audio medians."""
    from importlib.metadata import version

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\npipecat-ai {version('pipecat-ai')}; load average at the end: {load} on {os.cpu_count()} cores")
    print(f"{'':28s} {'n':>4s} {'miss':>4s} {'p50':>6s} {'p95':>6s} {'max':>6s}  (ms)")
    medians: dict[str, float] = {}
    rows: list[tuple[str, Callable[[Episode], list[float | None]]]] = [
        ("first audio", lambda e: e.first_audio), ("first audio heard", lambda e: e.first_heard),
        ("barge-in signal", lambda e: [e.signal_ms]), ("barge-in stop", lambda e: [e.stop_ms])]
    for label, pick in rows:
        for system in SYSTEMS:
            raw = [v for e in episodes if e.system == system for v in pick(e)]
            values = [v for v in raw if v is not None]
            cells = " ".join(fmt_ms(percentile(values, q)) for q in (50, 95))
            top = fmt_ms(max(values) if values else math.nan)
            print(f"{system + ' ' + label:28s} {len(values):4d} {len(raw) - len(values):4d} {cells} {top}")
            if label == "first audio":
                medians[system] = percentile(values, 50)
    ratio = medians["pipecat"] / medians["bargein"] if medians["bargein"] > 0 else math.nan
    print(f"first audio, ratio of medians pipecat / bargein: {ratio:.2f}")
    paired = _paired(episodes)
    if paired:
        print(f"first audio, paired (same round, clip and turn) pipecat - bargein: median "
              f"{percentile(paired, 50):+.0f} ms, bargein sooner in {sum(d > 0 for d in paired)} of {len(paired)}")
    print("server-side stages, medians (ms; each system's own definitions, see bench/latency/vs_pipecat.py):")
    for system in SYSTEMS:
        merged: dict[str, list[float]] = {}
        for episode in (e for e in episodes if e.system == system):
            for key, values in episode.stages.items():
                merged.setdefault(key, []).extend(values)
        print(f"  {system:8s} " + ", ".join(f"{k} {percentile(v, 50):.0f}" for k, v in sorted(merged.items())))
    leaks = {s: sum(e.audio_after_signal_ms for e in episodes if e.system == s) for s in SYSTEMS}
    print("agent audio arriving after the interruption signal (all barge-ins): "
          + ", ".join(f"{s} {ms:.0f} ms" for s, ms in leaks.items()))


def _paired(episodes: list[Episode]) -> list[float]:
    by_round = {(e.round_index, e.system): e for e in episodes}
    differences = []
    for (index, system), episode in by_round.items():
        other = by_round.get((index, "pipecat"))
        if system != "bargein" or other is None:
            continue
        differences += [p - b for b, p in zip(episode.first_audio, other.first_audio, strict=False)
                        if b is not None and p is not None]
    return differences


def main() -> None:
    """Parse flags, start the servers, run the rounds, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=10, help="first-audio turns per system (2 per round)")
    parser.add_argument("--llm", default="smollm2-135m", help="packaged GGUF name (bargein.engines.think.llm_models)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured episodes per system first")
    parser.add_argument("--pipecat-stop-secs", type=float, default=0.2,
                        help="Pipecat VAD stop_secs; its user_speech_timeout is the rest of the 500 ms endpoint")
    parser.add_argument("--pipecat-smart-turn", action="store_true",
                        help="Pipecat ends turns with its Smart Turn analyzer (after --pipecat-stop-secs of silence); "
                             "bargein then runs on its default (tiered) endpoint instead of a plain 500 ms")
    parser.add_argument("--reply-timeout-s", type=float, default=20.0)
    parser.add_argument("--settle-s", type=float, default=2.0, help="pause between episodes")
    parser.add_argument("--time-limit-s", type=float, default=840.0, help="stop starting rounds after this")
    parser.add_argument("--plot", help="draw the distributions into this PNG (needs matplotlib)")
    args = parser.parse_args()
    with contextlib.suppress(ImportError):  # Pipecat (imported by its client) logs a banner at INFO
        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level="WARNING")
    started = time.monotonic()
    with services(args) as ports:
        print(f"servers ready in {time.monotonic() - started:.0f} s", flush=True)
        episodes = asyncio.run(run_rounds(ports, args, started))
    summary(episodes)
    if args.plot:
        plot(episodes, args.plot)


def plot(episodes: list[Episode], path: str) -> None:
    """CDFs of first audio and barge-in stop, both systems."""
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, title, pick in ((axes[0], "first audio", lambda e: e.first_audio),
                              (axes[1], "barge-in stop", lambda e: [e.stop_ms])):
        for system in SYSTEMS:
            values = sorted(v for e in episodes if e.system == system for v in pick(e) if v is not None)
            if values:
                axis.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post",
                          label=f"{system} (p50 {percentile(values, 50):.0f} ms, n={len(values)})")
        axis.set_xlabel("ms")
        axis.set_ylabel("fraction")
        axis.set_title(f"{title} (CDF)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle("bargein vs Pipecat, same engines, alternating rounds (client-measured)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
