// Send stamps of agentloop-mockllm (`timestamps: true`: every SSE event carries
// `id: <uv_hrtime ns>`, CLOCK_MONOTONIC) seen on the raw bytes of a response,
// and the current time on the same clock (process.hrtime.bigint() is
// CLOCK_MONOTONIC on Linux, like uv_hrtime).
//
// The SDKs do not expose the SSE id, so the consumer hands them a fetch that
// tees the response body: every chunk passes through StampScanner.push()
// before the SDK's own parser sees it, so the Nth text delta stamp is queued
// before the SDK fires its Nth text event.

export const now = () => process.hrtime.bigint();

export class StampScanner {
  constructor() {
    this.tail = '';
    this.text = [];          // stamps (BigInt) of text delta events, in order
    this.textHead = 0;
    this.blockStop = new Map(); // anthropic: content block index -> stamp of its content_block_stop
    this.toolArgsEnd = 0n;   // openai: stamp of the last chunk carrying tool_calls
    this.end = 0n;           // message_stop / [DONE]
    this.events = 0;
  }

  // Raw response bytes (chunked framing already removed by fetch).
  push(u8) {
    const s = this.tail + Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength).toString('latin1');
    let start = 0;
    for (;;) {
      const e = s.indexOf('\n\n', start);
      if (e < 0) break;
      this.#event(s, start, e);
      start = e + 2;
    }
    this.tail = s.slice(start);
  }

  #event(s, a, b) {
    if (!s.startsWith('id: ', a)) return;
    const nl = s.indexOf('\n', a);
    const stamp = BigInt(s.slice(a + 4, nl));
    const ev = s.slice(nl + 1, b);
    this.events++;
    if (ev.includes('"text_delta"')) {              // anthropic
      this.text.push(stamp);
    } else if (ev.includes('"content_block_stop"')) {
      const m = /"index":(\d+)/.exec(ev);
      this.blockStop.set(Number(m[1]), stamp);
    } else if (ev.includes('"message_stop"') || ev.startsWith('data: [DONE]')) {
      this.end = stamp;
    } else if (ev.includes('"tool_calls":[')) {     // openai
      this.toolArgsEnd = stamp;
    } else if (/"delta":\{"content":"[^"]/.test(ev)) {
      this.text.push(stamp);
    }
  }

  // The stamp of the next text delta (the SDK's Nth text event <-> Nth stamp).
  nextText() {
    if (this.textHead >= this.text.length) throw new Error('text event without a stamp');
    return this.text[this.textHead++];
  }
}

// A fetch for the SDKs' `fetch` option that runs every body chunk through
// onResponse()'s scanner first. One scanner per response.
export function teeFetch(onResponse) {
  return async (url, init) => {
    const res = await fetch(url, init);
    if (!res.body) return res;
    const scanner = onResponse(String(url));
    const reader = res.body.getReader();
    const body = new ReadableStream({
      async pull(ctrl) {
        const { done, value } = await reader.read();
        if (done) { ctrl.close(); return; }
        scanner.push(value);
        ctrl.enqueue(value);
      },
      cancel(reason) { return reader.cancel(reason); },
    }, { highWaterMark: 0 });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

export function percentiles(samplesNs) {
  const a = Float64Array.from(samplesNs, (x) => Number(x) / 1000).sort();
  const q = (p) => a[Math.min(a.length - 1, Math.max(0, Math.ceil(p * a.length) - 1))];
  return { n: a.length, p50: q(0.5), p90: q(0.9), p99: q(0.99), max: a[a.length - 1] };
}
