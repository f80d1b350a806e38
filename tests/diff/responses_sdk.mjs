// The official `openai` SDK's Responses stream accumulator on a captured
// body: `client.responses.stream()` over a fetch that answers with the
// capture's bytes as text/event-stream, then finalResponse(), printed as
// compact JSON -- what `agentloop decode --provider openai-responses`
// prints for the same bytes. Usage: node responses_sdk.mjs CAPTURE.sse
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

// bench/peers/node_modules/openai (ESM resolves from the importing file).
const { default: OpenAI } = await import(pathToFileURL(process.env.AL_OPENAI_SDK).href);

const body = readFileSync(process.argv[2]);
const fetchFn = async () =>
  new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } });
const client = new OpenAI({ apiKey: 'k', baseURL: 'http://127.0.0.1:9/v1', fetch: fetchFn, maxRetries: 0 });
try {
  const stream = client.responses.stream({ model: 'm', input: 'x' });
  const final = await stream.finalResponse();
  process.stdout.write(JSON.stringify(final) + '\n');
} catch (e) {
  process.stdout.write(JSON.stringify({ error: String(e && e.message || e) }) + '\n');
  process.exitCode = 1;
}
