// Compiled with tsc --strict --noEmit by live.test.js: the declarations in
// index.d.ts describe what a TypeScript user writes.
import { Client, FloorUnmet, Result, Session, StreamEvent, WovyrError } from "wovyr";

async function main(url: string, token: string): Promise<number> {
  const c = new Client(url, token, { timeout: 60 });
  const r: Result = await c.run(["echo", "hi"], { trust: "trusted", env: ["A=1"], files: { "a.txt": "x" }, timeout: 5 });
  const code: Result = await c.runCode("python", "print(1)", { trust: "trusted" });
  const s: Session = await c.createSession({ image: "busybox", idleTimeout: 60 });
  let n = 0;
  for await (const ev of s.execStream(["echo", "x"])) {
    const e: StreamEvent = ev;
    if (e.type === "stdout" && e.data) n += e.data.length;
    if (e.type === "exit" && e.exec?.result) n += e.exec.result.exitCode;
  }
  const entries = await s.list();
  await s.close();
  try {
    await c.run(["true"], { trust: "hostile" });
  } catch (e) {
    if (e instanceof FloorUnmet || e instanceof WovyrError) n += e.status;
  }
  return r.exitCode + n + entries.length + r.check().stdout.length + code.exitCode;
}

void main;
