"""Graceful drain: a real ``bargein serve`` process, a real SIGTERM, a live reply streaming meanwhile."""

from __future__ import annotations

from bench.drain import drain_timeline


async def test_sigterm_drains_live_replies_then_closes_with_1001() -> None:
    timeline = await drain_timeline(drain_s=30, reply_chars=150)  # about 9 s of audio

    assert timeline.health_503_at is not None and timeline.health_body["draining"] is True
    assert timeline.refused_event is not None and timeline.refused_event["type"] == "error"
    assert timeline.refused_event["error"]["code"] == "server_unavailable"
    assert timeline.refused_code == 1013
    types = [event["type"] for _, event in timeline.events]
    done = timeline.first("response.done")
    assert done is not None and done[1]["response"]["status"] == "completed", "the live reply finished"
    assert types.count("response.output_audio.delta") > 5, "its audio kept streaming after the signal"
    final_at, final = timeline.events[-1]
    assert final["type"] == "error" and final["error"]["code"] == "server_shutting_down"
    assert "shutting down" in final["error"]["message"]
    assert done[0] <= final_at
    assert timeline.close_code == 1001
    assert timeline.exit_code == 0


async def test_drain_deadline_cuts_a_reply_that_runs_too_long() -> None:
    timeline = await drain_timeline(drain_s=1.0, reply_chars=300)  # about 18 s of audio

    done = timeline.first("response.done")
    assert done is not None and done[1]["response"]["status"] == "cancelled", "cut at the deadline"
    final_at, final = timeline.events[-1]
    types = [event["type"] for _, event in timeline.events]
    after_cut = types[types.index("response.done") + 1:]
    assert "response.output_audio.delta" not in after_cut, "no audio after the cut"
    assert final["type"] == "error" and final["error"]["code"] == "server_shutting_down"
    assert final_at >= 1.0, "the reply had its deadline"
    assert timeline.close_code == 1001
    assert timeline.exit_code == 0


async def test_with_workers_each_worker_drains_its_own_sessions() -> None:
    timeline = await drain_timeline(drain_s=30, reply_chars=150, workers=2)

    done = timeline.first("response.done")
    assert done is not None and done[1]["response"]["status"] == "completed", "the live reply finished"
    final_at, final = timeline.events[-1]
    assert final["type"] == "error" and final["error"]["code"] == "server_shutting_down"
    assert done[0] <= final_at
    assert timeline.close_code == 1001
    # the supervisor raises the shared draining flag before it signals any worker: whichever worker the kernel
    # hands the late client to refuses it
    assert timeline.refused_event is not None and timeline.refused_event["error"]["code"] == "server_unavailable"
    assert timeline.refused_code == 1013
    assert timeline.exit_code == 0
