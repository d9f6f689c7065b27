"""The page's playback cursor over WebRTC (remote-playback.js) keeps what it remembers of replies bounded: run in
Node, as the page runs it."""

from __future__ import annotations

from pathlib import Path

from tests.node_script import run_node_json

REMOTE_PLAYBACK_JS = Path(__file__).resolve().parents[3] / "bargein" / "web" / "static" / "remote-playback.js"
SCRIPT = """
globalThis.performance = { now: () => 1000 };
const { RemotePlayback } = await import(process.argv[1]);
const playback = new RemotePlayback(() => {});
for (let n = 0; n < 500; n++) {
  // a reply queued on the track and cut before its first frame went out: never started, never played
  playback.observe({ type: 'bargein.reply.audio', response_id: `resp_${n}`, item_id: `item_${n}`,
    audio_start_ms: 0, audio_end_ms: 400 });
  playback.observe({ type: 'output_audio_buffer.cleared', response_id: `resp_${n}` });
  if (n % 10 === 9) {  // now and then a reply that plays
    playback.observe({ type: 'bargein.reply.audio', response_id: `played_${n}`, item_id: `heard_${n}`,
      audio_start_ms: 0, audio_end_ms: 400 });
    playback.observe({ type: 'output_audio_buffer.started', response_id: `played_${n}` });
    playback.observe({ type: 'output_audio_buffer.stopped', response_id: `played_${n}` });
  }
}
console.log(JSON.stringify({ queued: Object.keys(playback.queuedMs).length,
  played: Object.keys(playback.playedMs).length, responses: playback.itemOfResponse.size }));
"""


def test_replies_cut_before_they_played_are_forgotten_like_the_rest() -> None:
    remembered = run_node_json(SCRIPT, str(REMOTE_PLAYBACK_JS))
    assert remembered["played"] <= 64 and remembered["responses"] <= 64
    assert remembered["queued"] <= 64, remembered  # the newest replies only, as for the positions played
