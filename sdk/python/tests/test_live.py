"""The SDK against a live `wovyr serve` that this test starts: its own
state directory, the busybox template, the container backend certified by
the real escape battery there (about a minute), two tenants.

Needs root, as the daemon does; it fails, saying so, without it. The
binaries are $WOVYR_BIN (and wovyr-guest beside it), else they are built
from this checkout with `go build`.

    cd sdk/python && python3 -m unittest -v
"""

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
import urllib.request

import wovyr

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ALICE, BOB = "alice-token", "bob-token"
OPS = "ops-token"  # an admin: installs plugins


class _SigningKey:
    """The operator's plugin signing key, made for this run with the
    openssl command (the standard library has no ed25519)."""

    def __init__(self, tmp):
        self.pem = os.path.join(tmp, "plugin-key.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", self.pem], check=True, capture_output=True)
        der = subprocess.run(["openssl", "pkey", "-in", self.pem, "-pubout", "-outform", "DER"], check=True,
                             capture_output=True).stdout
        self.public_b64 = base64.b64encode(der[-32:]).decode()  # SubjectPublicKeyInfo ends in the raw key

    def sign(self, msg: bytes) -> bytes:
        # ed25519 signs in one shot, which needs the message's size: a file.
        path = self.pem + ".msg"
        with open(path, "wb") as f:
            f.write(msg)
        return subprocess.run(["openssl", "pkeyutl", "-sign", "-rawin", "-inkey", self.pem, "-in", path], check=True,
                              capture_output=True).stdout


def _binaries(tmp):
    if os.environ.get("WOVYR_BIN"):
        return os.environ["WOVYR_BIN"]
    exe = os.path.join(tmp, "wovyr")
    subprocess.run(["go", "build", "-o", exe, "./cmd/wovyr"], cwd=ROOT, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(tmp, "wovyr-guest"), "./cmd/wovyr-guest"], cwd=ROOT, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    return exe


class LiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise RuntimeError("the live SDK tests start wovyr serve, which needs root")
        cls.tmp = tempfile.mkdtemp(prefix="wovyr-py-test-")
        os.chmod(cls.tmp, 0o711)
        state = os.path.join(cls.tmp, "state")
        exe = _binaries(cls.tmp)
        for args in (["image", "build", "busybox"], ["certify", "--backend", "container"], ["certify", "--backend", "native"]):
            p = subprocess.run([exe, "--state-dir", state] + args, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"wovyr {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        conf, addr = os.path.join(cls.tmp, "serve.json"), os.path.join(cls.tmp, "addr")
        cls.key = _SigningKey(cls.tmp)
        with open(conf, "w") as f:
            json.dump({"cgroup_reconcile": "owned", "plugins": {"trust_keys": {"ops": cls.key.public_b64}}, "tenants": [
                {"name": "alice", "token_sha256": [hashlib.sha256(ALICE.encode()).hexdigest()]},
                {"name": "bob", "token_sha256": [hashlib.sha256(BOB.encode()).hexdigest()]},
                {"name": "ops", "token_sha256": [hashlib.sha256(OPS.encode()).hexdigest()], "admin": True}]}, f)
        cls.log = open(os.path.join(cls.tmp, "serve.log"), "w+")
        cls.daemon = subprocess.Popen([exe, "--state-dir", state, "serve", "--listen", "127.0.0.1:0", "--config", conf,
                                       "--addr-file", addr], stdout=cls.log, stderr=cls.log)
        deadline = time.time() + 120
        while time.time() < deadline:
            if cls.daemon.poll() is not None:
                raise RuntimeError("wovyr serve exited: " + cls._logtext())
            try:
                with open(addr) as f:
                    cls.url = "http://" + f.read().strip()
                with urllib.request.urlopen(cls.url + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("wovyr serve never became ready: " + cls._logtext())
        cls.alice, cls.bob = wovyr.Client(cls.url, ALICE), wovyr.Client(cls.url, BOB)
        cls.ops = wovyr.Client(cls.url, OPS)

    @classmethod
    def _logtext(cls):
        cls.log.seek(0)
        return cls.log.read()[-2000:]

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "daemon", None):
            cls.daemon.terminate()
            try:
                cls.daemon.wait(30)
            except subprocess.TimeoutExpired:
                cls.daemon.kill()
                cls.daemon.wait()
        if getattr(cls, "log", None):
            cls.log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_plugins(self):
        with open(os.path.join(ROOT, "plugin", "testdata", "calc", "calc.wasm"), "rb") as f:
            calc = f.read()
        digest = "sha256:" + hashlib.sha256(calc).hexdigest()
        manifest = {"name": "calc", "component": digest, "trust": "internal"}
        sig = self.key.sign(f"wovyr plugin manifest v1\ncomponent {digest}\n".encode())
        signed = dict(manifest, signature={"key_id": "ops", "ed25519": base64.b64encode(sig).decode()})

        with self.assertRaises(wovyr.Forbidden):
            self.alice.install_plugin(signed, calc)
        with self.assertRaises(wovyr.BadInput) as cm:
            self.ops.install_plugin(manifest, calc)
        self.assertEqual(cm.exception.field, "manifest.signature")
        view = self.ops.install_plugin(json.dumps(signed), calc)
        self.assertEqual((view["name"], view["component"], view["signed_by"]), ("calc", digest, "ops"))
        self.assertEqual([p["name"] for p in self.alice.plugins()], ["calc"])
        self.assertIn({"name": "add", "signature": "func(a: u32, b: u32) -> u32"}, self.alice.plugin("calc")["functions"])

        r = self.alice.call_plugin("calc", "add", {"a": 40, "b": 2})
        self.assertEqual((r.value, r.end, r.error), (42, "ok", ""))
        self.assertTrue(r.fuel_used > 0 and r.took > 0 and r.invocation.startswith("pc-") and r.logs == [])
        with self.assertRaises(wovyr.BadInput) as cm:
            self.alice.call_plugin("calc", "add", [1, 2], network={"allow": [{"host": "example.com", "ports": [443]}]})
        self.assertEqual(cm.exception.field, "network")
        self.assertEqual(self.alice.call_plugin("calc", "swap", [{"x": 1, "y": -2}]).value, {"x": -2, "y": 1})
        with self.assertRaises(wovyr.BadInput) as cm:
            self.alice.call_plugin("calc", "add", {"a": "x", "b": 1})
        self.assertEqual(cm.exception.field, "args.a")
        trap = self.alice.call_plugin("calc", "crash")
        self.assertEqual((trap.value, trap.end), (None, "trap"))
        self.assertTrue(self.alice.call_plugin("calc", "add", [1, 2]).fresh_instance)

        with self.assertRaises(wovyr.Forbidden):
            self.alice.remove_plugin("calc")
        self.assertEqual(self.ops.remove_plugin("calc")["name"], "calc")
        with self.assertRaises(wovyr.NotFound):
            self.alice.call_plugin("calc", "add", [1, 2])

    def test_run(self):
        r = self.alice.run(["sh", "-c", "echo $X; cat in.txt; cat; echo e >&2; exit 3"], env=["X=1"],
                           files={"in.txt": "file\n"}, stdin=b"stdin\n")
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.backend, r.error_class), (b"1\nfile\nstdin\n", b"e\n", 3, "container", ""))
        self.assertEqual(r.text, "1\nfile\nstdin\n")

    def test_output_cap_and_collect(self):
        r = self.alice.run(["sh", "-c", "head -c 5000 /dev/zero; echo out > o.txt"], output=1024, collect=["o.txt"])
        self.assertEqual((len(r.stdout), r.stdout_truncated, r.files), (1024, True, {"o.txt": b"out\n"}))

    def test_timeout(self):
        r = self.alice.run(["sleep", "10"], timeout=0.3)
        self.assertEqual(r.error_class, "timeout")
        with self.assertRaises(wovyr.Timeout):
            r.check()

    def test_typed_errors(self):
        with self.assertRaises(wovyr.BadInput) as cm:
            self.alice.run([])
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.field), (400, "bad-input", "workload.argv"))
        with self.assertRaises(wovyr.FloorUnmet) as cm:
            self.alice.run(["true"], trust="hostile")  # no microVM certified here
        self.assertEqual(cm.exception.status, 409)
        self.assertTrue(cm.exception.message.startswith("floor-unmet: no usable backend at or above microvm"), cm.exception.message)
        with self.assertRaises(wovyr.Unauthenticated):
            wovyr.Client(self.url, "wrong").run(["true"])
        with self.assertRaises(wovyr.BadInput):
            self.alice.run(["true"], image="no-such-image")
        self.assertIsInstance(wovyr.BadInput("x"), wovyr.WovyrError)

    def test_run_code(self):
        # Native (trusted) runs the host's interpreter.
        r = self.alice.run_code("python", "import sys\nprint(6 * 7, sys.stdin.read())", stdin="in", trust="trusted")
        self.assertEqual((r.stdout, r.exit_code, r.backend), (b"42 in\n", 0, "native"))
        # On container the language's template: "node" is not built here.
        with self.assertRaises(wovyr.BadInput) as cm:
            self.alice.run_code("javascript", "console.log(1)")
        self.assertEqual(cm.exception.field, "workload.image")
        self.assertIn('"node"', cm.exception.message)
        with self.assertRaises(wovyr.BadInput) as cm:
            self.alice.run_code("cobol", "x")
        self.assertEqual((cm.exception.field, cm.exception.status), ("language", 0))

    def test_events(self):
        rec = self.alice.submit(["sh", "-c", "echo one; echo two >&2"], trust="trusted")
        events = list(self.alice.events(rec["id"]))
        self.assertEqual(sorted(f"{e.type}:{e.data.decode()}" for e in events if e.type in ("stdout", "stderr")),
                         ["stderr:two\n", "stdout:one\n"])
        last = events[-1]
        self.assertEqual((last.type, last.state, last.invocation["id"]), ("result", "done", rec["id"]))
        self.assertEqual([e.seq for e in events], list(range(1, len(events) + 1)))
        self.assertEqual([e.seq for e in self.alice.events(rec["id"], last_event_id=len(events) - 1)], [len(events)])
        with self.assertRaises(wovyr.NotFound):
            list(self.bob.events(rec["id"]))

    def test_exec_stream(self):
        with self.alice.create_session(image="busybox", timeout=20) as s:
            events = list(s.exec_stream(["sh", "-c", "echo a; echo b >&2; exit 4"]))
            exit_ = events[-1]
            self.assertEqual((exit_.type, exit_.exec["state"], exit_.exec["result"].exit_code), ("exit", "done", 4))
            self.assertEqual(sorted(f"{e.type}:{e.data.decode()}" for e in events[:-1]), ["stderr:b\n", "stdout:a\n"])
            rec = s.exec_record(exit_.exec["id"])
            self.assertEqual((rec["state"], rec["result"].exit_code, rec["result"].stdout), ("done", 4, b"a\n"))
            self.assertEqual([e.seq for e in s.exec_events(exit_.exec["id"], last_event_id=1)], [e.seq for e in events[1:]])

    def test_readme_example(self):
        with open(os.path.join(os.path.dirname(__file__), "..", "README.md")) as f:
            code = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
        env = dict(os.environ, WOVYR_URL=self.url, WOVYR_TOKEN=ALICE,
                   PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual((p.stdout, p.stderr, p.returncode),
                         ("0 42\nhi from /workspace\none\ntwo\nexit 0\n409 floor-unmet\n", "", 0))

    def test_residency(self):
        # This node has no region: a request for one refuses, typed, and
        # starts nothing.
        for call in (lambda: self.alice.run(["true"], residency={"regions": ["nowhere-1"]}),
                     lambda: self.alice.create_session(residency={"regions": ["nowhere-1"]})):
            with self.assertRaises(wovyr.ResidencyUnmet) as cm:
                call()
            self.assertEqual(cm.exception.status, 409)

    def test_session(self):
        with self.alice.create_session(image="busybox", timeout=20, idle_timeout=60) as s:
            self.assertEqual((s.state, s.backend, s.tenant, len(s.id)), ("running", "container", "alice", 32))
            s.write("src/hello.sh", "echo hello $1 > out.txt\n", mode=0o755)
            r = s.exec(["sh", "src/hello.sh", "py"])
            self.assertEqual((r.exit_code, r.stdout), (0, b""))
            self.assertEqual(s.read("out.txt"), b"hello py\n")
            self.assertEqual([(e["path"], e["type"]) for e in s.list()], [("out.txt", "file"), ("src", "dir")])
            self.assertEqual(s.stat("src/hello.sh")["mode"], 0o755)
            self.assertEqual(s.exec(["cat"], stdin="piped").stdout, b"piped")
            # Another tenant: the same NotFound as a missing id.
            for call in (lambda: self.bob.session(s.id), lambda: wovyr.Session(self.bob, {"id": s.id}).read("out.txt")):
                with self.assertRaises(wovyr.NotFound) as cm:
                    call()
                self.assertEqual(cm.exception.status, 404)
            self.assertEqual([x.id for x in self.bob.sessions()], [])
            s.remove("out.txt")
            with self.assertRaises(wovyr.NotFound):
                s.read("out.txt")
            self.assertEqual(s.refresh().execs, 2)
            # The workspace as a tar archive both ways, then a pause and a
            # resume by the next call: the files come back.
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tf:
                data = b"lib v1\n"
                info = tarfile.TarInfo("pkg/lib.txt")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            s.write_archive(buf.getvalue(), "vendor")
            with tarfile.open(fileobj=io.BytesIO(s.read_archive()), mode="r") as tf:
                self.assertEqual(sorted(tf.getnames()), ["src", "src/hello.sh", "vendor", "vendor/pkg", "vendor/pkg/lib.txt"])
            bad = io.BytesIO()
            with tarfile.open(fileobj=bad, mode="w") as tf:
                tf.addfile(tarfile.TarInfo("../escape"), io.BytesIO(b""))
            with self.assertRaises(wovyr.BadInput) as cm:
                s.write_archive(bad.getvalue())
            self.assertEqual(cm.exception.message, 'bad-input (path): archive entry "../escape": path leaves the workspace')
            s.pause()
            self.assertEqual((s.state, s.resume_mode), ("paused", "restart"))
            self.assertEqual(s.exec(["cat", "vendor/pkg/lib.txt"]).stdout, b"lib v1\n")
            self.assertEqual(s.refresh().state, "running")
            self.assertEqual(s.pause().resume().state, "running")
            # A background process fed through its open stdin while it runs.
            cat = s.start(["cat"], open_stdin=True)
            self.assertEqual((cat["state"], cat["background"], cat["open_stdin"]), ("running", True, True))
            self.assertEqual(s.write_stdin(cat["id"], "one\n"), {"written": 4, "closed": False})
            self.assertEqual(s.write_stdin(cat["id"], b"two\n", close=True), {"written": 4, "closed": True})
            for _ in range(500):
                rec = s.process(cat["id"])
                if rec["state"] != "running":
                    break
                time.sleep(0.01)
            self.assertEqual((rec["state"], rec["result"].exit_code, rec["result"].stdout), ("done", 0, b"one\ntwo\n"))
            with self.assertRaises(wovyr.Conflict):
                s.write_stdin(cat["id"], "late")
            sleeper = s.start(["sleep", "600"])
            self.assertEqual([p["id"] for p in s.processes()], [cat["id"], sleeper["id"]])
            self.assertEqual(s.kill(sleeper["id"])["state"], "killed")
            self.assertEqual(s.process(sleeper["id"])["state"], "killed")
            self.assertEqual([p["id"] for p in s.processes()], [cat["id"]])
        self.assertEqual((s.state, s.end_reason), ("ended", "deleted"))
        with self.assertRaises(wovyr.Conflict):
            s.exec(["true"])


if __name__ == "__main__":
    unittest.main()
