// The reference: the official TypeScript SDK's client (1.32.2, pinned in
// tests/mcp) against server-everything over stdio. Prints one JSON line:
// {ready_ms, p50_us, p99_us, calls, close_ms, left}.
// usage: node sdk_client.mjs CALLS
import { execSync } from 'node:child_process';
import { Client } from '../../tests/mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js';
import { StdioClientTransport } from '../../tests/mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/client/stdio.js';

const calls = Number(process.argv[2] || 1000);
const server = new URL('../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url).pathname;
const t0 = process.hrtime.bigint();
const transport = new StdioClientTransport({ command: 'node', args: [server, 'stdio'], stderr: 'ignore' });
const client = new Client({ name: 'bench', version: '1' }, { capabilities: {} });
await client.connect(transport);
await client.listTools();
const ready = Number(process.hrtime.bigint() - t0) / 1e6;
const pid = transport.pid;
const lat = [];
for (let i = 0; i < calls; i++) {
  const a = process.hrtime.bigint();
  const r = await client.callTool({ name: 'echo', arguments: { message: 'x' + i } });
  if (r.isError) throw new Error('echo failed');
  lat.push(Number(process.hrtime.bigint() - a) / 1e3);
}
lat.sort((x, y) => x - y);
const c0 = process.hrtime.bigint();
await client.close();
const closeMs = Number(process.hrtime.bigint() - c0) / 1e6;
let left = 0;
try { process.kill(pid, 0); left = 1; } catch { left = 0; }
console.log(JSON.stringify({ ready_ms: ready, p50_us: lat[Math.floor(lat.length * 0.5)],
  p99_us: lat[Math.floor(lat.length * 0.99)], calls, close_ms: closeMs, left }));
