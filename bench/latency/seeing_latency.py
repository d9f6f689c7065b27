"""What seeing costs the spoken turn: first audio with the camera streaming, a text-only session beside sessions
that stream frames, and the scene note's age when a turn is committed (issue 44).

    python -m bench.latency.seeing_latency [--turns 6] [--rounds 2] [--parts camera crowd age] [--scenes new|held]

One server (``--engines default``: the embedded models and the offline scene reader), one run, every comparison
side by side in it: each part alternates its two conditions in ``--rounds`` blocks of ``--turns`` spoken turns
(the finished questions of ``bench/harness/question_clips.py``, streamed in real time by the official ``openai``
client, as ``bench.latency.first_audio`` streams them), so a change in the machine's load falls on both.

* **camera**: first audio (docs/design.md) of one session with its camera off, and of one sending a frame every
  0.5 s (2 fps) as ``bargein.camera.frame``. Every frame shows a new scene (the fit half's frames of
  ``bench/quality/seeing_frames.py`` in turn), so none is dropped as a near-duplicate and every one asks the
  scene reader for a note: the worst case (``--scenes held``: each scene held for three frames, as in **age**).
  Target: p50 within +5 %. Also printed: the age at commit of the note each camera-on reply quotes (the ledger's
  ``scene_note_age_ms``).
* **crowd**: a text-only session's first audio (its camera off) alone, and while three other sessions each
  stream new scenes at 2 fps (they only stream frames). Target: p95 within 1.2x.
* **age**: the scene note's age when each turn is committed (``scene_note_age_ms`` in ``bargein.turn.metrics``)
  of a session whose camera sends a frame a second, held on a scene for three seconds at a time with fresh
  sensor noise in each frame, as a hand-held phone pointed at one sign after another. Target: p50 <= 1 s.

Load averages are printed at the start and the end of every block: the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import os
import random
import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("BARGEIN_LLM_TRACE", "1")  # the server started here logs every LLM job (its wait, new tokens)

from bench.harness.llm_trace import log_size
from bench.harness.realtime_harness import ServerProcess, percentile
from bench.harness.spoken_session import run_session
from bench.latency.seeing_echo import echo_count
from bench.latency.seeing_turns import (
    MEDIANS_HEADER,
    MODEL_HEADER,
    REPLY_CAP,
    ModelJob,
    Tokenize,
    TurnFigures,
    figures,
    medians,
    model_jobs,
    model_medians,
    model_tokenizer,
    transcripts,
)

STREAM_FPS, AGE_FPS, HOLD_FRAMES = 2.0, 1.0, 3
CROWD = 3
CAMERA_TARGET, CROWD_TARGET, AGE_TARGET_MS = 1.05, 1.2, 1000.0
LEDGER_STAGES = ("endpoint_ms", "asr_final_ms", "llm_first_token_ms", "first_clause_ms", "tts_synth_ms",
                 "first_audio_ms", "scene_note_age_ms", "scene_newest_age_ms")


TOKENIZER: Tokenize | None = None
"""The embedded model's tokenizer, for the tokens of each reply's first clause (loaded by :func:`main`)."""
SERVER_LOG: Path | None = None
"""The log of the server started here (its LLM's job trace); None with ``--url``."""


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def data_url(image: Image.Image) -> str:
    """A camera frame as the page sends it: a JPEG data URL."""
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def scene_images() -> list[Image.Image]:
    """Distinct camera scenes: the fit half's frames, text and no text."""
    from bench.quality.seeing_frames import frames

    return [frame.image for frame in frames("fit")]


def new_scene_urls(images: list[Image.Image]) -> list[str]:
    """A new scene every frame (the scene reader reads every one)."""
    return [data_url(image) for image in images]


def held_scene_urls(images: list[Image.Image], hold: int = HOLD_FRAMES) -> list[str]:
    """Each scene for ``hold`` frames, each with its own sensor noise (near-duplicates of the first)."""
    rng = np.random.default_rng(44)
    urls = []
    for image in images[:24]:
        pixels = np.asarray(image, dtype=np.float32)
        for _ in range(hold):
            noisy = np.clip(pixels + rng.normal(0, 3.0, pixels.shape), 0, 255).astype(np.uint8)
            urls.append(data_url(Image.fromarray(noisy)))
    return urls


def camera(urls: list[str], fps: float, offset: int = 0) -> Callable[[Any], Awaitable[None]]:
    """A camera for ``run_session``'s ``alongside``: sends ``urls`` in turn, ``fps`` a second, until cancelled."""
    async def stream(connection: Any) -> None:
        index = offset
        while True:
            frame = {"type": "bargein.camera.frame", "image_url": urls[index % len(urls)]}
            await connection.send_raw(json.dumps(frame))
            index += 1
            await asyncio.sleep(1.0 / fps)
    return stream


async def watcher(host_port: str, urls: list[str], offset: int, stop: asyncio.Event) -> None:
    """A session that only streams its camera at :data:`STREAM_FPS` (and reads what the server sends)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="sk-local", websocket_base_url=f"ws://{host_port}/v1", max_retries=0)
    async with client.realtime.connect(model="bargein-bench", max_retries=0,
                                       extra_query={"bargein_events": "1"}) as connection:
        async def drain() -> None:
            while True:
                await connection.recv_bytes()
        reader = asyncio.create_task(drain())
        streaming = asyncio.create_task(camera(urls, STREAM_FPS, offset)(connection))
        await stop.wait()
        for task in (streaming, reader):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def session_args(turns: int) -> argparse.Namespace:
    """A spoken session as ``bench.latency.first_audio --clips questions --barge-every 0`` runs it."""
    return argparse.Namespace(turns=turns, barge_every=0, silence_ms=None, semantic=False, reply_timeout_s=60.0,
                              max_reply_s=8.0, clips="questions",
                              session={"max_output_tokens": REPLY_CAP})  # short replies: more turns a minute


async def spoken(host_port: str, turns: int, label: str,
                 alongside: Callable[[Any], Awaitable[None]] | None = None,
                 accounts: list[TurnFigures] | None = None,
                 jobs: list[ModelJob] | None = None,
                 older: list[float] | None = None) -> tuple[list[float], list[float]]:
    """One session's first audio per answered turn (ms) and its ledger's note ages at commit (ms); each turn's
    account (where its first audio went) is printed, and added to ``accounts``, and its LLM jobs to ``jobs``; for
    each reply that quoted an older note than the newest (one the model had read), how much older, to ``older``."""
    print(f"-- {label}: load average {load()}", flush=True)
    since = log_size(SERVER_LOG)
    results, observer, _ = await run_session(host_port, session_args(turns), alongside=alongside)
    for job in model_jobs(SERVER_LOG, since):
        print(job.line(), flush=True)
        if jobs is not None:
            jobs.append(job)
    firsts = [r.first_audio_ms for r in results if r.first_audio_ms is not None]
    ages = [float(m["scene_note_age_ms"]) for m in observer.turn_metrics if "scene_note_age_ms" in m]
    if older is not None:
        older += [float(m["scene_note_age_ms"]) - float(m["scene_newest_age_ms"]) for m in observer.turn_metrics
                  if "scene_newest_age_ms" in m]
    replies = transcripts(observer.other)
    for metrics in observer.turn_metrics:  # where a slow turn's time went, by the server's ledger
        print("   ledger: " + " ".join(f"{key.removesuffix('_ms')} {metrics[key]:.0f}" for key in LEDGER_STAGES
                                     if isinstance(metrics.get(key), int | float)), flush=True)
        account = figures(metrics, replies.get(metrics.get("response_id") or "", ""), TOKENIZER)
        print(account.line(), flush=True)
        if accounts is not None:
            accounts.append(account)
    print(f"   {label}: {len(firsts)}/{len(results)} answered, load average {load()}", flush=True)
    return firsts, ages


async def with_crowd(host_port: str, turns: int, urls: list[str]) -> list[float]:
    """The text-only session's first audio while :data:`CROWD` other sessions stream new scenes."""
    stop = asyncio.Event()
    crowd = [asyncio.create_task(watcher(host_port, urls, 7 * k, stop)) for k in range(CROWD)]
    await asyncio.sleep(2.0)  # let the crowd's frames reach the scene reader
    try:
        firsts, _ = await spoken(host_port, turns, f"text-only beside {CROWD} sessions streaming at 2 fps")
    finally:
        stop.set()
        await asyncio.gather(*crowd, return_exceptions=True)
    return firsts


def row(label: str, values: list[float]) -> str:
    """``label: n, p50, p95`` in ms."""
    if not values:
        return f"| {label} | 0 | - | - |"
    return f"| {label} | {len(values)} | {percentile(values, 50):.0f} | {percentile(values, 95):.0f} |"


async def run(host_port: str, args: argparse.Namespace) -> None:
    """The parts asked for, each condition alternating by round; then the tables."""
    images = scene_images()
    fresh, held = new_scene_urls(images), held_scene_urls(images)
    figures: dict[str, list[float]] = {key: [] for key in ("off", "on", "on_age", "on_older", "alone", "crowd",
                                                                 "age", "age_older")}
    accounts: dict[str, list[TurnFigures]] = {"off": [], "on": []}
    jobs: dict[str, list[ModelJob]] = {"off": [], "on": []}
    for round_ in range(args.rounds):
        print(f"== round {round_ + 1}/{args.rounds}", flush=True)
        if "camera" in args.parts:
            order = [("off", None), ("on", camera(fresh if args.scenes == "new" else held, STREAM_FPS))]
            for key, alongside in order if round_ % 2 == 0 else order[::-1]:
                firsts, ages = await spoken(host_port, args.turns, f"camera {key}", alongside, accounts[key],
                                            jobs[key], figures["on_older"] if key == "on" else None)
                figures[key] += firsts
                figures["on_age"] += ages if key == "on" else []  # the quoted note's age (the ledger's)
        if "crowd" in args.parts:
            figures["alone"] += (await spoken(host_port, args.turns, "text-only alone"))[0]
            figures["crowd"] += await with_crowd(host_port, args.turns, fresh)
        if "age" in args.parts:
            figures["age"] += (await spoken(host_port, args.turns, "camera at 1 fps, held scenes",
                                            camera(held, AGE_FPS, random.Random(round_).randrange(len(held))),
                                            older=figures["age_older"]))[1]
    report(figures)
    if accounts["on"] or accounts["off"]:
        print(f"\n### where first audio went (medians per turn; the ledger's stages)\n\n{MEDIANS_HEADER}")
        for key in ("off", "on"):
            print(f"| camera {key} | {medians(accounts[key])} |")
        print(f"\n### the LLM's jobs (its trace)\n\n{MODEL_HEADER}")
        for key in ("off", "on"):
            print(f"| camera {key} | {model_medians(jobs[key], len(accounts[key]))} |")
        print("\nreplies opening on the camera, the picture, the user or the scene's facts (seeing_echo.py): "
              + ", ".join(f"camera {key} {echo_count([a.reply for a in accounts[key]])}" for key in ("on", "off")))


def report(figures: dict[str, list[float]]) -> None:
    """The tables and the verdicts."""
    print(f"\n## bench.latency.seeing_latency (load average at the end {load()})\n")
    print("| condition | turns | p50 ms | p95 ms |\n|---|---|---|---|")
    labels = {"off": "first audio, camera off", "on": "first audio, camera streaming at 2 fps",
              "on_age": "age at commit of the note the camera-on replies quote (ms)",
              "alone": "text-only session alone", "crowd": f"text-only session beside {CROWD} streaming at 2 fps",
              "age": "scene note age at commit, 1 fps (ms)"}
    for key, label in labels.items():
        if figures[key]:
            print(row(label, figures[key]))
    def verdict(ratio: float, target: float) -> str:
        return f"{ratio:.3f} (target <= {target}: {'met' if ratio <= target else 'missed'})"

    if figures["off"] and figures["on"]:
        ratio = statistics.median(figures["on"]) / statistics.median(figures["off"])
        print(f"\ncamera: p50 on/off {verdict(ratio, CAMERA_TARGET)}")
    if figures["alone"] and figures["crowd"]:
        ratio = percentile(figures["crowd"], 95) / percentile(figures["alone"], 95)
        print(f"crowd: p95 beside/alone {verdict(ratio, CROWD_TARGET)}")
    if figures["age"]:
        p50 = statistics.median(figures["age"])
        print(f"age: p50 {p50:.0f} ms (target <= {AGE_TARGET_MS:.0f}: {'met' if p50 <= AGE_TARGET_MS else 'missed'})")
    for ages, older_key, label in (("on_age", "on_older", "camera on"), ("age", "age_older", "1 fps")):
        if figures[ages]:
            older = figures[older_key]
            print(f"{label}: {len(older)} replies quoted an older note than the newest, one the model had read"
                  + (f" ({statistics.median(older):.0f} ms older at the median)" if older else ""))


def main() -> None:
    """Parse the options, start a server, run the parts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="host:port of a running server (then no server is started)")
    parser.add_argument("--turns", type=int, default=6, help="spoken turns per condition and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parts", nargs="+", default=["camera", "crowd", "age"], choices=["camera", "crowd", "age"])
    parser.add_argument("--scenes", choices=["new", "held"], default="new",
                        help="the camera part's stream: a new scene every frame (the worst case), or each scene held "
                             "for three frames with fresh sensor noise (a phone held on one sign after another)")
    args = parser.parse_args()
    global TOKENIZER, SERVER_LOG
    TOKENIZER = model_tokenizer()
    print(f"load average at the start {load()}", flush=True)
    if args.url:
        asyncio.run(run(args.url.removeprefix("ws://").removeprefix("http://").split("/")[0], args))
        return
    with ServerProcess("default") as server:
        print(f"server: bargein serve --engines default on {server.host_port} (log {server.log_path})", flush=True)
        SERVER_LOG = server.log_path
        asyncio.run(run(server.host_port, args))


if __name__ == "__main__":
    main()
