"""The page's turn panel shows what a turn cost (``bargein.turn.cost``): turns.js run in Node with a minimal DOM."""

from __future__ import annotations

from pathlib import Path

from tests.node_script import run_node_json

TURNS_JS = Path(__file__).resolve().parents[2] / "bargein" / "web" / "static" / "turns.js"
SCRIPT = """
const rows = [];
globalThis.performance = { now: () => 1000 };
globalThis.document = { createElement: (tag) => ({ tag, children: [], title: '',
  replaceChildren(...cells) { this.children = cells; } }) };
const { TurnLog } = await import(process.argv[1]);
const log = new TurnLog({ prepend: (row) => rows.push(row) });
log.speechStopped({ audio_end_ms: 900, item_id: 'item_1' });
log.responseCreated('resp_1');
log.cost({ type: 'bargein.turn.cost', item_id: 'item_1', response_id: 'resp_1',
  cpu_s: { vad: 0.02, asr: 0.4, llm: 1.2, session: 0.05 }, tokens: { prompt: 300, cached: 240, generated: 40 },
  audio_in_s: 1.5, audio_out_s: 2.0, waste: { tokens: 30, audio_s: 1.5 } });
console.log(JSON.stringify({ cells: rows[0].children.map((c) => c.textContent), title: rows[0].title }));
"""


def test_the_turn_row_shows_the_cpu_the_tokens_and_the_waste() -> None:
    shown = run_node_json(SCRIPT, str(TURNS_JS))
    assert shown["cells"][4:] == ["1.67 s", "40 (240/300 cached)", "30 tok, 1.5 s"]  # the session's own CPU too
    assert "llm 1.200 s" in shown["title"]
    assert "session (protocol, turn machine) 0.050 s" in shown["title"]
