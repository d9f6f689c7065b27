// The bargein page: wires the microphone, the speakers, the camera and the conversation view to one OpenAI
// Realtime session. Protocol handling lives here; audio, camera, transport (WebRTC or WebSocket) and view details
// live in their modules.

import { AudioEngine } from './audio.js';
import { Camera } from './camera.js';
import { pollHealth } from './health.js';
import { base64ToBytes, bytesToBase64 } from './realtime.js';
import { SessionConfig } from './session-config.js';
import { ConversationView } from './transcript.js';
import { openTransport, preferredTransport, transportLabel } from './transport.js';
import { TurnLog } from './turns.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const PREBUFFER_MS = Number(params.get('prebuffer') ?? 60);
const FRAME_MS = 20;
const MAX_SOCKET_BACKLOG = 1 << 20; // bytes; beyond this the network is not keeping up and frames are dropped

const view = new ConversationView($('log'));
const turns = new TurnLog($('turns').querySelector('tbody'));
const ui = {
  conn: $('conn-state'),
  ready: $('server-ready'),
  agent: $('agent-state'),
  errors: $('errors'),
  playback: $('playback-info'),
  transport: $('transport'),
};

// Everything the browser test reads, in one place (window.bargeinTest).
const test = {
  state: 'idle',
  sessionId: null,
  transport: null, // 'WebRTC' or 'WebSocket' once a session is opening
  fallbackReason: null, // why WebRTC was not used, when the page fell back to the WebSocket
  rtcStats: () => client?.stats?.() ?? null, // the reply track's receive statistics over WebRTC
  session: null,
  samplesPlayed: 0,
  playedByItem: {},
  receivedMsByItem: {},
  underruns: 0,
  lastTruncate: null,
  truncates: [],
  truncatedAcks: [],
  heardByServer: {}, // item_id -> the words the server kept of an item it cut itself
  clears: 0,
  speechStarted: 0,
  framesSent: 0,
  framesDropped: 0,
  imagesSent: 0,
  sceneNotes: [],
  errors: [],
  turns: turns.turns,
  events: {},
  bargeinEvents: [],
  get transcripts() {
    return view.snapshot();
  },
};
window.bargeinTest = test;

let client = null;
let audio = null;
const cutItems = new Set(); // agent items cut by barge-in: late audio for them is dropped
const liveItems = new Set(); // agent items with audio received and not yet played to the end
const itemResponse = new Map(); // item_id -> response_id
const liveResponses = new Set(); // responses created and not done: the server may still pause or resume them
let turnMode = 'normal'; // bargein.turn.mode: in 'confirm' the server lets short speech over a live reply go
let cutDeferred = false; // speech began over a live reply in confirm mode: cut only if the server pauses it

function setConn(state, text) {
  test.state = state;
  ui.conn.dataset.state = state;
  ui.conn.textContent = text ?? state;
  const live = state === 'connecting' || state === 'open' || state === 'connected';
  $('connect').disabled = live;
  $('disconnect').disabled = !live;
  $('mute').disabled = !live;
}

function setAgent(state) {
  ui.agent.dataset.state = state;
  ui.agent.textContent = `agent ${state}`;
}

function showError(source, err) {
  const e = typeof err === 'object' && err !== null ? err : { message: String(err) };
  const entry = { source, type: e.type ?? null, code: e.code ?? null, message: e.message ?? String(err),
    param: e.param ?? null, event_id: e.event_id ?? null, at: new Date().toISOString() };
  test.errors.push(entry);
  const li = document.createElement('li');
  const where = [entry.source, entry.type, entry.code].filter(Boolean).join(' / ');
  const param = entry.param ? ` (param ${entry.param})` : '';
  li.textContent = `${entry.at.slice(11, 19)} ${where}: ${entry.message}${param}`;
  ui.errors.prepend(li);
}

// ---- barge-in ----------------------------------------------------------------------------------------------

async function bargeIn() {
  test.speechStarted++;
  if (!audio) return;
  // Cut now, before the worklet answers: audio arriving during the round trip must not slip into the buffer.
  for (const itemId of liveItems) cutItems.add(itemId);
  liveItems.clear();
  const report = await audio.clear();
  test.clears++;
  for (const it of report.items) {
    // Only an item that was still playing or waiting to play was cut; one that finished was heard in full.
    if (it.unplayedMs <= 0 && it.ended) continue;
    cutItems.add(it.itemId);
    const audioEndMs = Math.floor(it.playedMs);
    const sent = client?.send({ type: 'conversation.item.truncate', item_id: it.itemId, content_index: 0,
      audio_end_ms: audioEndMs });
    const record = { item_id: it.itemId, audio_end_ms: audioEndMs, played24k: it.played24k,
      unplayed_ms: it.unplayedMs, received_ms: test.receivedMsByItem[it.itemId] ?? 0, sent: Boolean(sent),
      at: performance.now() };
    test.lastTruncate = record;
    test.truncates.push(record);
    view.agentCut(it.itemId, audioEndMs);
    setAgent('interrupted');
  }
}

// ---- server events -----------------------------------------------------------------------------------------

// The conversation language: the select, or ?lang=zh; empty leaves the server's default.
if (params.get('lang')) $('language').value = params.get('lang');

const config = new SessionConfig($('language'));

// A change during a session applies from the next turn on.
$('language').addEventListener('change', () => client?.send(config.languageUpdate()));

function onEvent(ev) {
  const type = ev.type ?? '?';
  test.events[type] = (test.events[type] ?? 0) + 1;
  if (type.startsWith('bargein.')) {
    test.bargeinEvents.push(ev);
    if (type === 'bargein.turn.metrics') {
      turns.metrics(ev);
      if (ev.image_tokens) $('image-tokens').textContent = `the last turn sent ${ev.image_tokens} image tokens`;
    }
    if (type === 'bargein.turn.cost') turns.cost(ev);
    if (type === 'bargein.see.note') {
      test.sceneNotes.push(ev.note);
      $('scene-note').textContent = `what the agent sees: ${ev.note}`;
    }
    if (type === 'bargein.tool.call') view.tool(ev.call_id, ev.name, ev.arguments, ev.output);
    if (type === 'bargein.turn.mode') turnMode = ev.mode ?? 'normal';
    if (type === 'bargein.reply.paused' && cutDeferred) {
      // the speech lasted long enough to interrupt: cut now, where playback has got to
      cutDeferred = false;
      bargeIn().catch((err) => showError('client', err));
    }
    if (type === 'bargein.reply.resumed') {
      // A cough or a backchannel paused the reply; it goes on from exactly where playback stopped.
      cutItems.delete(ev.item_id);
      test.receivedMsByItem[ev.item_id] = ev.audio_start_ms;
      audio?.seek(ev.item_id, ev.audio_start_ms);
      view.agentResumed(ev.item_id, ev.audio_start_ms);
      setAgent('speaking');
    }
    return;
  }
  switch (type) {
    case 'session.created':
      config.created(ev.session);
      test.sessionId = ev.session?.id ?? null;
      test.session = ev.session ?? null;
      setConn('connected', 'connected');
      break;
    case 'session.updated':
      test.session = ev.session ?? null;
      break;
    case 'error':
      showError('server', { ...ev.error, event_id: ev.error?.event_id });
      break;
    case 'input_audio_buffer.speech_started':
      if (ev.item_id) view.userSpeaking(ev.item_id);
      setAgent('listening');
      if (turnMode === 'confirm' && liveResponses.size > 0) {
        // The storm guard: speech must last before it may interrupt, and short speech lets the reply go on
        // with no bargein.reply.resumed to follow. Cutting here would silence the rest of the reply for a cough.
        cutDeferred = true;
        break;
      }
      bargeIn().catch((err) => showError('client', err));
      break;
    case 'input_audio_buffer.speech_stopped':
      turns.speechStopped(ev);
      setAgent('thinking');
      break;
    case 'conversation.item.input_audio_transcription.delta':
      view.userDelta(ev.item_id, ev.delta ?? '');
      break;
    case 'conversation.item.input_audio_transcription.completed':
      if (ev.transcript) view.userFinal(ev.item_id, ev.transcript);
      else view.userDiscard(ev.item_id);
      break;
    case 'conversation.item.input_audio_transcription.failed':
      showError('transcription', ev.error ?? { message: 'transcription failed' });
      break;
    case 'response.created':
      if (ev.response?.id) liveResponses.add(ev.response.id);
      turns.responseCreated(ev.response?.id);
      break;
    case 'response.output_item.added':
      if (ev.item?.id) itemResponse.set(ev.item.id, ev.response_id);
      break;
    case 'response.output_audio.delta': {
      if (cutItems.has(ev.item_id)) break; // stale audio of a cut reply must never play
      const bytes = base64ToBytes(ev.delta ?? '');
      audioArrived(ev.item_id, (bytes.byteLength / 2 / 24000) * 1000);
      audio?.play(ev.item_id, bytes);
      break;
    }
    case 'response.output_audio.done':
      // A cut item's tail must not play: flushing the resampler would queue (and play) more of it.
      if (!cutItems.has(ev.item_id)) audio?.end(ev.item_id);
      break;
    case 'response.output_audio_transcript.delta':
    case 'response.output_text.delta':
      view.agentText(ev.item_id, ev.delta ?? '');
      break;
    case 'response.output_audio_transcript.done':
    case 'response.output_text.done':
      view.agentDone(ev.item_id);
      break;
    case 'conversation.item.deleted':
      // noise (a cough, a backchannel) leaves the conversation: it was never addressed to the agent
      view.userDiscard(ev.item_id);
      break;
    case 'conversation.item.truncated':
      test.truncatedAcks.push({ item_id: ev.item_id, audio_end_ms: ev.audio_end_ms });
      view.agentCut(ev.item_id, ev.audio_end_ms);
      // The server cut it itself (over WebRTC it knows what was played): ask which words it kept.
      if (!test.truncates.some((t) => t.item_id === ev.item_id)) {
        client?.send({ type: 'conversation.item.retrieve', item_id: ev.item_id });
      }
      break;
    case 'conversation.item.retrieved': {
      const part = ev.item?.content?.find((c) => typeof c.transcript === 'string');
      if (ev.item?.role !== 'assistant' || !part) break;
      test.heardByServer[ev.item.id] = part.transcript;
      view.agentHeard(ev.item.id, part.transcript);
      break;
    }
    case 'response.done': {
      const r = ev.response ?? {};
      liveResponses.delete(r.id);
      if (liveResponses.size === 0) cutDeferred = false;
      if (r.status === 'failed') showError('response', r.status_details?.error ?? { message: 'response failed' });
      break;
    }
    default:
      break;
  }
}

/** `ms` of the agent item's audio reached the page (a delta, or the reply track over WebRTC). */
function audioArrived(itemId, ms) {
  liveItems.add(itemId);
  test.receivedMsByItem[itemId] = (test.receivedMsByItem[itemId] ?? 0) + ms;
  view.agentAudio(itemId, ms);
}

// The playback worklet's reports, or the same reports estimated from the server's output_audio_buffer events.
function onPlayback(msg) {
  if (msg.type === 'received') {
    audioArrived(msg.itemId, msg.ms);
  } else if (msg.type === 'cursor') {
    test.samplesPlayed = msg.totalPlayed24k;
    test.playedByItem = msg.items;
    test.underruns = msg.underruns;
    for (const [itemId, n] of Object.entries(msg.items)) view.agentPlayed(itemId, (n / 24000) * 1000);
    if (msg.state === 'playing') setAgent('speaking');
    else if (ui.agent.dataset.state === 'speaking') setAgent('idle');
    ui.playback.textContent = msg.transport === 'webrtc' ? `playback ${msg.state} (reply track)`
      : `playback ${msg.state}, buffered ${Math.round(msg.bufferedMs)} ms, underruns ${msg.underruns}, ` +
        `output ${audio?.sampleRate ?? 0} Hz`;
  } else if (msg.type === 'started') {
    if (msg.at !== undefined) turns.audible(msg.itemId, msg.at);
    else if (audio) turns.audible(msg.itemId, audio.contextToPerf(msg.contextTime));
  } else if (msg.type === 'drained') {
    liveItems.delete(msg.itemId);
  }
}

// ---- microphone --------------------------------------------------------------------------------------------

function onMicFrame(pcm, peak) {
  $('mic-level').value = peak;
  if (!client?.open) return;
  if (!client.carriesAudio) {
    turns.frameSent(FRAME_MS); // the track carries this frame: the log still maps stream time to the clock
    return;
  }
  if (client.buffered > MAX_SOCKET_BACKLOG) {
    test.framesDropped++;
    return;
  }
  client.send({ type: 'input_audio_buffer.append', audio: bytesToBase64(pcm) });
  turns.frameSent(FRAME_MS);
  test.framesSent++;
}

// ---- connection --------------------------------------------------------------------------------------------

let attempt = 0; // bumped by Disconnect: a connection still starting its audio gives up

function muted() {
  return $('mute').getAttribute('aria-pressed') === 'true';
}

/** The session's audio is over: microphone off, audio graph closed, live indicators back at rest. */
function stopAudio() {
  audio?.stop();
  audio = null;
  $('mic-level').value = 0;
  setAgent('idle');
}

async function connect(ev) {
  ev?.preventDefault();
  const mine = ++attempt;
  setConn('connecting', 'connecting…');
  turns.reset();
  config.reset();
  cutItems.clear();
  liveItems.clear();
  liveResponses.clear();
  turnMode = 'normal';
  cutDeferred = false;
  test.fallbackReason = null;
  // The AudioContext is created inside the click handler: browsers only let a user gesture start audio.
  const engine = new AudioEngine({ onFrame: onMicFrame, onPlayback });
  audio = engine;
  let micError = null;
  try {
    await engine.start({ prebufferMs: PREBUFFER_MS });
  } catch (err) {
    micError = err;
  }
  if (mine !== attempt) {
    engine.stop(); // Disconnect was pressed while the microphone was being opened
    return;
  }
  // Mute may have been pressed before the microphone existed, or in an earlier session: the button is the truth.
  engine.setMuted(muted());
  if (micError) {
    showError('microphone', micError);
    if (!engine.playback) {
      stopAudio();
      setConn('failed', 'audio failed');
      return;
    }
  }
  const mic = engine.micStream;
  try {
    await openTransport({
      prefer: preferredTransport(params),
      apiKey: $('api-key').value.trim(),
      model: $('model').value.trim(),
      micStream: mic,
      handlers: { onEvent, onState: onTransportState, onPlayback, audioElement: $('reply-audio') },
      onAttempt: (c) => {
        client = c;
        showTransport();
      },
      onFallback: (reason) => {
        test.fallbackReason = reason;
        showTransport();
      },
    });
  } catch (err) {
    // Disconnect pressed while the call was being placed, or a refusal (a wrong key): no fallback.
    if (client?.closing) onTransportState('closed', { byClient: true });
    else onTransportState('closed', { code: err.status ?? null, reason: err.message ?? String(err), source: 'webrtc' });
  }
}

function showTransport() {
  test.transport = client?.name ?? null;
  ui.transport.textContent = transportLabel(client, test.fallbackReason);
  ui.transport.dataset.state = client?.name === 'WebRTC' ? 'connected' : 'fallback';
  ui.transport.title = test.fallbackReason ? `WebRTC failed: ${test.fallbackReason}` : '';
}

function onTransportState(state, detail) {
  if (state === 'open') {
    setConn('open', 'open');
    client.send(config.sessionUpdate());
  } else if (state === 'closed') {
    if (detail.source === 'webrtc') {
      showError('webrtc', { code: detail.code, message: detail.reason });
    } else if (detail.code !== 1000 && !detail.byClient) {
      // 1006 without a reason is what a browser reports when the server refused the handshake.
      const refused = detail.code === 1006 && !detail.reason;
      const hint = refused ? ' (refused or dropped: check the API key and the server log)' : '';
      const message = detail.code === null ? `connection closed: ${detail.reason}`
        : `connection closed (${detail.code}) ${detail.reason}${hint}`;
      showError(client?.name === 'WebRTC' ? 'webrtc' : 'socket', { code: detail.code, message });
    }
    const closedText = detail.code === null || detail.code === undefined ? 'closed' : `closed ${detail.code}`;
    setConn('closed', detail.byClient ? 'disconnected' : closedText);
    stopAudio();
  } else if (state === 'failed') {
    // The socket could not even be created (a key the browser refuses as a subprotocol): nothing will close
    // it later, so the microphone opened for it stops now.
    showError('socket', detail);
    stopAudio();
    setConn('failed', 'failed');
  } else {
    setConn(state);
  }
}

// A backend that mints ephemeral client secrets (POST /v1/realtime/client_secrets) can send the browser here
// with `#client_secret=ek_...`: the secret fills the key field and leaves the address bar (it opens one session).
const fromHash = new URLSearchParams(location.hash.slice(1)).get('client_secret');
if (fromHash) {
  $('api-key').value = fromHash;
  history.replaceState(null, '', location.pathname + location.search);
}

$('connect-form').addEventListener('submit', connect);
$('disconnect').addEventListener('click', () => {
  if (client?.active) {
    client.close(); // its close event stops the audio
    return;
  }
  // Still opening the microphone (its prompt may be up): the attempt is abandoned before any connection exists.
  attempt++;
  stopAudio();
  setConn('idle', 'disconnected');
});
$('mute').addEventListener('click', () => {
  const mute = !muted();
  $('mute').setAttribute('aria-pressed', String(mute));
  $('mute').textContent = mute ? 'Unmute' : 'Mute';
  audio?.setMuted(mute);
});

// ---- camera ------------------------------------------------------------------------------------------------

// Frames stream as bargein.camera.frame events (about one a second): the server samples them (the newest at each
// turn, near-duplicates dropped), reads a scene note from them and never adds them to the conversation.
const camera = new Camera($('preview'), {
  everyMs: Number(params.get('frame_ms') ?? 1000),
  onFrame: (dataUrl) => {
    const info = `last frame ${Math.round((dataUrl.length * 3) / 4 / 1024)} KiB`;
    if ($('send-frames').checked && client?.open) {
      client.send({ type: 'bargein.camera.frame', image_url: dataUrl });
      test.imagesSent++;
      $('camera-info').textContent = `${info}, ${test.imagesSent} sent`;
    } else {
      $('camera-info').textContent = `${info} (not sent)`;
    }
  },
});
// The button shows what the user asked for: pressed again while the camera is still being granted, it turns it off.
let cameraWanted = false;
let cameraClicks = 0;
function showCamera() {
  $('camera').setAttribute('aria-pressed', String(cameraWanted));
  $('camera').textContent = cameraWanted ? 'Camera off' : 'Camera on';
}
$('camera').addEventListener('click', async () => {
  cameraWanted = !cameraWanted;
  const click = ++cameraClicks;
  showCamera();
  if (!cameraWanted) {
    camera.stop();
    return;
  }
  try {
    await camera.start();
  } catch (err) {
    showError('camera', err);
    if (click !== cameraClicks) return; // a later click decides
    camera.stop();
    cameraWanted = false;
    showCamera();
  }
});

setConn('idle', 'disconnected');
pollHealth(ui.ready);
