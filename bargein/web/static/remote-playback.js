// The reply's playback over WebRTC, as the page's playback worklet reports it over the WebSocket.
//
// The reply arrives as a media track that the browser plays at once, so the page has no cursor of its own. The server
// says what it put on the track and when: `bargein.reply.audio` for each stretch of an item it queued (the audio
// delta without its audio, in order with the transcript deltas), and `output_audio_buffer.started` / `.stopped` /
// `.cleared` bracketing what it sent. The track plays what is queued in real time from `started`, and silence once
// the queue is empty, so the cursor runs in real time but never past the audio queued; the caller hears it the jitter
// buffer's delay later. This turns those events into the worklet's messages (`received`, `started`, `cursor`,
// `drained`), so the conversation view and the turn log work unchanged. The positions are an estimate (a few tens
// of ms); the server's `conversation.item.truncated` is the truth at a cut.

const TICK_MS = 50;
const RATE = 24000; // the worklet reports positions in 24 kHz samples
const KEEP = 64; // replies remembered: older ones are long heard and never reported again

export class RemotePlayback {
  /**
   * @param {(msg: object) => void} onPlayback receives the worklet-shaped messages
   * @param {() => number} playoutMs how long arrived audio waits in the jitter buffer before it sounds
   */
  constructor(onPlayback, playoutMs = () => 0) {
    this.onPlayback = onPlayback ?? (() => {});
    this.playoutMs = playoutMs;
    this.itemOfResponse = new Map(); // response_id -> its audio (message) item
    this.playedMs = {}; // item_id -> ms of it the track has sent
    this.queuedMs = {}; // item_id -> ms of it the server queued on the track (bargein.reply.audio)
    this.started = new Set(); // items whose first audio was reported
    this.totalMs = 0;
    this.current = null; // {itemId, responseId, since} while the server is sending a reply
    this.timer = null;
  }

  /** Sees every server event before the page does. */
  observe(ev) {
    switch (ev.type) {
      case 'response.output_item.added':
        if (ev.item?.type === 'message' && ev.item.id) this.itemOfResponse.set(ev.response_id, ev.item.id);
        break;
      case 'bargein.reply.audio':
        this.queued(ev);
        break;
      case 'output_audio_buffer.started':
        this.start(ev.response_id);
        break;
      case 'bargein.reply.resumed':
        this.start(ev.response_id, ev.item_id, ev.audio_start_ms);
        break;
      case 'output_audio_buffer.stopped':
        this.stop(true);
        break;
      case 'output_audio_buffer.cleared':
      case 'bargein.reply.paused':
        this.stop(false);
        break;
      case 'conversation.item.truncated':
        this.playedMs[ev.item_id] = ev.audio_end_ms ?? this.playedMs[ev.item_id] ?? 0;
        this.report();
        break;
      default:
        break;
    }
  }

  /** A stretch of the item went on the track: it arrived, as an audio delta arrives over the WebSocket. */
  queued(ev) {
    if (!ev.item_id) return;
    if (ev.response_id && !this.itemOfResponse.has(ev.response_id)) this.itemOfResponse.set(ev.response_id, ev.item_id);
    if (this.current && this.itemId() === ev.item_id) this.tick(); // up to now the track had only what it had
    this.queuedMs[ev.item_id] = ev.audio_end_ms;
    const ms = ev.audio_end_ms - ev.audio_start_ms;
    if (ms > 0) this.onPlayback({ type: 'received', itemId: ev.item_id, ms });
  }

  start(responseId, itemId, fromMs) {
    this.stop(false);
    this.forgetOld();
    this.current = { responseId, itemId: itemId ?? null, since: performance.now() };
    if (fromMs !== undefined && itemId) {
      this.playedMs[itemId] = fromMs; // re-sent from the cut: the track's queue starts there again
      this.queuedMs[itemId] = fromMs;
    }
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.tick();
  }

  /** The reply's item: known from `response.output_item.added`, which may come after the audio started. */
  itemId() {
    const c = this.current;
    if (c && !c.itemId) c.itemId = this.itemOfResponse.get(c.responseId) ?? null;
    return c?.itemId ?? null;
  }

  tick() {
    const itemId = this.itemId();
    if (!itemId) return;
    const now = performance.now();
    const elapsed = now - this.current.since;
    this.current.since = now;
    const played = this.playedMs[itemId] ?? 0;
    // the track sends what is queued in real time, then silence: the cursor waits for the next audio
    const ms = Math.max(0, Math.min(elapsed, (this.queuedMs[itemId] ?? 0) - played));
    this.playedMs[itemId] = played + ms;
    if (ms > 0 && !this.started.has(itemId)) {
      this.started.add(itemId);
      this.onPlayback({ type: 'started', itemId, at: now - elapsed + this.playoutMs() }); // its first sample sounds
    }
    this.totalMs += ms;
    this.report();
  }

  stop(drained) {
    if (!this.current) return;
    this.tick();
    clearInterval(this.timer);
    this.timer = null;
    const itemId = this.itemId();
    this.current = null;
    this.report();
    if (drained && itemId) this.onPlayback({ type: 'drained', itemId });
  }

  forgetOld() {
    // queued holds every item the server queued, played only those that started: a reply cut before its first
    // frame went out is in the one alone
    for (const positions of [this.playedMs, this.queuedMs]) {
      const items = Object.keys(positions);
      for (const id of items.slice(0, Math.max(0, items.length - KEEP))) {
        delete this.playedMs[id];
        delete this.queuedMs[id];
        this.started.delete(id);
      }
    }
    const responses = [...this.itemOfResponse.keys()];
    for (const id of responses.slice(0, Math.max(0, responses.length - KEEP))) this.itemOfResponse.delete(id);
  }

  /** Each item's heard position: what the track sent, less the jitter buffer's delay for the one still sending. */
  report() {
    const playing = this.current ? this.itemId() : null;
    const lag = playing ? this.playoutMs() : 0;
    const items = {};
    for (const [id, ms] of Object.entries(this.playedMs)) {
      items[id] = Math.round((Math.max(0, id === playing ? ms - lag : ms) * RATE) / 1000);
    }
    this.onPlayback({ type: 'cursor', totalPlayed24k: Math.round((this.totalMs * RATE) / 1000), items,
      underruns: 0, bufferedMs: 0, state: this.current ? 'playing' : 'idle', transport: 'webrtc' });
  }

  reset() {
    clearInterval(this.timer);
    this.timer = null;
    this.current = null;
  }
}
