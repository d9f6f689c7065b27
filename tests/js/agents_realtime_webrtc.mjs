// The @openai/agents-realtime SDK's browser bundle, unmodified, as a bargein client over WebRTC
// (run in Chromium by tests/e2e/test_agents_js_webrtc.py, on bargein's origin).
// Page address: agents_realtime_webrtc.html?key=ek_...  The transport posts its offer to bargein's
// /v1/realtime/calls with the ephemeral key, takes Chromium's (fake) microphone and plays the reply in an
// <audio> element. Everything it sees lands in window.agentsLog, in the shape of agents_realtime_client.mjs's
// lines: {"server": event, "at": ms}, {"tool": ...}, {"error": ...}, plus {"connected": callId}.
import { OpenAIRealtimeWebRTC, RealtimeAgent, RealtimeSession, tool } from './bundle/openai-realtime-agents.mjs';

const log = [];
window.agentsLog = log;
const key = new URLSearchParams(location.search).get('key');

const getWeather = tool({
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
  execute: async ({ city }) => {
    log.push({ tool: { name: 'get_weather', city } });
    return `It is sunny in ${city}.`;
  },
});
const agent = new RealtimeAgent({ name: 'helper', instructions: 'Be brief.', tools: [getWeather] });
const transport = new OpenAIRealtimeWebRTC({
  baseUrl: new URL('/v1/realtime/calls', location.href).toString(),
  audioElement: document.getElementById('reply'),
});
const session = new RealtimeSession(agent, { transport, model: 'bargein' });
session.on('transport_event', (event) => {
  log.push({ server: event, at: Math.round(performance.now()) });
  // how much sound the reply track had carried when the server cut it or finished
  if (event.type === 'output_audio_buffer.cleared' || event.type === 'output_audio_buffer.stopped') {
    replyEnergy().then((energy) => log.push({ energy, after: event.type }));
  }
});
transport.on('connection_change', (status) => log.push({ connection: status, at: Math.round(performance.now()) }));
session.on('error', (error) => log.push({ error: String(error.error?.message ?? error.error ?? error) }));
session.on('audio_interrupted', () => log.push({ interrupted: true }));
// The reply track's audio energy so far (0 before any sound arrived), read from the transport's peer connection.
async function replyEnergy() {
  const pc = transport.connectionState.peerConnection;
  if (!pc) return 0;
  const stats = [...(await pc.getStats()).values()];
  return stats.find((s) => s.type === 'inbound-rtp' && s.kind === 'audio')?.totalAudioEnergy ?? 0;
}

try {
  await session.connect({ apiKey: key });
  log.push({ connected: transport.callId ?? null });
} catch (error) {
  log.push({ error: `connect: ${error.message ?? error}` });
}
