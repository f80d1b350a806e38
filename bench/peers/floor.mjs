// The floor in Node: a raw net.Socket reader of the same stream, no SDK, no
// HTTP client. Sends one HTTP/1.1 POST /v1/messages, then only scans the
// bytes for "\n\n" (event ends) as they arrive; chunked framing is skipped by
// only looking at lines that start with "id: " / "data: ".
//
//   node floor.mjs --mode cpu|latency --base-url http://127.0.0.1:PORT [--expect N]
//
// latency: for every text_delta event, the time of the 'data' callback that
// completed it minus its send stamp. cpu: process.cpuUsage() at the end.
import net from 'node:net';
import { now, percentiles } from './stamps.mjs';

const argv = process.argv.slice(2);
const arg = (k) => { const i = argv.indexOf('--' + k); return i >= 0 ? argv[i + 1] : undefined; };
const mode = arg('mode');
const url = new URL(arg('base-url'));
const expect = arg('expect') ? Number(arg('expect')) : null;

const body = JSON.stringify({ model: 'claude-mock', max_tokens: 1 << 20, stream: true,
  messages: [{ role: 'user', content: 'Stream please.' }] });
const req = `POST /v1/messages HTTP/1.1\r\nhost: ${url.host}\r\nx-api-key: k\r\n` +
  `anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n` +
  `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;

const cpu0 = process.cpuUsage();
let tail = '';
let events = 0;
const lat = [];
const sock = net.connect(Number(url.port), url.hostname, () => sock.write(req));
sock.on('data', (buf) => {
  const t = now();
  const s = tail + buf.toString('latin1');
  let start = 0;
  for (;;) {
    const e = s.indexOf('\n\n', start);
    if (e < 0) break;
    // the event is s[start, e): maybe preceded by chunk-size lines
    const ev = s.slice(start, e);
    if (ev.includes('"text_delta"')) {
      events++;
      if (mode === 'latency') {
        const i = ev.indexOf('id: ');
        lat.push(t - BigInt(ev.slice(i + 4, ev.indexOf('\n', i))));
      }
    }
    start = e + 2;
  }
  tail = s.slice(start);
  if (s.includes('"message_stop"')) sock.end();
});
sock.on('close', () => {
  const cpu = process.cpuUsage();
  if (expect != null && events !== expect) {
    console.error(`floor: ${events} text events, expected ${expect}`);
    process.exit(1);
  }
  const out = { consumer: 'node-raw-socket', mode, events,
    cpu_process_us: cpu.user + cpu.system, cpu_stream_us: cpu.user + cpu.system - cpu0.user - cpu0.system };
  if (mode === 'latency') out.latency_us = percentiles(lat);
  out.maxrss_kb = process.resourceUsage().maxRSS;
  out.node = process.version;
  process.stdout.write(JSON.stringify(out) + '\n');
});
sock.on('error', (e) => { console.error('floor:', e.message); process.exit(1); });
