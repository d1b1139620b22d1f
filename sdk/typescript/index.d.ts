// Types of the wovyr client (index.js). Durations are in seconds; byte
// fields are Uint8Array (strings are taken as UTF-8 where input is bytes).

export type Trust = "trusted" | "internal" | "untrusted" | "hostile";
export type Bytes = Uint8Array | string;

export interface ErrorOptions {
  status?: number;
  field?: string;
  retryAfter?: number;
}

/** Any error from wovyr; subclasses are named after the error classes. */
export class WovyrError extends Error {
  static readonly code: string;
  constructor(message: string, opts?: ErrorOptions);
  /** the error class, e.g. "bad-input" */
  readonly code: string;
  /** the HTTP status (0 when it did not come from a response) */
  readonly status: number;
  /** the offending input field */
  readonly field: string;
  /** seconds to wait before retrying (429 and 503) */
  readonly retryAfter: number | undefined;
}

/** The request is wrong; nothing was started. */
export class BadInput extends WovyrError {}
/** No certified, available backend at or above the required strength. */
export class FloorUnmet extends WovyrError {}
/** No eligible backend enforces the policy. */
export class PolicyUnenforceable extends WovyrError {}
/** No region the tenant and the invocation allow has a live node; never widened. */
export class ResidencyUnmet extends WovyrError {}
/** The sandbox machinery failed, not the workload. */
export class BackendFailure extends WovyrError {}
/** No or unknown bearer token. */
export class Unauthenticated extends WovyrError {}
/** The token may not do this (admin only). */
export class Forbidden extends WovyrError {}
/** No such invocation or session for this tenant. */
export class NotFound extends WovyrError {}
/** The resource's state forbids it (e.g. an ended session). */
export class Conflict extends WovyrError {}
/** The body exceeds the daemon's cap. */
export class TooLarge extends WovyrError {}
/** Over the tenant's rate or quota; see retryAfter. */
export class RateLimited extends WovyrError {}
/** The daemon is not ready or shutting down; see retryAfter. */
export class Unavailable extends WovyrError {}
/** The workload hit its wall-clock limit. */
export class Timeout extends WovyrError {}
/** The workload hit its memory limit. */
export class OOM extends WovyrError {}
/** A wasm workload used up its fuel. */
export class OutOfFuel extends WovyrError {}
/** Cancelled by the caller or by shutdown. */
export class Killed extends WovyrError {}
/** The daemon stopped while the invocation ran. */
export class Lost extends WovyrError {}

export const CLASSES: Readonly<Record<string, typeof WovyrError>>;
export function errorFor(code: string, message: string, opts?: ErrorOptions): WovyrError;

export type Method = "GET" | "POST" | "PUT" | "DELETE";
export type Route = "submit" | "get" | "cancel" | "events" | "backends" | "sessionCreate" | "sessionList" | "sessionGet"
  | "sessionDelete" | "exec" | "execGet" | "execEvents" | "files" | "stat" | "download" | "upload" | "remove"
  | "archiveGet" | "archivePut" | "sessionPause" | "sessionResume" | "processes" | "processGet" | "processKill"
  | "processStdin" | "pluginInstall" | "pluginList" | "pluginGet" | "pluginDelete" | "pluginCall";
export const ROUTES: Readonly<Record<Route, readonly [Method, string]>>;
export const TERMINAL: readonly string[];
export type Language = "python" | "javascript" | "bash";
export const INTERPRETERS: Readonly<Record<Language, { file: string; argv: string[]; image: string }>>;
export const RESULT_FIELDS: readonly string[];
export const SESSION_FIELDS: readonly string[];

export interface RunOptions {
  trust?: Trust;
  image?: string;
  stdin?: Bytes;
  /** the whole environment as KEY=VALUE; nothing is inherited */
  env?: string[];
  /** workspace path → content, written before the command starts */
  files?: Record<string, Bytes>;
  /** workspace paths whose contents come back in Result.files */
  collect?: string[];
  /** wall-clock limit, seconds */
  timeout?: number;
  /** memory limit, bytes */
  memory?: number;
  /** output cap per stream, bytes */
  output?: number;
  preference?: string;
  /** where it may run; nothing allowed rejects with ResidencyUnmet */
  residency?: Residency;
}

/** An invocation's or session's residency request (policy.residency). */
export interface Residency {
  regions?: string[];
  data_class?: string;
  labels?: Record<string, string>;
}

export interface SessionOptions {
  trust?: Trust;
  image?: string;
  /** each exec's default and longest wall-clock limit, seconds */
  timeout?: number;
  memory?: number;
  idleTimeout?: number;
  maxLifetime?: number;
  /** where it may run; the node must be allowed (ResidencyUnmet otherwise) */
  residency?: Residency;
}

export interface ExecOptions {
  stdin?: Bytes;
  env?: string[];
  /** working directory relative to the workspace */
  dir?: string;
  timeout?: number;
  output?: number;
}

export interface StartOptions {
  env?: string[];
  /** working directory relative to the workspace */
  dir?: string;
  output?: number;
  /** keep its stdin open for writeStdin */
  openStdin?: boolean;
}

/** What a write to a background process's stdin took. */
export interface StdinWrite {
  /** the bytes its stdin took; the rest is the caller's to send again */
  written: number;
  /** its stdin is closed (close was asked and all of data was written) */
  closed: boolean;
}

/** How a workload ended. */
export class Result {
  constructor(raw: Record<string, unknown>);
  readonly exitCode: number;
  readonly stdout: Uint8Array;
  readonly stderr: Uint8Array;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly signal: string;
  readonly backend: string;
  readonly accel: string;
  /** "" on a clean run (even with a non-zero exit code), else e.g. "timeout" or "oom" */
  readonly errorClass: string;
  readonly error: string;
  readonly files: Record<string, Uint8Array>;
  readonly usage: { wall?: number; cpu?: number; peak_memory?: number; fuel?: number };
  readonly timings: { queued?: string; acquired?: string; started?: string; finished?: string };
  readonly id: string;
  /** the API's JSON */
  readonly raw: Record<string, unknown>;
  /** stdout as text */
  readonly text: string;
  /** throws the typed error of a run a limit or a cancel ended; returns this otherwise */
  check(): this;
}

/** The API's invocation record (see server/openapi.yaml, Invocation). */
export interface InvocationRecord {
  id: string;
  tenant: string;
  state: "queued" | "running" | "done" | "failed" | "lost";
  result?: Record<string, unknown>;
  [key: string]: unknown;
}

export interface ExecRecord {
  id: string;
  session: string;
  argv: string[];
  dir?: string;
  state: "running" | "done" | "failed" | "interrupted" | "killed";
  /** a background process's, with its pid inside the sandbox */
  background?: boolean;
  open_stdin?: boolean;
  pid?: number;
  started: string;
  ended?: string;
  result?: Result;
}

/** One event of a live stream. */
export interface StreamEvent {
  seq: number;
  type: "state" | "stdout" | "stderr" | "result" | "exit";
  state?: string;
  at?: string;
  /** output bytes of a stdout or stderr event */
  data?: Uint8Array;
  /** the final record (result events) */
  invocation?: InvocationRecord;
  /** the exec's final record (exit events) */
  exec?: ExecRecord;
}

export interface FileInfo {
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  mod_time: string;
}

export interface RequestOptions {
  id?: string;
  eid?: string;
  query?: Record<string, string>;
  body?: BodyInit;
  ctype?: string;
  headers?: Record<string, string>;
  stream?: boolean;
}

export class Client {
  constructor(url: string, token: string, opts?: { timeout?: number });
  readonly url: string;
  readonly token: string;
  readonly timeout: number | undefined;
  request(route: Route, opts?: RequestOptions): Promise<Response>;
  json(route: Route, opts?: { id?: string; eid?: string; query?: Record<string, string>; payload?: unknown }): Promise<any>;
  run(argv: string[], opts?: RunOptions): Promise<Result>;
  /** a snippet in a fresh sandbox, as the MCP tool run_code */
  runCode(language: Language, code: string, opts?: Omit<RunOptions, "env" | "files">): Promise<Result>;
  submit(argv: string[], opts?: RunOptions): Promise<InvocationRecord>;
  invocation(id: string): Promise<InvocationRecord>;
  cancel(id: string): Promise<InvocationRecord>;
  events(id: string, opts?: { lastEventId?: number }): AsyncGenerator<StreamEvent>;
  stream(route: Route, ids: { id?: string; eid?: string }, lastEventId?: number): AsyncGenerator<StreamEvent>;
  backends(): Promise<Array<Record<string, unknown>>>;
  createSession(opts?: SessionOptions): Promise<Session>;
  session(id: string): Promise<Session>;
  sessions(): Promise<Session[]>;
  /** admin: install a component plugin with its manifest (object or JSON text) */
  installPlugin(manifest: object | string, component: Uint8Array): Promise<PluginView>;
  plugins(): Promise<PluginView[]>;
  plugin(name: string): Promise<PluginView>;
  /** admin */
  removePlugin(name: string): Promise<PluginView>;
  /**
   * args by parameter name or in order, as the JSON forms of their WIT types;
   * network is the policy the plugin's outgoing HTTP is held to (none denies it all)
   */
  callPlugin(name: string, fn: string, args?: Record<string, unknown> | unknown[],
    options?: { network?: NetworkPolicy }): Promise<PluginCallResult>;
}

/** An installed plugin as the API shows it. */
export interface PluginView {
  name: string;
  /** sha256:HEX of the component */
  component: string;
  trust: string;
  capabilities: string[];
  imports: string[];
  functions: Array<{ name: string; signature: string }>;
  limits: { fuel?: number; memory?: number; wall_ms?: number };
  signed_by?: string;
  /** "quick" while a large component runs its first load's quickly compiled code; "optimized" after */
  code?: "quick" | "optimized";
}

/** How a plugin call ended (whatever the end). */
export interface PluginCallResult {
  /** the result's JSON form; null unless end is "ok" */
  value: unknown;
  end: "ok" | "trap" | "out-of-fuel" | "timeout" | "cancelled";
  error: string;
  fuelUsed: number;
  /** seconds */
  took: number;
  freshInstance: boolean;
  /** the call's id in the node's log and egress decisions */
  invocation: string;
  /** what the plugin logged (wovyr:host/log), up to the call's cap */
  logs: Array<{ level: "debug" | "info" | "warn" | "error"; message: string; fields?: Record<string, string> }>;
  logsDropped: number;
}

/** Egress allow rules as the API writes them; none denies all egress. */
export interface NetworkPolicy {
  allow?: Array<{ host?: string; cidr?: string; ports?: number[]; protocol?: "tcp" | "udp" }>;
}

export class Session {
  constructor(client: Client, view: Record<string, unknown>);
  readonly client: Client;
  raw: Record<string, unknown>;
  id: string;
  tenant: string;
  backend: string;
  state: "creating" | "running" | "paused" | "ended" | "interrupted";
  image?: string;
  limits: Record<string, unknown>;
  policy: Record<string, unknown>;
  /** nanoseconds, as the API gives them */
  idleTimeout: number;
  maxLifetime: number;
  created: string;
  lastActive?: string;
  execs: number;
  endReason?: string;
  transitions: Array<{ state: string; at: string }>;
  /** how it resumes from a pause: "snapshot" (saved whole: files and processes kept) or "restart" (files kept, processes not); absent until its first pause */
  resumeMode?: "snapshot" | "restart";
  /** the size of its kept workspace while paused */
  pausedBytes?: number;
  update(view: Record<string, unknown>): void;
  refresh(): Promise<this>;
  exec(argv: string[], opts?: ExecOptions): Promise<Result>;
  execStream(argv: string[], opts?: ExecOptions): AsyncGenerator<StreamEvent>;
  execRecord(eid: string): Promise<ExecRecord>;
  execEvents(eid: string, opts?: { lastEventId?: number }): AsyncGenerator<StreamEvent>;
  write(path: string, data: Bytes, mode?: number): Promise<void>;
  read(path: string): Promise<Uint8Array>;
  list(path?: string): Promise<FileInfo[]>;
  stat(path: string): Promise<FileInfo>;
  remove(path: string): Promise<void>;
  readArchive(path?: string): Promise<Uint8Array>;
  writeArchive(data: Uint8Array, path?: string): Promise<void>;
  start(argv: string[], opts?: StartOptions): Promise<ExecRecord>;
  processes(): Promise<ExecRecord[]>;
  process(eid: string): Promise<ExecRecord>;
  kill(eid: string): Promise<ExecRecord>;
  writeStdin(eid: string, data: Bytes, opts?: { close?: boolean }): Promise<StdinWrite>;
  pause(): Promise<this>;
  resume(): Promise<this>;
  close(): Promise<this>;
  [Symbol.asyncDispose](): Promise<void>;
}
