// Playback processor: a jitter buffer for the agent's 24 kHz pcm16 audio, played at the AudioContext rate.
//
// It is the only place that knows how much of each item the listener actually heard, so it owns the playback
// cursor: samples played per item, reported to the page (`cursor`), the moment each item became audible
// (`started`, for the first-audio latency) and, on `clear`, the exact position where playback was cut (the page
// turns that into `conversation.item.truncate`).

import { StreamResampler } from './resampler.js';

const SOURCE_RATE = 24000;
const AUDIBLE = 0.01; // about -40 dBFS: the first sample above this counts as "first audio"
const REPORT_EVERY_S = 0.025;
const MAX_BUFFERED_S = 300; // bounded: a runaway server cannot grow the buffer without limit

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.prebuffer = Math.round(((opts.prebufferMs ?? 60) / 1000) * sampleRate);
    this.resampler = new StreamResampler(SOURCE_RATE, sampleRate);
    this.queue = []; // {itemId, data: Float32Array at sampleRate, offset}
    this.queued = 0; // samples in the queue, all items
    this.items = new Map(); // itemId -> {played, queued, ended, started}
    this.state = 'idle'; // idle | buffering | playing
    this.underruns = 0;
    this.dropped = 0;
    this.totalPlayed = 0;
    this.lastReport = 0;
    this.dirty = false;
    this.current = null; // item id of the sample most recently played
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  item(itemId) {
    let it = this.items.get(itemId);
    if (!it) {
      it = { played: 0, queued: 0, ended: false, started: false };
      this.items.set(itemId, it);
      // Keep the map small in long sessions: forget items that finished long ago.
      if (this.items.size > 64) {
        for (const [id, old] of this.items) {
          if (old.queued === 0 && id !== itemId) {
            this.items.delete(id);
            break;
          }
        }
      }
    }
    return it;
  }

  enqueue(itemId, data) {
    if (data.length === 0) return;
    if (this.queued + data.length > MAX_BUFFERED_S * sampleRate) {
      this.dropped += data.length;
      return;
    }
    this.queue.push({ itemId, data, offset: 0 });
    this.queued += data.length;
    this.item(itemId).queued += data.length;
    if (this.state === 'idle') this.state = 'buffering';
  }

  onMessage(msg) {
    switch (msg.type) {
      case 'audio': {
        const pcm = new Int16Array(msg.pcm);
        const f = new Float32Array(pcm.length);
        for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
        this.item(msg.itemId).ended = false;
        this.enqueue(msg.itemId, this.resampler.push(f));
        break;
      }
      case 'end': {
        // The item's audio is complete: release the resampler's held-back tail and let it play out without
        // waiting for the prebuffer to fill.
        this.enqueue(msg.itemId, this.resampler.flush());
        this.item(msg.itemId).ended = true;
        this.resampler.reset();
        break;
      }
      case 'clear': {
        const report = [];
        for (const [itemId, it] of this.items) {
          if (it.queued > 0 || itemId === this.current) {
            report.push({
              itemId,
              playedMs: (it.played / sampleRate) * 1000,
              played24k: Math.round((it.played * SOURCE_RATE) / sampleRate),
              unplayedMs: (it.queued / sampleRate) * 1000,
              ended: it.ended,
            });
          }
          it.queued = 0;
        }
        this.queue = [];
        this.queued = 0;
        this.resampler.reset();
        this.state = 'idle';
        this.port.postMessage({ type: 'cleared', reqId: msg.reqId, current: this.current, items: report });
        this.current = null;
        this.report(true);
        break;
      }
      case 'seek': {
        // The server resumed a paused reply from the cut point: this item's played audio restarts there.
        const it = this.item(msg.itemId);
        it.played = Math.round((msg.playedMs / 1000) * sampleRate);
        it.ended = false;
        break;
      }
      case 'config':
        if (typeof msg.prebufferMs === 'number') this.prebuffer = Math.round((msg.prebufferMs / 1000) * sampleRate);
        break;
      default:
        break;
    }
  }

  /** True when the buffered audio is enough to start (or the rest of an item is all that is coming). */
  ready() {
    if (this.queued >= this.prebuffer) return true;
    for (const seg of this.queue) if (this.items.get(seg.itemId)?.ended) return true;
    return false;
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    const ch0 = out[0];
    const n = ch0.length;
    if (this.state === 'buffering' && this.ready()) this.state = 'playing';
    if (this.state === 'playing') {
      let i = 0;
      while (i < n && this.queue.length > 0) {
        const seg = this.queue[0];
        const it = this.item(seg.itemId);
        const take = Math.min(n - i, seg.data.length - seg.offset);
        if (!it.started) {
          for (let k = 0; k < take; k++) {
            const s = seg.data[seg.offset + k];
            if (s > AUDIBLE || s < -AUDIBLE) {
              it.started = true;
              // currentTime is the context time of this quantum's first frame.
              this.port.postMessage({ type: 'started', itemId: seg.itemId, contextTime: currentTime + (i + k) / sampleRate });
              break;
            }
          }
        }
        ch0.set(seg.data.subarray(seg.offset, seg.offset + take), i);
        seg.offset += take;
        i += take;
        it.played += take;
        it.queued -= take;
        this.queued -= take;
        this.totalPlayed += take;
        this.current = seg.itemId;
        this.dirty = true;
        if (seg.offset >= seg.data.length) {
          this.queue.shift();
          if (it.ended && it.queued === 0) this.port.postMessage({ type: 'drained', itemId: seg.itemId });
        }
      }
      if (this.queue.length === 0) {
        // Ran dry. If the item was not finished, the network fell behind: count an underrun and re-buffer.
        const cur = this.current !== null ? this.items.get(this.current) : null;
        if (cur && !cur.ended) this.underruns++;
        this.state = cur && !cur.ended ? 'buffering' : 'idle';
        this.dirty = true;
      }
      if (i < n) ch0.fill(0, i);
    } else {
      ch0.fill(0);
    }
    for (let c = 1; c < out.length; c++) out[c].set(ch0);
    this.report(false);
    return true;
  }

  report(force) {
    if (!force && (!this.dirty || currentTime - this.lastReport < REPORT_EVERY_S)) return;
    this.lastReport = currentTime;
    this.dirty = false;
    const items = {};
    for (const [itemId, it] of this.items) items[itemId] = Math.round((it.played * SOURCE_RATE) / sampleRate);
    this.port.postMessage({
      type: 'cursor',
      contextTime: currentTime,
      state: this.state,
      current: this.current,
      items,
      bufferedMs: (this.queued / sampleRate) * 1000,
      totalPlayed24k: Math.round((this.totalPlayed * SOURCE_RATE) / sampleRate),
      underruns: this.underruns,
      dropped: this.dropped,
    });
  }
}

registerProcessor('bargein-playback', PlaybackProcessor);
