// The @openai/agents-realtime SDK, unmodified, as a bargein client (run by tests/e2e/test_agents_js.py).
// Usage: node agents_realtime_client.mjs WS_URL PCM_FILE
// Streams PCM_FILE (pcm16 24 kHz) at real-time pace to a RealtimeAgent with one function tool, and prints
// one JSON line per event: {"server": event} for every raw server event, {"tool": ...} when the tool runs,
// {"error": ...} for any error the SDK reports. Exits after the reply that follows the tool call.
import { readFileSync } from 'node:fs';
import { RealtimeAgent, RealtimeSession, tool } from '@openai/agents-realtime';
import { z } from 'zod';

const [url, pcmFile] = process.argv.slice(2);
const print = (line) => process.stdout.write(JSON.stringify(line) + '\n');

const getWeather = tool({
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    print({ tool: { name: 'get_weather', city } });
    return `It is sunny in ${city}.`;
  },
});
const agent = new RealtimeAgent({ name: 'helper', instructions: 'Be brief.', tools: [getWeather] });
const session = new RealtimeSession(agent, { transport: 'websocket', model: 'bargein' });

let toolRan = false;
let finished;
const done = new Promise((resolve) => { finished = resolve; });
session.on('transport_event', (event) => {
  print({ server: event });
  if (event.type === 'response.done') {
    const calls = (event.response.output || []).filter((item) => item.type === 'function_call');
    if (toolRan && calls.length === 0) finished();
  }
});
session.on('agent_tool_end', () => { toolRan = true; });
session.on('error', (error) => print({ error: String(error.error ?? error) }));

await session.connect({ apiKey: 'sk-local', url });
const pcm = readFileSync(pcmFile);
const step = 4800; // 100 ms
for (let offset = 0; offset < pcm.length; offset += step) {
  const piece = pcm.subarray(offset, offset + step);
  session.sendAudio(piece.buffer.slice(piece.byteOffset, piece.byteOffset + piece.length));
  await new Promise((resolve) => setTimeout(resolve, 100));
}
const timeout = setTimeout(() => { print({ error: 'timed out' }); finished(); }, 30000);
await done;
clearTimeout(timeout);
session.close();
process.exit(0);
