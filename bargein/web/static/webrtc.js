// A small OpenAI Realtime (GA) WebRTC client for the browser: the same events as the WebSocket, one JSON event per
// message on the data channel `oai-events`; the microphone goes up as an Opus track and the reply comes back as one,
// played by an <audio> element (so the browser's echo canceller hears what the agent says).
//
// The offer goes to POST /v1/realtime/calls (the answer carries the server's host candidates: no trickle). Over
// WebRTC the server knows what it played, so the page sends no playback cursor and no truncate: the server cuts
// the reply itself and says so with `output_audio_buffer.cleared` and `conversation.item.truncated`. The page's own
// cursor (remote-playback.js) follows what the server says it queued on the track (`bargein.reply.audio`).

import { RemotePlayback } from './remote-playback.js';

const CONNECT_TIMEOUT_MS = 5000; // from the offer to an open data channel: on a working path it takes far less

/** True when this browser can try WebRTC at all. */
export function webrtcAvailable() {
  return typeof RTCPeerConnection === 'function';
}

/** URL of the calls endpoint on the page's own origin. */
export function callsUrl(model) {
  const url = new URL('/v1/realtime/calls', location.href);
  if (model) url.searchParams.set('model', model);
  url.searchParams.set('bargein_events', '1'); // the page shows listening segments and turn metrics
  return url.toString();
}

/** An attempt that failed before the call was up. `fallback`: the WebSocket may still work (not a refusal). */
export class CallFailed extends Error {
  constructor(message, { fallback = true, status = null } = {}) {
    super(message);
    this.fallback = fallback;
    this.status = status;
  }
}

/**
 * One WebRTC call. `onEvent(event)` receives every parsed server event, `onState(state, detail)` the call's state
 * once it is up (open | closed), and `onPlayback(msg)` the reply's playback as the page's worklet would report it.
 */
export class WebRtcClient {
  constructor({ onEvent, onState, onPlayback, audioElement }) {
    this.name = 'WebRTC';
    this.carriesAudio = false; // audio rides the media tracks, not the events
    this.onEvent = onEvent;
    this.onState = onState;
    this.audioElement = audioElement;
    this.playback = new RemotePlayback(onPlayback, () => this.playoutMs);
    this.playoutMs = 0; // the reply track's jitter buffer delay, from the receive statistics once a second
    this.jitterSeen = null;
    this.statsTimer = null;
    this.pc = null;
    this.channel = null;
    this.callUrl = null;
    this.authorization = {};
    this.sentBytes = 0;
    this.eventSeq = 0;
    this.closing = false;
    this.answered = false; // the server answered the offer (and spent a client secret on it)
    this.abort = null;
  }

  /** Opens the call with the microphone's track; resolves once events can flow, throws CallFailed otherwise. */
  async connect(apiKey, model, micStream) {
    this.authorization = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
    const pc = new RTCPeerConnection();
    this.pc = pc;
    const channel = pc.createDataChannel('oai-events');
    this.channel = channel;
    const track = micStream?.getAudioTracks()[0];
    if (track) pc.addTransceiver(track, { direction: 'sendrecv' });
    else pc.addTransceiver('audio', { direction: 'sendrecv' }); // no microphone: the reply still plays
    pc.ontrack = (e) => this.playRemote(e.streams[0] ?? new MediaStream([e.track]));
    try {
      await this.withTimeout(this.negotiate(pc, model), channel);
    } catch (err) {
      this.teardown();
      const failed = err instanceof CallFailed ? err : new CallFailed(String(err?.message ?? err));
      // An answered call spent its one-session client secret: the WebSocket would be refused with it.
      if (failed.fallback && this.answered && apiKey?.startsWith('ek_')) {
        throw new CallFailed(`${failed.message}; the call spent the client secret, so the WebSocket cannot ` +
          'use it: get a new one', { fallback: false });
      }
      throw failed;
    } finally {
      this.abort = null;
    }
    channel.onmessage = (msg) => this.receive(msg.data);
    channel.onclose = () => this.ended('the call ended');
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === 'failed') this.ended('the network path failed (ICE)');
    };
    this.statsTimer = setInterval(() => this.measurePlayout().catch(() => {}), 1000);
    this.onState('open', 'webrtc');
  }

  /** The jitter buffer's mean delay over the last second (what the sound waits after its packet arrived). */
  async measurePlayout() {
    const s = await this.stats();
    if (!s || s.jitterBufferEmittedCount === undefined) return;
    const last = this.jitterSeen;
    this.jitterSeen = s;
    const emitted = last ? s.jitterBufferEmittedCount - last.jitterBufferEmittedCount : 0;
    if (emitted > 0) this.playoutMs = (1000 * (s.jitterBufferDelay - last.jitterBufferDelay)) / emitted;
  }

  /** Offer, POST, answer. */
  async negotiate(pc, model) {
    await pc.setLocalDescription(await pc.createOffer());
    let response;
    try {
      response = await fetch(callsUrl(model), {
        method: 'POST',
        headers: { 'Content-Type': 'application/sdp', ...this.authorization },
        body: pc.localDescription.sdp,
      });
    } catch (err) {
      throw new CallFailed(`the call could not be placed: ${err.message ?? err}`);
    }
    if (!response.ok) {
      const reason = (await response.text().catch(() => '')).slice(0, 300);
      // A refused key is refused on the WebSocket too: say so instead of trying again there.
      const refused = response.status === 401 || response.status === 403;
      throw new CallFailed(`call refused (${response.status}) ${reason}`.trim(),
        { fallback: !refused, status: response.status });
    }
    this.answered = true;
    const location = response.headers.get('Location');
    if (location) this.callUrl = new URL(location, window.location.href).toString();
    await pc.setRemoteDescription({ type: 'answer', sdp: await response.text() });
  }

  /** Waits for `work` and then the data channel, within CONNECT_TIMEOUT_MS; close() ends the wait at once. */
  withTimeout(work, channel) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new CallFailed(
        `no connection within ${CONNECT_TIMEOUT_MS / 1000} s (ICE state ${this.pc?.iceConnectionState})`)),
      CONNECT_TIMEOUT_MS);
      const done = (fn) => (v) => { clearTimeout(timer); fn(v); };
      this.abort = done(() => reject(new CallFailed('disconnected while connecting', { fallback: false })));
      channel.onopen = done(resolve);
      work.catch(done(reject));
    });
  }

  playRemote(stream) {
    if (!this.audioElement) return;
    this.audioElement.srcObject = stream;
    this.audioElement.play?.().catch(() => {}); // autoplay may wait for the user's next click
  }

  receive(data) {
    if (typeof data !== 'string') return;
    let event;
    try {
      event = JSON.parse(data);
    } catch {
      this.onEvent({ type: 'error', error: { type: 'client_error', message: 'unparseable server message' } });
      return;
    }
    this.playback.observe(event);
    this.onEvent(event);
  }

  get open() {
    return this.channel !== null && this.channel.readyState === 'open';
  }

  /** A call exists (connecting or up): Disconnect ends it. */
  get active() {
    return this.pc !== null;
  }

  /** The reply track's receive statistics (packets, audio energy), for the test hook and the playback line. */
  async stats() {
    if (!this.pc) return null;
    for (const s of (await this.pc.getStats()).values()) {
      if (s.type === 'inbound-rtp' && s.kind === 'audio') {
        return { packetsReceived: s.packetsReceived, packetsLost: s.packetsLost, jitter: s.jitter,
          totalAudioEnergy: s.totalAudioEnergy ?? 0, totalSamplesReceived: s.totalSamplesReceived ?? 0,
          jitterBufferDelay: s.jitterBufferDelay, jitterBufferEmittedCount: s.jitterBufferEmittedCount };
      }
    }
    return null;
  }

  /** Bytes queued on the data channel but not yet sent (backpressure signal). */
  get buffered() {
    return this.channel ? this.channel.bufferedAmount : 0;
  }

  /** Sends one client event; adds an `event_id` so server errors can point back at it. */
  send(event) {
    if (!this.open) return false;
    const withId = { event_id: `evt_web_${++this.eventSeq}`, ...event };
    const text = JSON.stringify(withId);
    this.sentBytes += text.length;
    this.channel.send(text);
    return withId;
  }

  /** The call is over (server hung up, path lost): reported once, as the WebSocket reports its close. */
  ended(reason) {
    if (!this.pc) return;
    this.teardown();
    this.onState('closed', { code: null, reason, byClient: this.closing });
  }

  teardown() {
    clearInterval(this.statsTimer);
    this.statsTimer = null;
    this.playback.reset();
    if (this.channel) this.channel.onclose = null;
    this.channel?.close();
    if (this.pc) this.pc.onconnectionstatechange = null;
    this.pc?.close();
    this.pc = null;
    this.channel = null;
    if (this.audioElement) this.audioElement.srcObject = null;
  }

  close() {
    this.closing = true;
    if (this.abort) {
      this.abort();
      return;
    }
    if (this.callUrl) {
      // Closing the peer connection ends the call too; the hangup tells the server at once.
      fetch(`${this.callUrl}/hangup`, { method: 'POST', headers: this.authorization, keepalive: true })
        .catch(() => {});
    }
    this.ended('disconnected');
  }
}
