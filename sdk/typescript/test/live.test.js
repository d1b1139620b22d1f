// The SDK against a live `wovyr serve` that this file starts: its own
// state directory, the busybox template, the container and native backends
// certified by the real escape battery there (about a minute), two tenants. The
// README's example runs against it as written, and test/example.ts is
// type-checked against index.d.ts with tsc --strict.
//
// Needs root, as the daemon does; it fails, saying so, without it. The
// binaries are $WOVYR_BIN (and wovyr-guest beside it), else they are built
// from this checkout with `go build`.

import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { createHash, generateKeyPairSync, sign } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, chmodSync, existsSync, openSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import * as wovyr from "../index.js";

const SDK = fileURLToPath(new URL("..", import.meta.url));
const ROOT = join(SDK, "..", "..");
const ALICE = "alice-token";
const BOB = "bob-token";
const OPS = "ops-token"; // an admin: installs plugins
// The operator's plugin signing key, made for this run.
const pluginKey = generateKeyPairSync("ed25519");
const sha = (s) => createHash("sha256").update(s).digest("hex");

let tmp, daemon, logPath, url, alice, bob, ops;

function binaries() {
  if (process.env.WOVYR_BIN) return process.env.WOVYR_BIN;
  const exe = join(tmp, "wovyr");
  execFileSync("go", ["build", "-o", exe, "./cmd/wovyr"], { cwd: ROOT, stdio: "inherit" });
  execFileSync("go", ["build", "-o", join(tmp, "wovyr-guest"), "./cmd/wovyr-guest"], { cwd: ROOT, stdio: "inherit",
    env: { ...process.env, CGO_ENABLED: "0" } });
  return exe;
}

const logTail = () => (existsSync(logPath) ? readFileSync(logPath, "utf8").slice(-2000) : "");

before(async () => {
  if (process.geteuid() !== 0) throw new Error("the live SDK tests start wovyr serve, which needs root");
  tmp = mkdtempSync(join(tmpdir(), "wovyr-ts-test-"));
  chmodSync(tmp, 0o711);
  const state = join(tmp, "state");
  const exe = binaries();
  for (const args of [["image", "build", "busybox"], ["certify", "--backend", "container"], ["certify", "--backend", "native"]]) {
    const p = spawnSync(exe, ["--state-dir", state, ...args], { encoding: "utf8" });
    if (p.status !== 0) throw new Error(`wovyr ${args.join(" ")}: exit ${p.status}\n${p.stdout}${p.stderr}`);
  }
  const conf = join(tmp, "serve.json");
  const addr = join(tmp, "addr");
  const pub = Buffer.from(pluginKey.publicKey.export({ format: "jwk" }).x, "base64url").toString("base64");
  writeFileSync(conf, JSON.stringify({ cgroup_reconcile: "owned", plugins: { trust_keys: { ops: pub } }, tenants: [
    { name: "alice", token_sha256: [sha(ALICE)] }, { name: "bob", token_sha256: [sha(BOB)] },
    { name: "ops", token_sha256: [sha(OPS)], admin: true }] }));
  logPath = join(tmp, "serve.log");
  const log = openSync(logPath, "w");
  daemon = spawn(exe, ["--state-dir", state, "serve", "--listen", "127.0.0.1:0", "--config", conf, "--addr-file", addr],
    { stdio: ["ignore", log, log] });
  closeSync(log);
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (daemon.exitCode !== null) throw new Error("wovyr serve exited: " + logTail());
    if (Date.now() > deadline) throw new Error("wovyr serve never became ready: " + logTail());
    try {
      url = "http://" + readFileSync(addr, "utf8").trim();
      if ((await fetch(url + "/readyz")).status === 200) break;
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  alice = new wovyr.Client(url, ALICE);
  bob = new wovyr.Client(url, BOB);
  ops = new wovyr.Client(url, OPS);
});

after(async () => {
  if (daemon && daemon.exitCode === null) {
    const exited = new Promise((r) => daemon.once("exit", r));
    daemon.kill("SIGTERM");
    const t = setTimeout(() => daemon.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(t);
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const text = (b) => new TextDecoder().decode(b);

test("run: output, files, stdin, env, exit code", async () => {
  const r = await alice.run(["sh", "-c", "echo $X; cat in.txt; cat; echo e >&2; exit 3"],
    { env: ["X=1"], files: { "in.txt": "file\n" }, stdin: "stdin\n" });
  assert.deepEqual([text(r.stdout), text(r.stderr), r.exitCode, r.backend, r.errorClass], ["1\nfile\nstdin\n", "e\n", 3, "container", ""]);
  assert.equal(r.text, "1\nfile\nstdin\n");
});

test("run: output cap and collected files", async () => {
  const r = await alice.run(["sh", "-c", "head -c 5000 /dev/zero; echo out > o.txt"], { output: 1024, collect: ["o.txt"] });
  assert.deepEqual([r.stdout.length, r.stdoutTruncated, Object.keys(r.files), text(r.files["o.txt"])], [1024, true, ["o.txt"], "out\n"]);
});

test("run: a timeout is a result whose check() throws Timeout", async () => {
  const r = await alice.run(["sleep", "10"], { timeout: 0.3 });
  assert.equal(r.errorClass, "timeout");
  assert.throws(() => r.check(), wovyr.Timeout);
});

test("runCode: the host's interpreter on native, the language's template elsewhere", async () => {
  const r = await alice.runCode("python", "import sys\nprint(6 * 7, sys.stdin.read())", { stdin: "in", trust: "trusted" });
  assert.deepEqual([text(r.stdout), r.exitCode, r.backend], ["42 in\n", 0, "native"]);
  await assert.rejects(alice.runCode("javascript", "console.log(1)"), (e) =>
    e instanceof wovyr.BadInput && e.field === "workload.image" && e.message.includes('"node"'));
  await assert.rejects(alice.runCode("cobol", "x"), (e) => e instanceof wovyr.BadInput && e.field === "language" && e.status === 0);
});

test("typed errors", async () => {
  await assert.rejects(alice.run([]), (e) => e instanceof wovyr.BadInput && e.status === 400 && e.field === "workload.argv");
  await assert.rejects(alice.run(["true"], { trust: "hostile" }), (e) =>
    e instanceof wovyr.FloorUnmet && e.status === 409 && e.message.startsWith("floor-unmet: no usable backend at or above microvm"));
  await assert.rejects(new wovyr.Client(url, "wrong").run(["true"]), wovyr.Unauthenticated);
  await assert.rejects(alice.run(["true"], { image: "no-such-image" }), wovyr.BadInput);
  await assert.rejects(new wovyr.Client("http://127.0.0.1:1", ALICE).run(["true"]), wovyr.BackendFailure);
});

test("an invocation's live events: running, output, result; resumed after an event", async () => {
  const rec = await alice.submit(["sh", "-c", "echo one; echo two >&2"], { trust: "trusted" });
  const events = [];
  for await (const ev of alice.events(rec.id)) events.push(ev);
  const out = events.filter((e) => e.type === "stdout" || e.type === "stderr").map((e) => `${e.type}:${text(e.data)}`);
  assert.deepEqual(out.sort(), ["stderr:two\n", "stdout:one\n"]);
  const last = events.at(-1);
  assert.deepEqual([last.type, last.state, last.invocation.id], ["result", "done", rec.id]);
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
  const resumed = [];
  for await (const ev of alice.events(rec.id, { lastEventId: events.length - 1 })) resumed.push(ev.seq);
  assert.deepEqual(resumed, [events.length]);
  await assert.rejects(async () => { for await (const _ of bob.events(rec.id)); }, wovyr.NotFound);
});

/** The entry names of a ustar archive (each header's name field). @param {Uint8Array} b */
function tarNames(b) {
  const names = [];
  for (let off = 0; off + 512 <= b.length && b[off] !== 0; ) {
    const field = (at, n) => new TextDecoder().decode(b.subarray(off + at, off + at + n)).replace(/\0.*$/s, "");
    names.push(field(0, 100));
    off += 512 + Math.ceil(parseInt(field(124, 12).trim() || "0", 8) / 512) * 512;
  }
  return names;
}

test("a session: files, execs, live output, tenant isolation, end, archives, pause and resume", async () => {
  const s = await alice.createSession({ image: "busybox", timeout: 20, idleTimeout: 60 });
  assert.deepEqual([s.state, s.backend, s.tenant, s.id.length], ["running", "container", "alice", 32]);
  await s.write("src/hello.sh", "echo hello $1 > out.txt\n", 0o755);
  const r = await s.exec(["sh", "src/hello.sh", "ts"]);
  assert.deepEqual([r.exitCode, text(r.stdout)], [0, ""]);
  assert.equal(text(await s.read("out.txt")), "hello ts\n");
  assert.deepEqual((await s.list()).map((e) => [e.path, e.type]), [["out.txt", "file"], ["src", "dir"]]);
  assert.equal((await s.stat("src/hello.sh")).mode, 0o755);
  assert.equal(text((await s.exec(["cat"], { stdin: "piped" })).stdout), "piped");

  const events = [];
  for await (const ev of s.execStream(["sh", "-c", "echo a; echo b >&2; exit 4"])) events.push(ev);
  const exit = events.at(-1);
  assert.equal(exit.type, "exit");
  assert.ok(exit.exec.result instanceof wovyr.Result);
  assert.deepEqual([exit.exec.state, exit.exec.result.exitCode], ["done", 4]);
  const chunks = events.slice(0, -1).map((e) => `${e.type}:${text(e.data)}`).sort();
  assert.deepEqual(chunks, ["stderr:b\n", "stdout:a\n"]);
  const rec = await s.execRecord(exit.exec.id);
  assert.deepEqual([rec.state, rec.result.exitCode, text(rec.result.stdout)], ["done", 4, "a\n"]);
  const replay = [];
  for await (const ev of s.execEvents(exit.exec.id, { lastEventId: 1 })) replay.push(ev.seq);
  assert.deepEqual(replay, events.slice(1).map((e) => e.seq));

  // Another tenant: the same NotFound as a missing id.
  await assert.rejects(bob.session(s.id), (e) => e instanceof wovyr.NotFound && e.status === 404);
  await assert.rejects(new wovyr.Session(bob, { id: s.id }).read("out.txt"), wovyr.NotFound);
  assert.deepEqual(await bob.sessions(), []);
  await s.remove("out.txt");
  await assert.rejects(s.read("out.txt"), wovyr.NotFound);
  assert.equal((await s.refresh()).execs, 3);

  // The workspace as a tar archive, extracted again elsewhere in it; then
  // a pause, and a resume by the next call with the files as they were.
  const tarball = await s.readArchive();
  assert.deepEqual(tarNames(tarball), ["src/", "src/hello.sh"]);
  await s.writeArchive(tarball, "copy");
  assert.equal(text(await s.read("copy/src/hello.sh")), "echo hello $1 > out.txt\n");
  await s.pause();
  assert.deepEqual([s.state, s.resumeMode], ["paused", "restart"]);
  assert.equal(text((await s.exec(["cat", "copy/src/hello.sh"])).stdout), "echo hello $1 > out.txt\n");
  assert.equal((await s.refresh()).state, "running");
  assert.equal((await (await s.pause()).resume()).state, "running");
  // A background process fed through its open stdin while it runs.
  const cat = await s.start(["cat"], { openStdin: true });
  assert.deepEqual([cat.state, cat.background, cat.open_stdin], ["running", true, true]);
  assert.deepEqual(await s.writeStdin(cat.id, "one\n"), { written: 4, closed: false });
  assert.deepEqual(await s.writeStdin(cat.id, new TextEncoder().encode("two\n"), { close: true }), { written: 4, closed: true });
  let proc = await s.process(cat.id);
  for (let i = 0; i < 500 && proc.state === "running"; i++) {
    await new Promise((r) => setTimeout(r, 10));
    proc = await s.process(cat.id);
  }
  assert.deepEqual([proc.state, proc.result.exitCode, text(proc.result.stdout)], ["done", 0, "one\ntwo\n"]);
  await assert.rejects(s.writeStdin(cat.id, "late"), wovyr.Conflict);
  const sleeper = await s.start(["sleep", "600"]);
  assert.deepEqual((await s.processes()).map((p) => p.id), [cat.id, sleeper.id]);
  assert.equal((await s.kill(sleeper.id)).state, "killed");
  assert.deepEqual((await s.processes()).map((p) => p.id), [cat.id]);
  await s.close();
  assert.deepEqual([s.state, s.endReason], ["ended", "deleted"]);
  await assert.rejects(s.exec(["true"]), wovyr.Conflict);
});

test("residency: a region this node is not in refuses, typed, and starts nothing", async () => {
  for (const call of [() => alice.run(["true"], { residency: { regions: ["nowhere-1"] } }),
    () => alice.createSession({ residency: { regions: ["nowhere-1"] } })]) {
    await assert.rejects(call(), (e) => e instanceof wovyr.ResidencyUnmet && e.status === 409);
  }
});

test("the README's example runs as written", () => {
  const readme = readFileSync(join(SDK, "README.md"), "utf8");
  const code = /```js\n([\s\S]*?)```/.exec(readme)[1];
  const dir = mkdtempSync(join(tmp, "readme-"));
  // It imports "wovyr" as a user's project would: a package link.
  execFileSync("mkdir", ["-p", join(dir, "node_modules")]);
  execFileSync("ln", ["-s", SDK, join(dir, "node_modules", "wovyr")]);
  writeFileSync(join(dir, "example.mjs"), code);
  const p = spawnSync(process.execPath, ["example.mjs"], { cwd: dir, encoding: "utf8",
    env: { ...process.env, WOVYR_URL: url, WOVYR_TOKEN: ALICE } });
  assert.equal(p.stderr, "");
  assert.equal(p.stdout, "0 42\nhi from /workspace\none\ntwo\nexit 0\n409 floor-unmet\n");
  assert.equal(p.status, 0);
});

test("index.d.ts type-checks a user's TypeScript (tsc --strict)", (t) => {
  const deps = spawnSync(join(ROOT, "scripts", "npm-deps"), { encoding: "utf8" });
  if (deps.status !== 0) {
    t.skip("npm packages unavailable (TypeScript not installed): " + deps.stderr.trim());
    return;
  }
  const tsc = join(deps.stdout.trim(), "node_modules", ".bin", "tsc");
  const dir = mkdtempSync(join(tmp, "tsc-"));
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: "es2022", module: "nodenext", moduleResolution: "nodenext",
      lib: ["es2022", "dom", "esnext.disposable", "esnext.asynciterable"], types: [], skipLibCheck: false,
      paths: { wovyr: [join(SDK, "index.d.ts")] } },
    files: [join(SDK, "test", "example.ts")],
  }));
  const p = spawnSync(tsc, ["-p", join(dir, "tsconfig.json")], { encoding: "utf8" });
  assert.equal(p.stdout + p.stderr, "");
  assert.equal(p.status, 0);
});

test("plugins: install (admin, signed), list, typed calls, a trap, remove", async () => {
  const calc = readFileSync(join(ROOT, "plugin", "testdata", "calc", "calc.wasm"));
  const digest = "sha256:" + createHash("sha256").update(calc).digest("hex");
  const manifest = { name: "calc", component: digest, trust: "internal" };
  const signature = sign(null, Buffer.from(`wovyr plugin manifest v1\ncomponent ${digest}\n`), pluginKey.privateKey);
  const signed = { ...manifest, signature: { key_id: "ops", ed25519: signature.toString("base64") } };

  await assert.rejects(alice.installPlugin(signed, calc), (e) => e instanceof wovyr.Forbidden && e.status === 403);
  await assert.rejects(ops.installPlugin(manifest, calc), (e) => e instanceof wovyr.BadInput && e.field === "manifest.signature");
  const view = await ops.installPlugin(JSON.stringify(signed), calc);
  assert.deepEqual([view.name, view.component, view.signed_by], ["calc", digest, "ops"]);
  assert.equal((await alice.plugins()).map((p) => p.name).join(), "calc");
  assert.ok((await alice.plugin("calc")).functions.some((f) => f.name === "add" && f.signature === "func(a: u32, b: u32) -> u32"));

  const r = await alice.callPlugin("calc", "add", { a: 40, b: 2 });
  assert.deepEqual([r.value, r.end, r.error], [42, "ok", ""]);
  assert.ok(r.fuelUsed > 0 && r.took > 0 && r.invocation.startsWith("pc-") && r.logs.length === 0);
  await assert.rejects(alice.callPlugin("calc", "add", [1, 2], { network: { allow: [{ host: "example.com", ports: [443] }] } }),
    (e) => e instanceof wovyr.BadInput && e.field === "network");
  assert.deepEqual((await alice.callPlugin("calc", "swap", [{ x: 1, y: -2 }])).value, { x: -2, y: 1 });
  await assert.rejects(alice.callPlugin("calc", "add", { a: "x", b: 1 }), (e) =>
    e instanceof wovyr.BadInput && e.field === "args.a" && e.message.includes("expected u32"));
  const trap = await alice.callPlugin("calc", "crash");
  assert.deepEqual([trap.value, trap.end], [null, "trap"]);
  assert.equal((await alice.callPlugin("calc", "add", [1, 2])).freshInstance, true);

  await assert.rejects(alice.removePlugin("calc"), wovyr.Forbidden);
  assert.equal((await ops.removePlugin("calc")).name, "calc");
  await assert.rejects(alice.callPlugin("calc", "add", [1, 2]), (e) => e instanceof wovyr.NotFound && e.status === 404);
});
