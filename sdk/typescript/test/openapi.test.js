// The SDK against server/openapi.yaml, so that the two cannot drift: every
// route it calls is in the spec and every /v1 route of the spec is called
// (or listed below as deliberately not offered); its error classes are the
// spec's; the Result and Session fields it reads are exactly the spec's.
//
// The spec's block structure (keys by indentation, one-line flow values)
// is all this reads, with the small reader below: no YAML dependency.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import * as wovyr from "../index.js";

const SPEC = new URL("../../../server/openapi.yaml", import.meta.url);

// Routes of the spec the SDK leaves out on purpose: the admin-only
// certification and the spec itself.
const NOT_OFFERED = new Set(["POST /v1/backends/{name}/certify", "GET /v1/openapi.yaml"]);

/** Block YAML to nested objects: "key:" opens a mapping, "key: value" stores the raw value. */
export function parse(text) {
  const root = {};
  const stack = [[-1, root]];
  let skipAbove = null;
  for (const line of text.split("\n")) {
    if (!line.trim() || line.trimStart().startsWith("#")) continue;
    const indent = line.length - line.trimStart().length;
    if (skipAbove !== null) {
      if (indent > skipAbove) continue;
      skipAbove = null;
    }
    const s = line.trim();
    if (s.startsWith("- ")) continue;
    const m = /^("[^"]+"|[^:]+):(?:\s+(.*))?$/.exec(s);
    if (!m) continue;
    const key = m[1].replace(/^"|"$/g, "");
    const val = m[2];
    while (stack.at(-1)[0] >= indent) stack.pop();
    const parent = stack.at(-1)[1];
    if (val === undefined) {
      parent[key] = {};
      stack.push([indent, parent[key]]);
    } else if (val === "|" || val === ">") {
      parent[key] = "";
      skipAbove = indent;
    } else {
      parent[key] = val;
    }
  }
  return root;
}

function enumOf(v) {
  let list;
  if (typeof v === "object") list = v.enum ?? "";
  else list = "[" + (/enum: \[([^\]]*)\]/.exec(v)?.[1] ?? "") + "]";
  return new Set(list.trim().slice(1, -1).split(",").map((x) => x.trim()).filter(Boolean));
}

const spec = parse(readFileSync(SPEC, "utf8"));
const schemas = spec.components.schemas;
const props = (name) => new Set(Object.keys(schemas[name].properties));

test("every route the SDK calls is the spec's, and every /v1 route is offered or listed", () => {
  const specRoutes = new Set();
  for (const [path, ops] of Object.entries(spec.paths)) {
    if (!path.startsWith("/v1/")) continue;
    for (const m of Object.keys(ops)) if (["get", "post", "put", "delete"].includes(m)) specRoutes.add(`${m.toUpperCase()} ${path}`);
  }
  const used = new Set(Object.values(wovyr.ROUTES).map(([m, p]) => `${m} ${p}`));
  assert.deepEqual([...used].filter((r) => !specRoutes.has(r)), [], "the SDK calls routes the spec lacks");
  assert.deepEqual([...specRoutes].filter((r) => !used.has(r) && !NOT_OFFERED.has(r)), [],
    "the spec has routes the SDK neither offers nor lists");
});

test("the error classes are the spec's", () => {
  const codes = new Set([...enumOf(schemas.Error.properties.code), ...enumOf(schemas.Result.properties.class)]);
  assert.deepEqual(new Set(Object.keys(wovyr.CLASSES)), codes);
  for (const [code, cls] of Object.entries(wovyr.CLASSES)) {
    const e = new cls("m", { status: 409 });
    assert.ok(e instanceof wovyr.WovyrError && e instanceof Error);
    assert.equal(e.code, code);
    assert.equal(e.name, cls.name);
  }
  assert.ok(wovyr.errorFor("no-such-class", "m") instanceof wovyr.BackendFailure);
});

test("the fields the SDK writes exist in the spec", () => {
  const wl = new Set(Object.keys(schemas.InvocationRequest.properties.workload.properties));
  for (const f of ["kind", "argv", "image", "stdin", "env", "files", "collect"]) assert.ok(wl.has(f), f);
  for (const f of ["workload", "limits", "policy"]) assert.ok(props("InvocationRequest").has(f), f);
  for (const f of ["wall", "memory", "output"]) assert.ok(props("Limits").has(f), f);
  for (const f of ["trust", "preference"]) assert.ok(props("Policy").has(f), f);
  for (const f of ["image", "policy", "limits", "idle_timeout", "max_lifetime"]) assert.ok(props("SessionRequest").has(f), f);
  for (const f of ["argv", "stdin", "env", "dir", "wall", "output"]) assert.ok(props("Exec").has(f), f);
  assert.deepEqual(enumOf(schemas.Policy.properties.trust), new Set(["trusted", "internal", "untrusted", "hostile"]));
});

test("the fields the SDK reads are exactly the spec's", () => {
  assert.deepEqual(new Set(wovyr.RESULT_FIELDS), props("Result"));
  assert.deepEqual(new Set(wovyr.SESSION_FIELDS), props("Session"));
  assert.deepEqual(new Set([...wovyr.TERMINAL, "queued", "running"]), enumOf(schemas.State));
  assert.deepEqual(new Set(["seq", "type", "state", "at", "data", "invocation", "exec"]), props("Event"));
  assert.deepEqual(enumOf(schemas.Event.properties.type), new Set(["state", "stdout", "stderr", "result", "exit"]));
});

test("the reader sees the spec's own forms", () => {
  const doc = parse("a:\n  b: {type: string, enum: [x, y]}\n  c:\n    enum: [z]\n  d: |\n    e: no\n  f: 1\n");
  assert.deepEqual(enumOf(doc.a.b), new Set(["x", "y"]));
  assert.deepEqual(enumOf(doc.a.c), new Set(["z"]));
  assert.deepEqual(Object.keys(doc.a), ["b", "c", "d", "f"]);
});
