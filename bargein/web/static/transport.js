// Which transport a session rides: WebRTC by default, the WebSocket when WebRTC cannot be had.
//
// Both clients offer the same face to the page (send, open, buffered, close, onEvent/onState) so nothing above this
// module cares which one it got; `carriesAudio` says whether the microphone and the reply travel as events (the
// WebSocket) or as media tracks (WebRTC). `?transport=websocket` (or `webrtc`) in the page's address pins one.

import { RealtimeClient } from './realtime.js';
import { CallFailed, WebRtcClient, webrtcAvailable } from './webrtc.js';

/** The transport the page's address asks for: 'webrtc' (the default, with fallback) or 'websocket'. */
export function preferredTransport(params) {
  return params.get('transport') === 'websocket' ? 'websocket' : 'webrtc';
}

/**
 * Opens a session and returns its client. Tries WebRTC first unless `prefer` is 'websocket'; when the call cannot
 * be placed (no RTCPeerConnection, the POST fails, no connection within a few seconds) it opens the WebSocket and
 * tells `onFallback(reason)`. A refused key or a Disconnect while connecting throws a CallFailed instead.
 */
export async function openTransport({ prefer, apiKey, model, micStream, handlers, onAttempt, onFallback }) {
  if (prefer === 'webrtc') {
    if (!webrtcAvailable()) {
      onFallback('this browser has no WebRTC');
    } else {
      const rtc = new WebRtcClient(handlers);
      onAttempt(rtc);
      try {
        await rtc.connect(apiKey, model, micStream);
        return rtc;
      } catch (err) {
        if (!(err instanceof CallFailed) || !err.fallback) throw err;
        onFallback(err.message);
      }
    }
  }
  const ws = new RealtimeClient(handlers);
  onAttempt(ws);
  ws.connect(apiKey, model);
  return ws;
}
