// The client of wovyr's HTTP API (/v1): ESM, no dependencies beyond
// Node's fetch (Node ≥ 18). Types are in index.d.ts.

import { BackendFailure, BadInput, errorFor } from "./errors.js";
import { readEvents } from "./sse.js";

export * from "./errors.js";

/**
 * The API operations this client calls, as server/openapi.yaml names them
 * (test/openapi.test.js checks them against it).
 */
export const ROUTES = Object.freeze({
  submit: ["POST", "/v1/invocations"],
  get: ["GET", "/v1/invocations/{id}"],
  cancel: ["DELETE", "/v1/invocations/{id}"],
  events: ["GET", "/v1/invocations/{id}/events"],
  backends: ["GET", "/v1/backends"],
  sessionCreate: ["POST", "/v1/sessions"],
  sessionList: ["GET", "/v1/sessions"],
  sessionGet: ["GET", "/v1/sessions/{id}"],
  sessionDelete: ["DELETE", "/v1/sessions/{id}"],
  exec: ["POST", "/v1/sessions/{id}/exec"],
  execGet: ["GET", "/v1/sessions/{id}/exec/{eid}"],
  execEvents: ["GET", "/v1/sessions/{id}/exec/{eid}/events"],
  files: ["GET", "/v1/sessions/{id}/files"],
  stat: ["GET", "/v1/sessions/{id}/files/stat"],
  download: ["GET", "/v1/sessions/{id}/files/content"],
  upload: ["PUT", "/v1/sessions/{id}/files/content"],
  remove: ["DELETE", "/v1/sessions/{id}/files/content"],
  archiveGet: ["GET", "/v1/sessions/{id}/files/archive"],
  archivePut: ["PUT", "/v1/sessions/{id}/files/archive"],
  sessionPause: ["POST", "/v1/sessions/{id}/pause"],
  sessionResume: ["POST", "/v1/sessions/{id}/resume"],
  processes: ["GET", "/v1/sessions/{id}/processes"],
  processGet: ["GET", "/v1/sessions/{id}/processes/{eid}"],
  processKill: ["DELETE", "/v1/sessions/{id}/processes/{eid}"],
  processStdin: ["POST", "/v1/sessions/{id}/processes/{eid}/stdin"],
  pluginInstall: ["POST", "/v1/plugins"],
  pluginList: ["GET", "/v1/plugins"],
  pluginGet: ["GET", "/v1/plugins/{name}"],
  pluginDelete: ["DELETE", "/v1/plugins/{name}"],
  pluginCall: ["POST", "/v1/plugins/{name}/call"],
});

/** Invocation states that end a record. */
export const TERMINAL = Object.freeze(["done", "failed", "lost"]);

/** The Result properties read below (the test asserts they are the spec's). */
export const RESULT_FIELDS = Object.freeze(["id", "exit_code", "signal", "stdout", "stderr", "stdout_truncated",
  "stderr_truncated", "files", "usage", "backend", "accel", "timings", "class", "error"]);

/** The Session properties exposed (the test asserts they are the spec's). */
export const SESSION_FIELDS = Object.freeze(["id", "tenant", "backend", "state", "image", "limits", "policy",
  "idle_timeout", "max_lifetime", "created", "last_active", "execs", "end_reason", "transitions", "resume", "paused_bytes"]);

/**
 * runCode's languages, as the MCP tool run_code's: the file the code goes
 * to, the interpreter's argv, and the template each runs in by default.
 */
export const INTERPRETERS = Object.freeze({
  python: { file: "main.py", argv: ["python3", "main.py"], image: "python" },
  javascript: { file: "main.js", argv: ["node", "main.js"], image: "node" },
  bash: { file: "main.sh", argv: ["bash", "main.sh"], image: "python" },
});
const CODE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"];

const NS = 1e9; // the API's durations are nanoseconds
const enc = new TextEncoder();

/** @param {Uint8Array|string|undefined} data */
function b64(data) {
  if (data === undefined) return undefined;
  return Buffer.from(typeof data === "string" ? enc.encode(data) : data).toString("base64");
}

/** @param {string|null|undefined} s */
function unb64(s) {
  return s ? new Uint8Array(Buffer.from(s, "base64")) : new Uint8Array(0);
}

/** @param {number|undefined} seconds */
function ns(seconds) {
  return seconds === undefined ? undefined : Math.round(seconds * NS);
}

/** @param {Record<string, unknown>} o */
function dropUndefined(o) {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}

/** How a workload ended. */
export class Result {
  /** @param {Record<string, any>} r the API's Result */
  constructor(r) {
    this.exitCode = r.exit_code ?? -1;
    this.stdout = unb64(r.stdout);
    this.stderr = unb64(r.stderr);
    this.stdoutTruncated = Boolean(r.stdout_truncated);
    this.stderrTruncated = Boolean(r.stderr_truncated);
    this.signal = r.signal ?? "";
    this.backend = r.backend ?? "";
    this.accel = r.accel ?? "";
    /** "" on a clean run (even with a non-zero exit code), else e.g. "timeout" or "oom" */
    this.errorClass = r.class ?? "";
    this.error = r.error ?? "";
    /** @type {Record<string, Uint8Array>} */
    this.files = Object.fromEntries((r.files ?? []).map((/** @type {any} */ f) => [f.path, unb64(f.data)]));
    this.usage = { ...(r.usage ?? {}) };
    this.timings = { ...(r.timings ?? {}) };
    this.id = r.id ?? "";
    this.raw = r;
  }

  /** stdout as text (invalid UTF-8 replaced). */
  get text() {
    return new TextDecoder().decode(this.stdout);
  }

  /** Throws the typed error of a run a limit or a cancel ended (Timeout, OOM, …); returns this otherwise. */
  check() {
    if (this.errorClass) throw errorFor(this.errorClass, this.error || this.errorClass);
    return this;
  }
}

/** An event of a live stream, its data decoded. */
function decodeEvent(/** @type {any} */ ev) {
  const out = { ...ev };
  if (ev.data !== undefined) out.data = unb64(ev.data);
  if (ev.exec?.result) out.exec = { ...ev.exec, result: new Result(ev.exec.result) };
  return out;
}

/**
 * A client of one wovyr daemon: `new Client("http://127.0.0.1:8080", token)`.
 *
 * Every method rejects with a WovyrError subclass named after the error
 * class the daemon answered (BadInput, FloorUnmet, NotFound…).
 */
export class Client {
  /**
   * @param {string} url
   * @param {string} token
   * @param {{timeout?: number}} [opts] timeout bounds each request, in seconds
   */
  constructor(url, token, { timeout } = {}) {
    this.url = url.replace(/\/+$/, "");
    this.token = token;
    this.timeout = timeout;
  }

  /**
   * A route's {id} or {name} is opts.id.
   * @param {keyof typeof ROUTES} route
   * @param {{id?: string, eid?: string, query?: Record<string, string>, body?: BodyInit, ctype?: string,
   *          headers?: Record<string, string>, stream?: boolean}} [opts]
   * @returns {Promise<Response>}
   */
  async request(route, { id = "", eid = "", query, body, ctype = "application/json", headers = {}, stream = false } = {}) {
    const [method, path] = ROUTES[route];
    let url = this.url + path.replace("{id}", encodeURIComponent(id)).replace("{name}", encodeURIComponent(id))
      .replace("{eid}", encodeURIComponent(eid));
    if (query) url += "?" + new URLSearchParams(query).toString();
    const h = { Authorization: "Bearer " + this.token, ...headers };
    if (body !== undefined) h["Content-Type"] = ctype;
    const signal = this.timeout !== undefined && !stream ? AbortSignal.timeout(this.timeout * 1000) : undefined;
    let resp;
    try {
      resp = await fetch(url, { method, headers: h, body, signal });
    } catch (e) {
      throw new BackendFailure(`wovyr daemon at ${this.url}: ${/** @type {Error} */ (e).message}`);
    }
    if (!resp.ok) throw await responseError(resp);
    return resp;
  }

  /**
   * @param {keyof typeof ROUTES} route
   * @param {{id?: string, eid?: string, query?: Record<string, string>, payload?: unknown}} [opts]
   */
  async json(route, { id, eid, query, payload } = {}) {
    const resp = await this.request(route, { id, eid, query, body: payload === undefined ? undefined : JSON.stringify(payload) });
    const text = await resp.text();
    return text ? JSON.parse(text) : null;
  }

  /**
   * Runs argv once in a fresh sandbox and waits for it to end. Resolves to
   * the Result of a workload that ran (check exitCode, and errorClass or
   * check() for a timeout or OOM); rejects with the typed error of one that
   * could not run (BadInput, FloorUnmet, …).
   * @param {string[]} argv
   * @param {import("./index.js").RunOptions} [opts]
   */
  async run(argv, opts = {}) {
    let rec = await this.json("submit", { query: { wait: "30s" }, payload: invocation(argv, opts) });
    while (!TERMINAL.includes(rec.state)) rec = await this.json("get", { id: rec.id, query: { wait: "30s" } });
    return result(rec);
  }

  /**
   * Runs a snippet of language (python, javascript or bash) as the MCP
   * tool run_code does: the code is written to main.py, main.js or main.sh
   * in an empty workspace and its interpreter run on it, in opts.image
   * (default: the language's, INTERPRETERS; native runs the host's).
   * @param {string} language
   * @param {string} code
   * @param {import("./index.js").RunOptions} [opts]
   */
  async runCode(language, code, opts = {}) {
    const it = Object.hasOwn(INTERPRETERS, language) ? INTERPRETERS[/** @type {keyof typeof INTERPRETERS} */ (language)] : undefined;
    if (!it) throw new BadInput(`unknown language ${JSON.stringify(language)} (want python, javascript or bash)`, { field: "language" });
    return this.run(it.argv, { ...opts, image: opts.image ?? it.image, env: CODE_ENV, files: { [it.file]: code } });
  }

  /**
   * Starts argv without waiting: resolves to the invocation's record once
   * accepted (follow it with events()).
   * @param {string[]} argv
   * @param {import("./index.js").RunOptions} [opts]
   */
  async submit(argv, opts = {}) {
    return this.json("submit", { payload: invocation(argv, opts) });
  }

  /** The invocation record id as the API returns it. @param {string} id */
  async invocation(id) {
    return this.json("get", { id });
  }

  /** Cancels the invocation id; resolves to its final record. @param {string} id */
  async cancel(id) {
    return this.json("cancel", { id });
  }

  /**
   * The invocation's events as they happen: state changes, output chunks
   * (data as bytes), then the result, which ends the stream. lastEventId
   * resumes after that event.
   * @param {string} id
   * @param {{lastEventId?: number}} [opts]
   */
  async *events(id, { lastEventId } = {}) {
    yield* this.stream("events", { id }, lastEventId);
  }

  /** Every backend: strength, availability, certification, pools. */
  async backends() {
    return this.json("backends");
  }

  /**
   * Creates a long-lived sandbox. timeout is each exec's default and
   * longest wall-clock limit, in seconds.
   * @param {import("./index.js").SessionOptions} [opts]
   */
  async createSession({ trust = "internal", image, timeout, memory, idleTimeout, maxLifetime, residency } = {}) {
    const req = dropUndefined({ image, policy: dropUndefined({ trust, residency }), limits: dropUndefined({ wall: ns(timeout), memory }),
      idle_timeout: ns(idleTimeout), max_lifetime: ns(maxLifetime) });
    return new Session(this, await this.json("sessionCreate", { payload: req }));
  }

  /** The session id (NotFound if it is not this tenant's). @param {string} id */
  async session(id) {
    return new Session(this, await this.json("sessionGet", { id }));
  }

  /** The tenant's sessions, live and recently ended, oldest first. */
  async sessions() {
    return (await this.json("sessionList")).sessions.map((/** @type {any} */ s) => new Session(this, s));
  }

  /**
   * Installs a component plugin (an admin token's): manifest is the
   * manifest object (or its JSON text), component the .wasm bytes.
   * Resolves to the plugin's view; a bad signature, digest or import is
   * BadInput naming the manifest field.
   * @param {object|string} manifest
   * @param {Uint8Array} component
   */
  async installPlugin(manifest, component) {
    const m = typeof manifest === "string" ? JSON.parse(manifest) : manifest;
    return this.json("pluginInstall", { payload: { manifest: m, component: b64(component) } });
  }

  /** The installed plugins, by name, with their functions' WIT signatures. */
  async plugins() {
    return (await this.json("pluginList")).plugins;
  }

  /** One plugin's view (NotFound if none). @param {string} name */
  async plugin(name) {
    return this.json("pluginGet", { id: name });
  }

  /** Uninstalls a plugin (admin) and resolves to what it was. @param {string} name */
  async removePlugin(name) {
    return this.json("pluginDelete", { id: name });
  }

  /**
   * Calls a plugin's function with args by parameter name (an object) or
   * in order (an array), as JSON forms of their WIT types. Resolves to how
   * the call ended, whatever the end: value (the result's JSON form; null
   * unless end is "ok"), end ("ok", "trap", "out-of-fuel", "timeout",
   * "cancelled"), error, fuelUsed, took (seconds) and freshInstance.
   * Arguments that do not match the signature are BadInput, and nothing runs.
   * @param {string} name
   * @param {string} fn
   * @param {object|unknown[]} [args]
   */
  async callPlugin(name, fn, args, { network } = {}) {
    const r = await this.json("pluginCall", { id: name, payload: dropUndefined({ function: fn, args, network }) });
    return { value: r.value, end: r.end, error: r.error ?? "", fuelUsed: r.fuel_used, took: r.took_ns / 1e9,
      freshInstance: r.fresh_instance, invocation: r.invocation, logs: r.logs ?? [], logsDropped: r.logs_dropped ?? 0 };
  }

  /**
   * The decoded events of an event-stream route (events, execEvents).
   * @param {keyof typeof ROUTES} route
   * @param {{id?: string, eid?: string}} ids
   * @param {number|undefined} lastEventId
   */
  async *stream(route, ids, lastEventId) {
    const headers = lastEventId === undefined ? {} : { "Last-Event-ID": String(lastEventId) };
    const resp = await this.request(route, { ...ids, headers, stream: true });
    if (!resp.body) return;
    for await (const ev of readEvents(resp.body)) yield decodeEvent(JSON.parse(ev.data));
  }
}

/** @param {string[]} argv @param {import("./index.js").RunOptions} o */
function invocation(argv, o) {
  const files = o.files === undefined ? undefined
    : Object.entries(o.files).map(([path, data]) => ({ path, data: b64(data) }));
  return {
    workload: dropUndefined({ kind: "command", argv: [...argv], image: o.image, stdin: b64(o.stdin), env: o.env,
      files, collect: o.collect }),
    limits: dropUndefined({ wall: ns(o.timeout), memory: o.memory, output: o.output }),
    policy: dropUndefined({ trust: o.trust ?? "internal", preference: o.preference, residency: o.residency }),
  };
}

/** @param {any} rec */
function result(rec) {
  const res = rec.result;
  if (!res) throw new BackendFailure(`invocation ${rec.id} is ${rec.state} without a result`);
  if (rec.state === "failed") throw errorFor(res.class ?? "", res.error ?? "");
  return new Result(res);
}

/** @param {Response} resp */
async function responseError(resp) {
  const raw = await resp.text();
  const retry = resp.headers.get("Retry-After");
  const opts = { status: resp.status, retryAfter: retry && /^\d+$/.test(retry) ? Number(retry) : undefined };
  try {
    const b = JSON.parse(raw);
    if (typeof b.code !== "string") throw new Error("no code");
    return errorFor(b.code, b.message ?? "", { ...opts, field: b.field ?? "" });
  } catch {
    return new BackendFailure(`HTTP ${resp.status}: ${raw.slice(0, 200)}`, opts);
  }
}

/** A session: exec commands and move files in one workspace. */
export class Session {
  /** @param {Client} client @param {Record<string, any>} view */
  constructor(client, view) {
    this.client = client;
    this.update(view);
  }

  /** @param {Record<string, any>} view */
  update(view) {
    this.raw = view;
    // "resume" is also the method: the field is resumeMode.
    for (const k of SESSION_FIELDS) /** @type {any} */ (this)[k === "resume" ? "resumeMode" : camel(k)] = view[k];
  }

  async refresh() {
    this.update(await this.client.json("sessionGet", { id: this.id }));
    return this;
  }

  /**
   * Runs one command in the workspace and resolves to how it ended.
   * @param {string[]} argv
   * @param {import("./index.js").ExecOptions} [opts]
   */
  async exec(argv, opts = {}) {
    return new Result(await this.client.json("exec", { id: this.id, payload: execRequest(argv, opts) }));
  }

  /**
   * Starts one command and yields its output as it is produced: stdout and
   * stderr events (data as bytes), then exit, whose exec.result is the
   * Result; the exit event ends the stream.
   * @param {string[]} argv
   * @param {import("./index.js").ExecOptions} [opts]
   */
  async *execStream(argv, opts = {}) {
    const rec = await this.client.json("exec", { id: this.id, query: { wait: "0" }, payload: execRequest(argv, opts) });
    yield* this.execEvents(rec.id);
  }

  /** One exec's record: running, or how it ended. @param {string} eid */
  async execRecord(eid) {
    return withResult(await this.client.json("execGet", { id: this.id, eid }));
  }

  /**
   * Starts a background process and resolves to its record (running, with
   * its pid): it outlives later execs until it exits, is killed or the
   * session ends. With openStdin, writeStdin feeds it.
   * @param {string[]} argv
   * @param {import("./index.js").StartOptions} [opts]
   */
  async start(argv, opts = {}) {
    const payload = dropUndefined({ argv: [...argv], env: opts.env, dir: opts.dir, output: opts.output, background: true,
      open_stdin: opts.openStdin || undefined });
    return this.client.json("exec", { id: this.id, payload });
  }

  /** The background processes the session holds, oldest first. */
  async processes() {
    return (await this.client.json("processes", { id: this.id })).processes;
  }

  /** One background process, with its output so far. @param {string} eid */
  async process(eid) {
    return withResult(await this.client.json("processGet", { id: this.id, eid }));
  }

  /** Kills a background process with its own session's processes; its final record. @param {string} eid */
  async kill(eid) {
    return withResult(await this.client.json("processKill", { id: this.id, eid }));
  }

  /**
   * Writes data to a background process's stdin as far as its pipe takes it
   * now (written; the rest is the caller's to send again), closing it after
   * all of it if close (closed).
   * @param {string} eid @param {Uint8Array|string} data @param {{close?: boolean}} [opts]
   */
  async writeStdin(eid, data, { close = false } = {}) {
    const body = typeof data === "string" ? enc.encode(data) : data;
    const resp = await this.client.request("processStdin", { id: this.id, eid, query: close ? { close: "true" } : undefined,
      body, ctype: "application/octet-stream" });
    return resp.json();
  }

  /**
   * The events of exec eid, from the start or after lastEventId.
   * @param {string} eid
   * @param {{lastEventId?: number}} [opts]
   */
  execEvents(eid, { lastEventId } = {}) {
    return this.client.stream("execEvents", { id: this.id, eid }, lastEventId);
  }

  /** Writes data at path (relative to the workspace). @param {string} path @param {Uint8Array|string} data @param {number} [mode] */
  async write(path, data, mode) {
    const query = mode === undefined ? { path } : { path, mode: mode.toString(8) };
    const body = typeof data === "string" ? enc.encode(data) : data;
    await this.client.request("upload", { id: this.id, query, body, ctype: "application/octet-stream" });
  }

  /** The bytes of the file at path. @param {string} path */
  async read(path) {
    const resp = await this.client.request("download", { id: this.id, query: { path } });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /** The entries of the directory path (default: the workspace). @param {string} [path] */
  async list(path = "") {
    return (await this.client.json("files", { id: this.id, query: { path } })).entries;
  }

  /** @param {string} path */
  async stat(path) {
    return this.client.json("stat", { id: this.id, query: { path } });
  }

  /** Removes path (a directory with its contents). @param {string} path */
  async remove(path) {
    await this.client.request("remove", { id: this.id, query: { path } });
  }

  /** The directory path (default: the workspace) as a tar archive. @param {string} [path] */
  async readArchive(path = "") {
    const resp = await this.client.request("archiveGet", { id: this.id, query: { path } });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /**
   * Extracts the tar archive data into the directory path (default: the
   * workspace); an archive with an entry that cannot be extracted there is
   * refused whole (BadInput).
   * @param {Uint8Array} data @param {string} [path]
   */
  async writeArchive(data, path = "") {
    await this.client.request("archivePut", { id: this.id, query: { path }, body: data, ctype: "application/x-tar" });
  }

  /**
   * Pauses now, the sandbox given back: saved whole where its backend can
   * (resumeMode "snapshot": files and processes kept), else its workspace
   * kept ("restart"); the next exec or file call resumes it.
   */
  async pause() {
    this.update(await this.client.json("sessionPause", { id: this.id }));
    return this;
  }

  /** Resumes a paused session now, on the backend it was created on. */
  async resume() {
    this.update(await this.client.json("sessionResume", { id: this.id }));
    return this;
  }

  /** Ends the session: its sandbox is destroyed. */
  async close() {
    this.update(await this.client.json("sessionDelete", { id: this.id }));
    return this;
  }

  /** `await using s = await c.createSession()` ends it on scope exit. */
  async [Symbol.asyncDispose]() {
    if (this.state === "creating" || this.state === "running" || this.state === "paused") await this.close();
  }
}

/** @param {any} rec */
function withResult(rec) {
  return rec.result ? { ...rec, result: new Result(rec.result) } : rec;
}

/** @param {string[]} argv @param {import("./index.js").ExecOptions} o */
function execRequest(argv, o) {
  return dropUndefined({ argv: [...argv], stdin: b64(o.stdin), env: o.env, dir: o.dir, wall: ns(o.timeout), output: o.output });
}

/** @param {string} k */
function camel(k) {
  return k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
}
