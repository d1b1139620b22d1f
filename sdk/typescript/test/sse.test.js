import assert from "node:assert/strict";
import { test } from "node:test";

import { readEvents } from "../sse.js";

function body(...pieces) {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const p of pieces) c.enqueue(enc.encode(p));
      c.close();
    },
  });
}

test("events split anywhere, comments skipped, multi-line data joined", async () => {
  const got = [];
  for await (const ev of readEvents(body("id: 1\nevent: std", "out\ndata: {\"a\":1}\n\n: keepalive\n\n", "id: 2\r\nevent: exit\r\ndata: x\r\ndata: y\r\n\r\n", "id: 3\nevent: half\n"))) {
    got.push(ev);
  }
  assert.deepEqual(got, [
    { id: "1", event: "stdout", data: '{"a":1}' },
    { id: "2", event: "exit", data: "x\ny" },
  ]);
});
