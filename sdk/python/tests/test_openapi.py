"""The SDK against server/openapi.yaml, so that the two cannot drift: every
route it calls is in the spec and every /v1 route of the spec is called
(or listed below as deliberately not offered); its error classes are the
spec's; the request fields it writes exist there; the Result and Session
fields it reads are exactly the spec's.

The standard library has no YAML parser; the spec's block structure (keys
by indentation, one-line flow values) is all this reads, with the small
reader below.
"""

import dataclasses
import os
import re
import unittest

import wovyr
from wovyr import client

SPEC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "server", "openapi.yaml")

# Routes of the spec the SDK leaves out on purpose: the admin-only
# certification and the spec itself.
NOT_OFFERED = {("POST", "/v1/backends/{name}/certify"), ("GET", "/v1/openapi.yaml")}


def parse(text):
    """Block YAML to nested dicts: "key:" opens a mapping, "key: value"
    stores the raw value; block scalars (|) and list items are skipped."""
    root, stack = {}, [(-1, None)]
    stack[0] = (-1, root)
    skip_above = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if skip_above is not None:
            if indent > skip_above:
                continue
            skip_above = None
        s = line.strip()
        if s.startswith("- "):
            continue
        m = re.match(r'^("[^"]+"|[^:]+):(?:\s+(.*))?$', s)
        if not m:
            continue
        key, val = m.group(1).strip('"'), m.group(2)
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if val is None:
            parent[key] = {}
            stack.append((indent, parent[key]))
        elif val in ("|", ">"):
            parent[key] = ""
            skip_above = indent
        else:
            parent[key] = val
    return root


def enum(v):
    if isinstance(v, dict):
        v = v.get("enum", "")
    else:
        m = re.search(r"enum: \[([^\]]*)\]", v)
        v = "[" + (m.group(1) if m else "") + "]"
    return {x.strip() for x in v.strip()[1:-1].split(",") if x.strip()}


class OpenAPITest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(SPEC) as f:
            cls.spec = parse(f.read())
        cls.schemas = cls.spec["components"]["schemas"]

    def props(self, name):
        s = self.schemas[name]
        return set(s["properties"].keys())

    def test_routes(self):
        spec = {(m.upper(), p) for p, ops in self.spec["paths"].items() if p.startswith("/v1/")
                for m in ops if m in ("get", "post", "put", "delete")}
        used = set(client.ROUTES.values())
        self.assertEqual(used - spec, set(), "the SDK calls routes the spec lacks")
        self.assertEqual(spec - used - NOT_OFFERED, set(), "the spec has routes the SDK neither offers nor lists")

    def test_error_classes(self):
        codes = enum(self.schemas["Error"]["properties"]["code"]) | enum(self.schemas["Result"]["properties"]["class"])
        self.assertEqual(set(wovyr.CLASSES), codes)

    def test_request_fields(self):
        wl = set(self.schemas["InvocationRequest"]["properties"]["workload"]["properties"])
        self.assertLessEqual({"kind", "argv", "image", "stdin", "env", "files", "collect"}, wl)
        self.assertLessEqual({"workload", "limits", "policy"}, self.props("InvocationRequest"))
        self.assertLessEqual({"wall", "memory", "output"}, self.props("Limits"))
        self.assertLessEqual({"trust", "preference", "residency"}, self.props("Policy"))
        self.assertEqual(enum(self.schemas["Policy"]["properties"]["trust"]), {"trusted", "internal", "untrusted", "hostile"})
        self.assertLessEqual({"image", "policy", "limits", "idle_timeout", "max_lifetime"}, self.props("SessionRequest"))
        self.assertLessEqual({"argv", "stdin", "env", "dir", "wall", "output"}, self.props("Exec"))
        self.assertLessEqual({"path", "data"}, self.props("File"))

    def test_read_fields_are_the_specs(self):
        self.assertEqual(set(client.RESULT_FIELDS), self.props("Result"))
        self.assertEqual(set(client.SESSION_FIELDS), self.props("Session"))
        self.assertEqual(set(client.TERMINAL) | {"queued", "running"}, enum(self.schemas["State"]))
        self.assertEqual({f.name for f in dataclasses.fields(wovyr.Event)}, self.props("Event"))

    def test_reader_sees_flow_values(self):
        # The reader itself, on the spec's own forms: a flow value's enum,
        # a block mapping's, and a block scalar skipped whole.
        doc = parse("a:\n  b: {type: string, enum: [x, y]}\n  c:\n    enum: [z]\n  d: |\n    e: no\n  f: 1\n")
        self.assertEqual(enum(doc["a"]["b"]), {"x", "y"})
        self.assertEqual(enum(doc["a"]["c"]), {"z"})
        self.assertEqual(set(doc["a"]), {"b", "c", "d", "f"})


if __name__ == "__main__":
    unittest.main()
