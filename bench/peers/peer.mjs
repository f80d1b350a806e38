// One peer consumer of an agentloop-mockllm stream, for bench/peers/compare.sh.
//
//   node peer.mjs --consumer NAME --mode cpu|latency|tool --base-url http://127.0.0.1:PORT
//                 [--expect N] [--iterations N]
//
// Prints one JSON object on stdout. Only the SDK of NAME is imported, so the
// process's peak RSS is that SDK's.
//
// cpu      one request, plain fetch; counts the text events (must be --expect);
//          reports process.cpuUsage() at the end (whole process) and the part
//          spent from just before the request to the last event.
// latency  one request through a teeing fetch (stamps.mjs); per text event
//          the SDK callback time minus the event's send stamp.
// tool     --iterations round trips (tool reply, tool result, final reply);
//          per trip the tool function's start minus the send stamp of the
//          tool block's end on the wire, and the reply's end minus that stamp.

import { now, StampScanner, teeFetch, percentiles } from './stamps.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : 'true']);
  return acc;
}, []));
const consumer = args.consumer;
const mode = args.mode;
const baseURL = args['base-url'];
const expect = args.expect ? Number(args.expect) : null;
const iterations = Number(args.iterations || 5);
const MODEL = 'claude-mock';
const PROMPT = [{ role: 'user', content: 'Stream please.' }];

const cpu0 = process.cpuUsage();
let scanners = [];
const fetchFn = mode === 'cpu' ? fetch : teeFetch(() => { const s = new StampScanner(); scanners.push(s); return s; });
const cur = () => scanners[scanners.length - 1];

let textEvents = 0, chars = 0;
const lat = [];
function onText(t) {
  // the SDK delivered one text delta: latency sample first, then bookkeeping
  if (mode === 'latency') lat.push(now() - cur().nextText());
  textEvents++; chars += t.length;
}

// ---- tool probe: the "tool" every consumer runs ----------------------------
const toolStarts = [];
function probeTool(input) {
  toolStarts.push({ t: now(), scanner: cur(), input });
  return 'probe ok';
}
const probeSchema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };

async function anthropicClient() {
  const { default: Anthropic } = await import('@anthropic-ai/sdk');
  return new Anthropic({ apiKey: 'k', baseURL, fetch: fetchFn, maxRetries: 0 });
}
async function openaiClient() {
  const { default: OpenAI } = await import('openai');
  return new OpenAI({ apiKey: 'k', baseURL: baseURL + '/v1', fetch: fetchFn, maxRetries: 0 });
}
async function vercelModel() {
  const { createAnthropic } = await import('@ai-sdk/anthropic');
  const provider = createAnthropic({ apiKey: 'k', baseURL: baseURL + '/v1', fetch: fetchFn });
  return provider(MODEL);
}

// ---- streaming consumers (cpu, latency) ------------------------------------
const streamers = {
  // raw stream iterator: messages.create({stream:true}), iterate the events
  async 'anthropic-raw'() {
    const client = await anthropicClient();
    const t0 = process.cpuUsage();
    const stream = await client.messages.create({ model: MODEL, max_tokens: 1 << 20, messages: PROMPT, stream: true });
    for await (const ev of stream) {
      if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') onText(ev.delta.text);
    }
    return t0;
  },
  // messages.stream(): the 'text' event, the accumulated final message
  async 'anthropic-stream'() {
    const client = await anthropicClient();
    const t0 = process.cpuUsage();
    const stream = client.messages.stream({ model: MODEL, max_tokens: 1 << 20, messages: PROMPT });
    stream.on('text', (delta) => onText(delta));
    const msg = await stream.finalMessage();
    if (msg.content[0].text.length !== chars) throw new Error('accumulated text length mismatch');
    return t0;
  },
  // chat.completions.create({stream:true}) against /v1/chat/completions
  async openai() {
    const client = await openaiClient();
    const t0 = process.cpuUsage();
    const stream = await client.chat.completions.create({ model: MODEL, messages: PROMPT, stream: true });
    for await (const chunk of stream) {
      const c = chunk.choices[0]?.delta?.content;
      if (c) onText(c);
    }
    return t0;
  },
  // Vercel AI SDK: streamText over @ai-sdk/anthropic, its textStream
  async vercel() {
    const { streamText } = await import('ai');
    const model = await vercelModel();
    const t0 = process.cpuUsage();
    const r = streamText({ model, messages: PROMPT, maxOutputTokens: 1 << 20, maxRetries: 0 });
    for await (const t of r.textStream) onText(t);
    return t0;
  },
};

// ---- tool consumers --------------------------------------------------------
const TOOL_BLOCK = 1; // scenario: text, tool_use (index 1), streaming text tail

const toolers = {
  // beta tool runner, streaming, default settings: tools run once the reply is done
  async 'anthropic-runner'() { await anthropicRunner(false); },
  // the same runner with runToolsEagerly: true (starts a call when its block ends)
  async 'anthropic-runner-eager'() { await anthropicRunner(true); },
  // messages.stream(), tool started from the 'contentBlock' event (block complete)
  async 'anthropic-stream-eager'() {
    const client = await anthropicClient();
    const tools = [{ name: 'probe', description: 'probe', input_schema: probeSchema }];
    for (let i = 0; i < iterations; i++) {
      const messages = [...PROMPT];
      const stream = client.messages.stream({ model: MODEL, max_tokens: 4096, messages, tools });
      let result = null;
      stream.on('contentBlock', (b) => { if (b.type === 'tool_use') result = { id: b.id, out: probeTool(b.input) }; });
      const msg = await stream.finalMessage();
      if (!result) throw new Error('no tool call');
      messages.push({ role: 'assistant', content: msg.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: result.id, content: result.out }] });
      await client.messages.stream({ model: MODEL, max_tokens: 4096, messages, tools }).finalMessage();
    }
  },
  // chat.completions.runTools({stream:true}): the SDK's tool runner
  async 'openai-runner'() {
    const client = await openaiClient();
    const tools = [{ type: 'function', function: { name: 'probe', parameters: probeSchema, function: (a) => probeTool(a), parse: JSON.parse } }];
    for (let i = 0; i < iterations; i++) {
      const runner = client.chat.completions.runTools({ model: MODEL, messages: [...PROMPT], tools, stream: true, maxChatCompletions: 2 });
      await runner.finalChatCompletion();
    }
  },
  // chat.completions.stream(), tool started from 'tool_calls.function.arguments.done'
  async 'openai-stream-eager'() {
    const client = await openaiClient();
    const tools = [{ type: 'function', function: { name: 'probe', parameters: probeSchema } }];
    for (let i = 0; i < iterations; i++) {
      const messages = [...PROMPT];
      const stream = client.chat.completions.stream({ model: MODEL, messages, tools });
      let result = null;
      stream.on('tool_calls.function.arguments.done', (e) => { result = { out: probeTool(e.parsed_arguments ?? JSON.parse(e.arguments)) }; });
      const c = await stream.finalChatCompletion();
      if (!result) throw new Error('no tool call');
      const m = c.choices[0].message;
      messages.push({ role: 'assistant', content: m.content, tool_calls: m.tool_calls },
        { role: 'tool', tool_call_id: m.tool_calls[0].id, content: result.out });
      await client.chat.completions.stream({ model: MODEL, messages, tools }).finalChatCompletion();
    }
  },
  // Vercel AI SDK streamText with an executable tool, two steps
  async vercel() {
    const { streamText, tool, jsonSchema, stepCountIs } = await import('ai');
    const model = await vercelModel();
    const tools = { probe: tool({ description: 'probe', inputSchema: jsonSchema(probeSchema), execute: async (a) => probeTool(a) }) };
    for (let i = 0; i < iterations; i++) {
      const r = streamText({ model, messages: [...PROMPT], tools, stopWhen: stepCountIs(2), maxRetries: 0 });
      for await (const _ of r.fullStream) { /* drain */ }
      await r.text;
    }
  },
};

async function anthropicRunner(eager) {
  const client = await anthropicClient();
  const { betaTool } = await import('@anthropic-ai/sdk/helpers/beta/json-schema');
  const probe = betaTool({ name: 'probe', description: 'probe', inputSchema: probeSchema, run: (a) => probeTool(a) });
  for (let i = 0; i < iterations; i++) {
    const runner = client.beta.messages.toolRunner({
      model: MODEL, max_tokens: 4096, messages: [...PROMPT], tools: [probe],
      stream: true, runToolsEagerly: eager, thread: false, max_iterations: 2,
    });
    for await (const stream of runner) await stream.finalMessage();
  }
}

async function main() {
  let out = { consumer, mode };
  if (mode === 'tool') {
    const fn = toolers[consumer];
    if (!fn) throw new Error(`no tool consumer ${consumer}`);
    await fn();
    if (toolStarts.length !== iterations) throw new Error(`${toolStarts.length} tool starts for ${iterations} trips`);
    const start = [], end = [];
    for (const { t, scanner } of toolStarts) {
      const s = scanner.blockStop.get(TOOL_BLOCK) ?? (scanner.toolArgsEnd || null);
      if (s == null || !scanner.end) throw new Error('tool reply without stamps');
      start.push(t - s);
      end.push(scanner.end - s);
    }
    Object.assign(out, { iterations, tool_start_us: percentiles(start), reply_end_us: percentiles(end),
      started_before_reply_end: toolStarts.filter(({ t, scanner }) => t < scanner.end).length });
  } else {
    const fn = streamers[consumer];
    if (!fn) throw new Error(`no streaming consumer ${consumer}`);
    const t0 = await fn();
    const cpu = process.cpuUsage();
    if (expect != null && textEvents !== expect) throw new Error(`${textEvents} text events, expected ${expect}`);
    Object.assign(out, { events: textEvents, chars,
      cpu_process_us: cpu.user + cpu.system,
      cpu_stream_us: cpu.user + cpu.system - t0.user - t0.system,
      cpu_before_first_line_us: cpu0.user + cpu0.system });
    if (mode === 'latency') {
      if (cur().textHead !== cur().text.length) throw new Error('stamps left over');
      out.latency_us = percentiles(lat);
    }
  }
  out.maxrss_kb = process.resourceUsage().maxRSS;
  out.node = process.version;
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => { console.error(`peer ${consumer} ${mode}: ${e.stack || e}`); process.exit(1); });
