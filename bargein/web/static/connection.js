// One session's connection, from Connect to Disconnect or the server's close: the audio graph and microphone
// first (inside the click, as browsers require), then a transport (transport.js: WebRTC, else the WebSocket).
// The page reads `client` (send, open, carriesAudio) and `audio` (the AudioEngine) from here.

import { AudioEngine } from './audio.js';
import { openTransport } from './transport.js';

export class Connection {
  /**
   * @param {{status: import('./status.js').StatusBar, prefer: string, prebufferMs: number,
   *          fields: {apiKey: HTMLInputElement, model: HTMLInputElement, mute: HTMLElement,
   *                   micLevel: HTMLMeterElement, replyAudio: HTMLAudioElement},
   *          onFrame: Function, onPlayback: Function, onEvent: Function, onOpen: Function}} opts
   * `onOpen(client)` runs when events can flow (the page sends its session.update).
   */
  constructor(opts) {
    this.opts = opts;
    this.status = opts.status;
    this.client = null;
    this.audio = null;
    this.attempt = 0; // bumped by Disconnect: a connection still starting its audio gives up
  }

  get muted() {
    return this.opts.fields.mute.getAttribute('aria-pressed') === 'true';
  }

  /** The session's audio is over: microphone off, audio graph closed, live indicators back at rest. */
  stopAudio() {
    this.audio?.stop();
    this.audio = null;
    this.opts.fields.micLevel.value = 0;
    this.status.agent('idle');
  }

  async connect() {
    const mine = ++this.attempt;
    const { fields, onFrame, onPlayback, onEvent } = this.opts;
    this.status.conn('connecting', 'connecting…');
    this.status.transport(null, null);
    const engine = new AudioEngine({ onFrame, onPlayback });
    this.audio = engine;
    let micError = null;
    try {
      await engine.start({ prebufferMs: this.opts.prebufferMs });
    } catch (err) {
      micError = err;
    }
    if (mine !== this.attempt) {
      engine.stop(); // Disconnect was pressed while the microphone was being opened
      return;
    }
    // Mute may have been pressed before the microphone existed, or in an earlier session: the button is the truth.
    engine.setMuted(this.muted);
    if (micError) {
      this.status.error('microphone', micError);
      if (!engine.playback) {
        this.stopAudio();
        this.status.conn('failed', 'audio failed');
        return;
      }
    }
    let fallbackReason = null;
    try {
      await openTransport({
        prefer: this.opts.prefer,
        apiKey: fields.apiKey.value.trim(),
        model: fields.model.value.trim(),
        micStream: engine.micStream,
        handlers: { onEvent, onState: (s, d) => this.onState(s, d), onPlayback, audioElement: fields.replyAudio },
        onAttempt: (c) => {
          this.client = c;
          this.status.transport(c, fallbackReason);
        },
        onFallback: (reason) => {
          fallbackReason = reason;
        },
      });
    } catch (err) {
      // Disconnect pressed while the call was being placed, or a refusal (a wrong key): no fallback.
      if (this.client?.closing) this.onState('closed', { byClient: true });
      else this.onState('closed', { code: err.status ?? null, reason: err.message ?? String(err), source: 'webrtc' });
    }
  }

  onState(state, detail) {
    if (state === 'open') {
      this.status.conn('open', 'open');
      this.opts.onOpen(this.client);
    } else if (state === 'closed') {
      this.status.closed(detail, this.client?.name);
      this.stopAudio();
    } else if (state === 'failed') {
      // The socket could not even be created (a key the browser refuses as a subprotocol): nothing will close
      // it later, so the microphone opened for it stops now.
      this.status.error('socket', detail);
      this.stopAudio();
      this.status.conn('failed', 'failed');
    } else {
      this.status.conn(state);
    }
  }

  disconnect() {
    if (this.client?.active) {
      this.client.close(); // its close event stops the audio
      return;
    }
    // Still opening the microphone (its prompt may be up): the attempt is abandoned before any connection exists.
    this.attempt++;
    this.stopAudio();
    this.status.conn('idle', 'disconnected');
  }

  setMuted(mute) {
    this.audio?.setMuted(mute);
  }
}
