// Per-turn latency as the listener experiences it, measured in the page.
//
// Two client-side figures per turn, both ending at the first audible agent sample leaving the speakers:
//   first audio      from the arrival of `input_audio_buffer.speech_stopped`;
//   from speech end  from the moment the last sample of the user's speech was sent (the server's `audio_end_ms`
//                    is a position in our own input stream, which this log maps back onto the wall clock).
// The server's own figure comes from the optional `bargein.turn.metrics` event, and what the turn cost (CPU seconds
// per stage, tokens, and what a barge-in left unheard) from `bargein.turn.cost`.

const FRAME_LOG_LIMIT = 3000; // 20 ms frames: one minute of history is plenty to place a speech end

/** Stage names in the row's tooltip where the ledger's own name needs a word (the rest read as they are). */
const STAGE_NAMES = { session: 'session (protocol, turn machine)', turn_end: 'end of turn' };

function fmtMs(v) {
  return typeof v === 'number' && Number.isFinite(v) ? `${Math.round(v)} ms` : '–';
}

/** The cost columns: CPU seconds (all stages), tokens generated (cached of the prompt), waste of a barge-in. */
function costCells(cost) {
  if (!cost) return ['–', '–', '–'];
  const cpu = Object.values(cost.cpu_s ?? {}).reduce((a, b) => a + b, 0);
  const tokens = cost.tokens ?? {};
  const waste = cost.waste ?? {};
  return [`${cpu.toFixed(2)} s`, `${tokens.generated ?? 0} (${tokens.cached ?? 0}/${tokens.prompt ?? 0} cached)`,
    waste.audio_s ? `${waste.tokens} tok, ${waste.audio_s.toFixed(1)} s` : '–'];
}

export class TurnLog {
  /** @param {HTMLElement} tbody the table body the turns are listed in, newest first */
  constructor(tbody) {
    this.tbody = tbody;
    this.turns = []; // plain objects, readable by the test hook
    this.rows = new Map(); // turn number -> <tr>
    this.byResponse = new Map();
    this.reset();
  }

  /** A new connection: the input stream clock starts again at zero. */
  reset() {
    this.sentMs = 0;
    this.sendLog = [];
  }

  /** One input frame of `ms` left for the server now. */
  frameSent(ms) {
    this.sentMs += ms;
    this.sendLog.push({ endMs: this.sentMs, perf: performance.now() });
    if (this.sendLog.length > FRAME_LOG_LIMIT) this.sendLog = this.sendLog.slice(-FRAME_LOG_LIMIT / 2);
  }

  /** Wall-clock time at which the sample at stream position `ms` was sent (null if too old to know). */
  streamMsToPerf(ms) {
    for (const e of this.sendLog) if (e.endMs >= ms) return e.perf - (e.endMs - ms);
    return null;
  }

  get current() {
    return this.turns[this.turns.length - 1] ?? null;
  }

  speechStopped(ev) {
    const turn = { n: this.turns.length + 1, stoppedAt: performance.now(), audioEndMs: ev.audio_end_ms ?? null,
      userItem: ev.item_id ?? null, responseId: null, agentItem: null, firstAudioMs: null, fromSpeechEndMs: null,
      serverFirstAudioMs: null, server: null, cost: null };
    this.turns.push(turn);
    this.render(turn);
  }

  responseCreated(responseId) {
    const turn = this.current;
    if (turn && !turn.responseId && responseId) {
      turn.responseId = responseId;
      this.byResponse.set(responseId, turn);
    }
  }

  /** The first audible sample of agent item `itemId` reached the speakers at `playedAt` (performance time). */
  audible(itemId, playedAt) {
    const turn = this.current;
    if (!turn || turn.firstAudioMs !== null) return;
    turn.agentItem = itemId;
    turn.firstAudioMs = playedAt - turn.stoppedAt;
    const speechEnd = turn.audioEndMs === null ? null : this.streamMsToPerf(turn.audioEndMs);
    if (speechEnd !== null) turn.fromSpeechEndMs = playedAt - speechEnd;
    this.render(turn);
  }

  /** `bargein.turn.metrics`: our own event, whose fields may grow; the rest goes into the row's tooltip. */
  metrics(ev) {
    const m = ev.metrics ?? ev.turn ?? ev;
    const rid = m.response_id ?? ev.response_id;
    const uid = m.item_id ?? ev.item_id;
    const turn = (rid && this.byResponse.get(rid)) || this.turns.find((t) => uid && t.userItem === uid) || this.current;
    if (!turn) return;
    turn.server = m;
    const v = m.first_audio_ms ?? m.first_delta_sent_ms;
    if (typeof v === 'number') turn.serverFirstAudioMs = v;
    this.render(turn);
  }

  /** `bargein.turn.cost`: CPU seconds per stage, tokens (prompt, cached, generated), audio, waste. */
  cost(ev) {
    const turn = (ev.response_id && this.byResponse.get(ev.response_id))
      || this.turns.find((t) => ev.item_id && t.userItem === ev.item_id);
    if (!turn) return;
    turn.cost = ev;
    this.render(turn);
  }

  render(turn) {
    let row = this.rows.get(turn.n);
    if (!row) {
      row = document.createElement('tr');
      this.rows.set(turn.n, row);
      this.tbody.prepend(row);
    }
    const cells = [String(turn.n), fmtMs(turn.firstAudioMs), fmtMs(turn.fromSpeechEndMs), fmtMs(turn.serverFirstAudioMs),
      ...costCells(turn.cost)];
    row.replaceChildren(...cells.map((t) => Object.assign(document.createElement('td'), { textContent: t })));
    const cpu = turn.cost ? Object.entries(turn.cost.cpu_s ?? {})
      .map(([s, v]) => `${STAGE_NAMES[s] ?? s} ${v.toFixed(3)} s`).join(', ') : '';
    if (turn.server || turn.cost) row.title = [cpu && `CPU: ${cpu}`, turn.server && JSON.stringify(turn.server)]
      .filter(Boolean).join('\n');
  }
}
