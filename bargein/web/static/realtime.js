// A small OpenAI Realtime (GA) WebSocket client for the browser.
//
// Browsers cannot set an Authorization header on a WebSocket, so the key travels as a subprotocol
// (`openai-insecure-api-key.<key>`), next to the `realtime` subprotocol the server expects. The key is only ever
// what the user typed into the page; nothing is embedded.

/** URL of the realtime endpoint on the page's own origin. */
export function realtimeUrl(model) {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const url = new URL(`${scheme}//${location.host}/v1/realtime`);
  if (model) url.searchParams.set('model', model);
  url.searchParams.set('bargein_events', '1'); // the page shows listening segments and turn metrics
  return url.toString();
}

/** Base64 of a byte buffer, in slices so long buffers do not overflow the argument list. */
export function bytesToBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = '';
  const slice = 0x8000;
  for (let i = 0; i < bytes.length; i += slice) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + slice));
  }
  return btoa(binary);
}

/** Bytes of a base64 string, as an ArrayBuffer. */
export function base64ToBytes(b64) {
  const binary = atob(b64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes.buffer;
}

/**
 * One WebSocket session. `onEvent(event)` receives every parsed server event, `onState(state, detail)` the
 * connection state: connecting | open | closed | failed.
 */
export class RealtimeClient {
  constructor({ onEvent, onState }) {
    this.name = 'WebSocket';
    this.carriesAudio = true; // the microphone and the reply travel as events (pcm16 in base64)
    this.onEvent = onEvent;
    this.onState = onState;
    this.ws = null;
    this.sentBytes = 0;
    this.eventSeq = 0;
  }

  connect(apiKey, model) {
    const protocols = ['realtime'];
    if (apiKey) protocols.push(`openai-insecure-api-key.${apiKey}`);
    this.onState('connecting');
    let ws;
    try {
      ws = new WebSocket(realtimeUrl(model), protocols);
    } catch (err) {
      this.onState('failed', String(err));
      return;
    }
    this.ws = ws;
    this.closing = false;
    ws.onopen = () => this.onState('open', ws.protocol);
    ws.onmessage = (msg) => {
      if (typeof msg.data !== 'string') return;
      let event;
      try {
        event = JSON.parse(msg.data);
      } catch {
        this.onEvent({ type: 'error', error: { type: 'client_error', message: 'unparseable server message' } });
        return;
      }
      this.onEvent(event);
    };
    ws.onerror = () => {
      // The browser hides the reason on purpose; the close event that follows carries the code.
    };
    ws.onclose = (e) => {
      if (this.ws === ws) this.ws = null;
      // byClient: close() was called (Disconnect); a socket closed while still connecting reports 1006, which
      // is no refusal to show.
      this.onState('closed', { code: e.code, reason: e.reason, wasClean: e.wasClean, byClient: this.closing });
    };
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  /** A socket exists (connecting or open): Disconnect closes it. */
  get active() {
    return this.ws !== null;
  }

  /** Bytes queued in the socket but not yet handed to the network (backpressure signal). */
  get buffered() {
    return this.ws ? this.ws.bufferedAmount : 0;
  }

  /** Sends one client event; adds an `event_id` so server errors can point back at it. */
  send(event) {
    if (!this.open) return false;
    const withId = { event_id: `evt_web_${++this.eventSeq}`, ...event };
    const text = JSON.stringify(withId);
    this.sentBytes += text.length;
    this.ws.send(text);
    return withId;
  }

  close() {
    if (!this.ws) return;
    this.closing = true;
    this.ws.close(1000, 'client closed');
  }
}
