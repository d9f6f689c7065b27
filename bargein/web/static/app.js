// The bargein page: wires the microphone, the speakers, the camera and the conversation view to one OpenAI
// Realtime session. Protocol handling lives here; audio, camera, transport (WebRTC or WebSocket) and view details
// live in their modules.

import { Camera } from './camera.js';
import { Connection } from './connection.js';
import { pollHealth } from './health.js';
import { base64ToBytes, bytesToBase64 } from './realtime.js';
import { SessionConfig } from './session-config.js';
import { ConversationView } from './transcript.js';
import { StatusBar } from './status.js';
import { preferredTransport } from './transport.js';
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
  rtcStats: () => conn.client?.stats?.() ?? null, // the reply track's receive statistics over WebRTC
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
const status = new StatusBar({ conn: ui.conn, agent: ui.agent, transport: ui.transport, errors: ui.errors,
  connect: $('connect'), disconnect: $('disconnect'), mute: $('mute') }, test);

const cutItems = new Set(); // agent items cut by barge-in: late audio for them is dropped
const liveItems = new Set(); // agent items with audio received and not yet played to the end
const itemResponse = new Map(); // item_id -> response_id
const liveResponses = new Set(); // responses created and not done: the server may still pause or resume them
let turnMode = 'normal'; // bargein.turn.mode: in 'confirm' the server lets short speech over a live reply go
let cutDeferred = false; // speech began over a live reply in confirm mode: cut only if the server pauses it

// ---- barge-in ----------------------------------------------------------------------------------------------

async function bargeIn() {
  test.speechStarted++;
  if (!conn.audio) return;
  // Cut now, before the worklet answers: audio arriving during the round trip must not slip into the buffer.
  for (const itemId of liveItems) cutItems.add(itemId);
  liveItems.clear();
  const report = await conn.audio.clear();
  test.clears++;
  for (const it of report.items) {
    // Only an item that was still playing or waiting to play was cut; one that finished was heard in full.
    if (it.unplayedMs <= 0 && it.ended) continue;
    cutItems.add(it.itemId);
    const audioEndMs = Math.floor(it.playedMs);
    const sent = conn.client?.send({ type: 'conversation.item.truncate', item_id: it.itemId, content_index: 0,
      audio_end_ms: audioEndMs });
    const record = { item_id: it.itemId, audio_end_ms: audioEndMs, played24k: it.played24k,
      unplayed_ms: it.unplayedMs, received_ms: test.receivedMsByItem[it.itemId] ?? 0, sent: Boolean(sent),
      at: performance.now() };
    test.lastTruncate = record;
    test.truncates.push(record);
    view.agentCut(it.itemId, audioEndMs);
    status.agent('interrupted');
  }
}

// ---- server events -----------------------------------------------------------------------------------------

// The conversation language: the select, or ?lang=zh; empty leaves the server's default.
if (params.get('lang')) $('language').value = params.get('lang');

const config = new SessionConfig($('language'));

// A change during a session applies from the next turn on.
$('language').addEventListener('change', () => conn.client?.send(config.languageUpdate()));

function onEvent(ev) {
  const type = ev.type ?? '?';
  test.events[type] = (test.events[type] ?? 0) + 1;
  if (type.startsWith('bargein.')) {
    // bargein.reply.audio (WebRTC: a stretch of reply audio queued on the track) is remote-playback.js's, and
    // comes with every audio delta: counted, not kept
    if (type !== 'bargein.reply.audio') test.bargeinEvents.push(ev);
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
      bargeIn().catch((err) => status.error('client', err));
    }
    if (type === 'bargein.reply.resumed' && ev.item_id) {
      // A cough or a backchannel paused the reply; it goes on from exactly where playback stopped. (A reply
      // paused before its first words names no item: nothing of it was played, so there is nothing to seek.)
      cutItems.delete(ev.item_id);
      test.receivedMsByItem[ev.item_id] = ev.audio_start_ms;
      conn.audio?.seek(ev.item_id, ev.audio_start_ms);
      view.agentResumed(ev.item_id, ev.audio_start_ms);
      status.agent('speaking');
    }
    return;
  }
  switch (type) {
    case 'session.created':
      config.created(ev.session);
      test.sessionId = ev.session?.id ?? null;
      test.session = ev.session ?? null;
      status.conn('connected', 'connected');
      break;
    case 'session.updated':
      test.session = ev.session ?? null;
      break;
    case 'error':
      status.error('server', { ...ev.error, event_id: ev.error?.event_id });
      break;
    case 'input_audio_buffer.speech_started':
      if (ev.item_id) view.userSpeaking(ev.item_id);
      status.agent('listening');
      if (turnMode === 'confirm' && liveResponses.size > 0) {
        // The storm guard: speech must last before it may interrupt, and short speech lets the reply go on
        // with no bargein.reply.resumed to follow. Cutting here would silence the rest of the reply for a cough.
        cutDeferred = true;
        break;
      }
      bargeIn().catch((err) => status.error('client', err));
      break;
    case 'input_audio_buffer.speech_stopped':
      turns.speechStopped(ev);
      status.agent('thinking');
      break;
    case 'conversation.item.input_audio_transcription.delta':
      view.userDelta(ev.item_id, ev.delta ?? '');
      break;
    case 'conversation.item.input_audio_transcription.completed':
      if (ev.transcript) view.userFinal(ev.item_id, ev.transcript);
      else view.userDiscard(ev.item_id);
      break;
    case 'conversation.item.input_audio_transcription.failed':
      status.error('transcription', ev.error ?? { message: 'transcription failed' });
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
      conn.audio?.play(ev.item_id, bytes);
      break;
    }
    case 'response.output_audio.done':
      // A cut item's tail must not play: flushing the resampler would queue (and play) more of it.
      if (!cutItems.has(ev.item_id)) conn.audio?.end(ev.item_id);
      break;
    case 'response.output_audio_transcript.delta':
    case 'response.output_text.delta':
      view.agentText(ev.item_id, ev.delta ?? '');
      break;
    case 'response.output_audio_transcript.done':
    case 'response.output_text.done':
      view.agentDone(ev.item_id);
      break;
    case 'output_audio_buffer.cleared':
      status.agent('interrupted'); // the server emptied the reply track (WebRTC): the barge-in cut it
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
        conn.client?.send({ type: 'conversation.item.retrieve', item_id: ev.item_id });
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
      if (r.status === 'failed') status.error('response', r.status_details?.error ?? { message: 'response failed' });
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
    if (msg.state === 'playing') status.agent('speaking');
    else if (ui.agent.dataset.state === 'speaking') status.agent('idle');
    ui.playback.textContent = msg.transport === 'webrtc' ? `playback ${msg.state} (reply track)`
      : `playback ${msg.state}, buffered ${Math.round(msg.bufferedMs)} ms, underruns ${msg.underruns}, ` +
        `output ${conn.audio?.sampleRate ?? 0} Hz`;
  } else if (msg.type === 'started') {
    if (msg.at !== undefined) turns.audible(msg.itemId, msg.at);
    else if (conn.audio) turns.audible(msg.itemId, conn.audio.contextToPerf(msg.contextTime));
  } else if (msg.type === 'drained') {
    liveItems.delete(msg.itemId);
  }
}

// ---- microphone --------------------------------------------------------------------------------------------

function onMicFrame(pcm, peak) {
  $('mic-level').value = peak;
  if (!conn.client?.open) return;
  if (!conn.client.carriesAudio) {
    turns.frameSent(FRAME_MS); // the track carries this frame: the log still maps stream time to the clock
    return;
  }
  if (conn.client.buffered > MAX_SOCKET_BACKLOG) {
    test.framesDropped++;
    return;
  }
  conn.client.send({ type: 'input_audio_buffer.append', audio: bytesToBase64(pcm) });
  turns.frameSent(FRAME_MS);
  test.framesSent++;
}

// ---- connection --------------------------------------------------------------------------------------------

const conn = new Connection({
  status,
  prefer: preferredTransport(params),
  prebufferMs: PREBUFFER_MS,
  fields: { apiKey: $('api-key'), model: $('model'), mute: $('mute'), micLevel: $('mic-level'),
    replyAudio: $('reply-audio') },
  onFrame: onMicFrame,
  onPlayback,
  onEvent,
  onOpen: (client) => client.send(config.sessionUpdate()),
});

function connect(ev) {
  ev?.preventDefault();
  turns.reset();
  config.reset();
  cutItems.clear();
  liveItems.clear();
  liveResponses.clear();
  turnMode = 'normal';
  cutDeferred = false;
  conn.connect();
}

// A backend that mints ephemeral client secrets (POST /v1/realtime/client_secrets) can send the browser here
// with `#client_secret=ek_...`: the secret fills the key field and leaves the address bar (it opens one session).
const fromHash = new URLSearchParams(location.hash.slice(1)).get('client_secret');
if (fromHash) {
  $('api-key').value = fromHash;
  history.replaceState(null, '', location.pathname + location.search);
}

$('connect-form').addEventListener('submit', connect);
$('disconnect').addEventListener('click', () => conn.disconnect());
$('mute').addEventListener('click', () => {
  const mute = !conn.muted;
  $('mute').setAttribute('aria-pressed', String(mute));
  $('mute').textContent = mute ? 'Unmute' : 'Mute';
  conn.setMuted(mute);
});

// ---- camera ------------------------------------------------------------------------------------------------

// Frames stream as bargein.camera.frame events (about one a second): the server samples them (the newest at each
// turn, near-duplicates dropped), reads a scene note from them and never adds them to the conversation.
const camera = new Camera($('preview'), {
  everyMs: Number(params.get('frame_ms') ?? 1000),
  onFrame: (dataUrl) => {
    const info = `last frame ${Math.round((dataUrl.length * 3) / 4 / 1024)} KiB`;
    if ($('send-frames').checked && conn.client?.open) {
      conn.client.send({ type: 'bargein.camera.frame', image_url: dataUrl });
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
    status.error('camera', err);
    if (click !== cameraClicks) return; // a later click decides
    camera.stop();
    cameraWanted = false;
    showCamera();
  }
});

status.conn('idle', 'disconnected');
pollHealth(ui.ready);
