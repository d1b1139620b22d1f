"""The client of wovyr's HTTP API (/v1), standard library only."""

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from .errors import BackendFailure, BadInput, WovyrError, error_for

# ROUTES are the API operations this client calls, as server/openapi.yaml
# names them (tests/test_openapi.py checks them against it).
ROUTES = {
    "submit": ("POST", "/v1/invocations"),
    "get": ("GET", "/v1/invocations/{id}"),
    "cancel": ("DELETE", "/v1/invocations/{id}"),
    "events": ("GET", "/v1/invocations/{id}/events"),
    "backends": ("GET", "/v1/backends"),
    "session_create": ("POST", "/v1/sessions"),
    "session_list": ("GET", "/v1/sessions"),
    "session_get": ("GET", "/v1/sessions/{id}"),
    "session_delete": ("DELETE", "/v1/sessions/{id}"),
    "exec": ("POST", "/v1/sessions/{id}/exec"),
    "exec_get": ("GET", "/v1/sessions/{id}/exec/{eid}"),
    "exec_events": ("GET", "/v1/sessions/{id}/exec/{eid}/events"),
    "files": ("GET", "/v1/sessions/{id}/files"),
    "stat": ("GET", "/v1/sessions/{id}/files/stat"),
    "download": ("GET", "/v1/sessions/{id}/files/content"),
    "upload": ("PUT", "/v1/sessions/{id}/files/content"),
    "remove": ("DELETE", "/v1/sessions/{id}/files/content"),
    "archive_get": ("GET", "/v1/sessions/{id}/files/archive"),
    "archive_put": ("PUT", "/v1/sessions/{id}/files/archive"),
    "session_pause": ("POST", "/v1/sessions/{id}/pause"),
    "session_resume": ("POST", "/v1/sessions/{id}/resume"),
    "processes": ("GET", "/v1/sessions/{id}/processes"),
    "process_get": ("GET", "/v1/sessions/{id}/processes/{eid}"),
    "process_kill": ("DELETE", "/v1/sessions/{id}/processes/{eid}"),
    "process_stdin": ("POST", "/v1/sessions/{id}/processes/{eid}/stdin"),
    "plugin_install": ("POST", "/v1/plugins"),
    "plugin_list": ("GET", "/v1/plugins"),
    "plugin_get": ("GET", "/v1/plugins/{name}"),
    "plugin_delete": ("DELETE", "/v1/plugins/{name}"),
    "plugin_call": ("POST", "/v1/plugins/{name}/call"),
}

TERMINAL = ("done", "failed", "lost")

# run_code's languages, as the MCP tool's: the file the code goes to, the
# interpreter's argv, and the template each runs in by default.
INTERPRETERS = {"python": ("main.py", ["python3", "main.py"]), "javascript": ("main.js", ["node", "main.js"]),
                "bash": ("main.sh", ["bash", "main.sh"])}
LANGUAGE_IMAGES = {"python": "python", "javascript": "node", "bash": "python"}
CODE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]
_NS = 1_000_000_000  # the API's durations are nanoseconds

Bytes = Union[bytes, str]


def _b64(data: Optional[Bytes]) -> Optional[str]:
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def _unb64(s: Optional[str]) -> bytes:
    return base64.b64decode(s) if s else b""


def _ns(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else int(round(seconds * _NS))


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# RESULT_FIELDS are the Result properties read below; the test asserts they
# are exactly the spec's.
RESULT_FIELDS = ("id", "exit_code", "signal", "stdout", "stderr", "stdout_truncated", "stderr_truncated", "files",
                 "usage", "backend", "accel", "timings", "class", "error")


@dataclass
class Result:
    """How a workload ended. ``error_class`` is "" on a clean run (even with
    a non-zero exit code), else e.g. "timeout" or "oom"; ``raw`` is the
    API's JSON."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    signal: str = ""
    backend: str = ""
    accel: str = ""
    error_class: str = ""
    error: str = ""
    files: Dict[str, bytes] = field(default_factory=dict)
    usage: Dict[str, int] = field(default_factory=dict)
    timings: Dict[str, str] = field(default_factory=dict)
    id: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "Result":
        return cls(exit_code=r.get("exit_code", -1), stdout=_unb64(r.get("stdout")), stderr=_unb64(r.get("stderr")),
                   stdout_truncated=bool(r.get("stdout_truncated")), stderr_truncated=bool(r.get("stderr_truncated")),
                   signal=r.get("signal", ""), backend=r.get("backend", ""), accel=r.get("accel", ""),
                   error_class=r.get("class", ""), error=r.get("error", ""),
                   files={f["path"]: _unb64(f.get("data")) for f in r.get("files") or []},
                   usage=dict(r.get("usage") or {}), timings=dict(r.get("timings") or {}), id=r.get("id", ""), raw=dict(r))

    @property
    def text(self) -> str:
        """stdout as text (invalid UTF-8 replaced)."""
        return self.stdout.decode(errors="replace")

    def check(self) -> "Result":
        """Raise the typed error of a run a limit or a cancel ended
        (Timeout, OOM, …); return self otherwise."""
        if self.error_class:
            raise error_for(self.error_class, self.error or self.error_class)
        return self


class Client:
    """A client of one wovyr daemon: ``Client("http://127.0.0.1:8080", token)``.

    Every method raises a :class:`wovyr.WovyrError` subclass named after the
    error class the daemon answered (``BadInput``, ``FloorUnmet``, ``NotFound``…).
    ``timeout`` bounds each HTTP request, in seconds (None: no bound beyond
    the daemon's own ?wait= cap).
    """

    def __init__(self, url: str, token: str, *, timeout: Optional[float] = None):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    # -- transport ---------------------------------------------------------

    def _open(self, route: str, id: str = "", *, eid: str = "", query: Optional[Mapping[str, str]] = None,
              body: Optional[bytes] = None, ctype: str = "application/json",
              headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None):
        method, path = ROUTES[route]
        # A route's {id} or {name} is id.
        url = self.url + (path.replace("{id}", urllib.parse.quote(id, safe="")).replace("{name}", urllib.parse.quote(id, safe=""))
                          .replace("{eid}", urllib.parse.quote(eid, safe="")))
        if query:
            url += "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, data=body, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if body is not None:
            req.add_header("Content-Type", ctype)
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raise self._error(e) from None
        except (urllib.error.URLError, OSError) as e:
            raise BackendFailure(f"wovyr daemon at {self.url}: {e}") from e

    def _request(self, route: str, id: str = "", **kw):
        with self._open(route, id, timeout=self.timeout, **kw) as resp:
            return resp.status, resp.read()

    def _stream(self, route: str, id: str, *, eid: str = "", last_event_id: Optional[int] = None) -> Iterator["Event"]:
        """The decoded events of an event-stream route, as they come. A
        stream has no request timeout: it idles with keep-alive comments
        while the run produces nothing."""
        headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
        with self._open(route, id, eid=eid, headers=headers) as resp:
            data = []
            for raw in resp:
                line = raw.decode().rstrip("\r\n")
                if line == "":
                    if data:
                        yield Event.from_json(json.loads("\n".join(data)))
                    data = []
                elif line.startswith("data:"):
                    v = line[5:]
                    data.append(v[1:] if v.startswith(" ") else v)

    @staticmethod
    def _error(e: "urllib.error.HTTPError") -> WovyrError:
        raw = e.read()
        retry = e.headers.get("Retry-After")
        kw = {"status": e.code, "retry_after": float(retry) if retry and retry.isdigit() else None}
        try:
            b = json.loads(raw)
            return error_for(b["code"], b.get("message", ""), field=b.get("field", ""), **kw)
        except (ValueError, KeyError, TypeError):
            return BackendFailure(f"HTTP {e.code}: {raw[:200]!r}", **kw)

    def _json(self, route: str, id: str = "", *, eid: str = "", query=None, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        _, data = self._request(route, id, eid=eid, query=query, body=body)
        return json.loads(data) if data else None

    # -- invocations -------------------------------------------------------

    def run(self, argv: Sequence[str], *, trust: str = "internal", image: Optional[str] = None,
            stdin: Optional[Bytes] = None, env: Optional[Iterable[str]] = None,
            files: Optional[Mapping[str, Bytes]] = None, collect: Optional[Iterable[str]] = None,
            timeout: Optional[float] = None, memory: Optional[int] = None, output: Optional[int] = None,
            preference: Optional[str] = None, residency: Optional[Mapping[str, Any]] = None) -> Result:
        """Run ``argv`` once in a fresh sandbox and wait for it to end.

        Returns the :class:`Result` of a workload that ran (check
        ``exit_code``, and ``error_class`` or ``.check()`` for a timeout or
        OOM); raises the typed error of one that could not run (BadInput,
        FloorUnmet, …). ``files`` maps workspace paths to contents;
        ``timeout`` is the wall-clock limit in seconds. ``residency``
        (``{"regions": [...], "data_class": ..., "labels": {...}}``) narrows
        where it may run; nothing allowed raises ResidencyUnmet.
        """
        inv = _invocation(argv, trust=trust, image=image, stdin=stdin, env=env, files=files, collect=collect,
                          timeout=timeout, memory=memory, output=output, preference=preference, residency=residency)
        rec = self._json("submit", query={"wait": "30s"}, payload=inv)
        while rec["state"] not in TERMINAL:
            rec = self._json("get", rec["id"], query={"wait": "30s"})
        return self._result(rec)

    def run_code(self, language: str, code: str, *, image: Optional[str] = None, stdin: Optional[Bytes] = None,
                 trust: str = "internal", timeout: Optional[float] = None, output: Optional[int] = None) -> Result:
        """Run a snippet of ``language`` (python, javascript or bash), as
        the MCP tool run_code does: the code is written to main.py, main.js
        or main.sh in an empty workspace and its interpreter run on it, in
        ``image`` (default: LANGUAGE_IMAGES, the recipes of ``wovyr image
        build python`` and ``node``; native runs the host's interpreter)."""
        if language not in INTERPRETERS:
            raise BadInput(f"unknown language {language!r} (want python, javascript or bash)", field="language")
        file, argv = INTERPRETERS[language]
        return self.run(argv, trust=trust, image=image or LANGUAGE_IMAGES[language], stdin=stdin, env=CODE_ENV,
                        files={file: code}, timeout=timeout, output=output)

    def submit(self, argv: Sequence[str], **kw) -> Dict[str, Any]:
        """Start ``argv`` (the keywords of :meth:`run`) without waiting: the
        invocation's record once accepted; follow it with :meth:`events`."""
        return self._json("submit", payload=_invocation(argv, **kw))

    def events(self, id: str, *, last_event_id: Optional[int] = None) -> Iterator["Event"]:
        """The invocation's events as they happen: state changes, output
        chunks, then the result, which ends the stream. ``last_event_id``
        resumes after that event."""
        return self._stream("events", id, last_event_id=last_event_id)

    @staticmethod
    def _result(rec: Mapping[str, Any]) -> Result:
        res = rec.get("result")
        if res is None:
            raise BackendFailure(f"invocation {rec.get('id')} is {rec.get('state')} without a result")
        if rec["state"] == "failed":
            raise error_for(res.get("class", ""), res.get("error", ""))
        return Result.from_json(res)

    def invocation(self, id: str) -> Dict[str, Any]:
        """The invocation record ``id`` as the API returns it."""
        return self._json("get", id)

    def cancel(self, id: str) -> Dict[str, Any]:
        """Cancel the invocation ``id``; returns its final record."""
        return self._json("cancel", id)

    def backends(self) -> List[Dict[str, Any]]:
        """Every backend: strength, availability, certification, pools."""
        return self._json("backends")

    # -- sessions ----------------------------------------------------------

    def create_session(self, *, trust: str = "internal", image: Optional[str] = None, timeout: Optional[float] = None,
                       memory: Optional[int] = None, idle_timeout: Optional[float] = None,
                       max_lifetime: Optional[float] = None,
                       residency: Optional[Mapping[str, Any]] = None) -> "Session":
        """Create a long-lived sandbox. ``timeout`` is each exec's default
        and longest wall-clock limit, in seconds; ``residency`` must allow
        the node (ResidencyUnmet otherwise)."""
        req = _drop_none({"image": image,
                          "policy": _drop_none({"trust": trust, "residency": None if residency is None else dict(residency)}),
                          "limits": _drop_none({"wall": _ns(timeout), "memory": memory}),
                          "idle_timeout": _ns(idle_timeout), "max_lifetime": _ns(max_lifetime)})
        return Session(self, self._json("session_create", payload=req))

    def session(self, id: str) -> "Session":
        """The session ``id`` (NotFound if it is not this tenant's)."""
        return Session(self, self._json("session_get", id))

    def sessions(self) -> List["Session"]:
        """The tenant's sessions, live and recently ended, oldest first."""
        return [Session(self, s) for s in self._json("session_list")["sessions"]]


    # -- plugins -----------------------------------------------------------

    def install_plugin(self, manifest: Union[Mapping[str, Any], str], component: bytes) -> Dict[str, Any]:
        """Install a component plugin (an admin token's): ``manifest`` is the
        manifest (a mapping or its JSON text), ``component`` the .wasm bytes.
        Returns the plugin's view; a bad signature, digest or import is
        BadInput naming the manifest field."""
        m = json.loads(manifest) if isinstance(manifest, str) else dict(manifest)
        return self._json("plugin_install", payload={"manifest": m, "component": _b64(component)})

    def plugins(self) -> List[Dict[str, Any]]:
        """The installed plugins, by name, with their functions' WIT signatures."""
        return self._json("plugin_list")["plugins"]

    def plugin(self, name: str) -> Dict[str, Any]:
        """One plugin's view (NotFound if none)."""
        return self._json("plugin_get", name)

    def remove_plugin(self, name: str) -> Dict[str, Any]:
        """Uninstall a plugin (admin); returns what it was."""
        return self._json("plugin_delete", name)

    def call_plugin(self, name: str, function: str, args: Union[Mapping[str, Any], Sequence[Any], None] = None, *,
                    network: Optional[Mapping[str, Any]] = None) -> "PluginResult":
        """Call a plugin's function with ``args`` by parameter name (a
        mapping) or in order (a sequence), as JSON forms of their WIT types.
        ``network`` is the policy its outgoing HTTP is held to, as the API
        writes it (``{"allow": [{"host": "example.com", "ports": [443]}]}``);
        none denies it all. Returns how the call ended, whatever the end;
        arguments that do not match the signature raise BadInput, and
        nothing runs."""
        req: Dict[str, Any] = {"function": function}
        if args is not None:
            req["args"] = dict(args) if isinstance(args, Mapping) else list(args)
        if network is not None:
            req["network"] = dict(network)
        return PluginResult.from_json(self._json("plugin_call", name, payload=req))


@dataclass
class PluginResult:
    """How a plugin call ended. ``end`` is "ok", "trap", "out-of-fuel",
    "timeout" or "cancelled"; ``value`` is the result's JSON form (None
    unless ok); ``took`` is in seconds; ``logs`` are what the plugin logged
    (each a mapping of level, message and fields), ``logs_dropped`` those
    past the call's cap."""

    value: Any
    end: str
    error: str = ""
    fuel_used: int = 0
    took: float = 0.0
    fresh_instance: bool = False
    invocation: str = ""
    logs: List[Dict[str, Any]] = field(default_factory=list)
    logs_dropped: int = 0

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "PluginResult":
        return cls(value=r.get("value"), end=r.get("end", ""), error=r.get("error", ""), fuel_used=r.get("fuel_used", 0),
                   took=r.get("took_ns", 0) / 1e9, fresh_instance=bool(r.get("fresh_instance")),
                   invocation=r.get("invocation", ""), logs=list(r.get("logs") or []),
                   logs_dropped=r.get("logs_dropped", 0))


def _invocation(argv: Sequence[str], *, trust: str = "internal", image: Optional[str] = None,
                stdin: Optional[Bytes] = None, env: Optional[Iterable[str]] = None,
                files: Optional[Mapping[str, Bytes]] = None, collect: Optional[Iterable[str]] = None,
                timeout: Optional[float] = None, memory: Optional[int] = None, output: Optional[int] = None,
                preference: Optional[str] = None, residency: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    return {
        "workload": _drop_none({"kind": "command", "argv": list(argv), "image": image, "stdin": _b64(stdin),
                                "env": None if env is None else list(env),
                                "files": None if files is None else [{"path": p, "data": _b64(d)} for p, d in files.items()],
                                "collect": None if collect is None else list(collect)}),
        "limits": _drop_none({"wall": _ns(timeout), "memory": memory, "output": output}),
        "policy": _drop_none({"trust": trust, "preference": preference,
                              "residency": None if residency is None else dict(residency)}),
    }


@dataclass
class Event:
    """One event of a live stream: ``type`` is state, stdout, stderr,
    result or exit; ``data`` the output bytes of a stdout or stderr event;
    ``invocation`` the final record (result); ``exec`` the exec's final
    record (exit), its ``result`` a :class:`Result`."""

    seq: int
    type: str
    state: str = ""
    at: str = ""
    data: bytes = b""
    invocation: Optional[Dict[str, Any]] = None
    exec: Optional[Dict[str, Any]] = None

    @classmethod
    def from_json(cls, e: Mapping[str, Any]) -> "Event":
        ex = e.get("exec")
        if ex and ex.get("result") is not None:
            ex = dict(ex, result=Result.from_json(ex["result"]))
        return cls(seq=e["seq"], type=e["type"], state=e.get("state", ""), at=e.get("at", ""),
                   data=_unb64(e.get("data")), invocation=e.get("invocation"), exec=ex)


# SESSION_FIELDS are the Session properties the SDK exposes; the test
# asserts they are exactly the spec's.
SESSION_FIELDS = ("id", "tenant", "backend", "state", "image", "limits", "policy", "idle_timeout", "max_lifetime",
                  "created", "last_active", "execs", "end_reason", "transitions", "resume", "paused_bytes")


class Session:
    """A session: exec commands and move files in one workspace. Use it as
    a context manager to end it on exit."""

    def __init__(self, client: Client, view: Mapping[str, Any]):
        self._c = client
        self._update(view)

    def _update(self, view: Mapping[str, Any]) -> None:
        self.raw = dict(view)
        for k in SESSION_FIELDS:
            # "resume" is also the method: the field is resume_mode.
            setattr(self, "resume_mode" if k == "resume" else k, view.get(k))

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, backend={self.backend!r}, state={self.state!r})"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        if self.state in ("creating", "running", "paused"):
            self.close()

    def refresh(self) -> "Session":
        self._update(self._c._json("session_get", self.id))
        return self

    def exec(self, argv: Sequence[str], *, stdin: Optional[Bytes] = None, env: Optional[Iterable[str]] = None,
             dir: Optional[str] = None, timeout: Optional[float] = None, output: Optional[int] = None) -> Result:
        """Run one command in the workspace and return how it ended."""
        e = _exec_request(argv, stdin, env, dir, timeout, output)
        return Result.from_json(self._c._json("exec", self.id, payload=e))

    def exec_stream(self, argv: Sequence[str], *, stdin: Optional[Bytes] = None, env: Optional[Iterable[str]] = None,
                    dir: Optional[str] = None, timeout: Optional[float] = None,
                    output: Optional[int] = None) -> Iterator[Event]:
        """Start one command and yield its output as it is produced: stdout
        and stderr events, then exit (``event.exec["result"]`` is the
        :class:`Result`), which ends the stream."""
        e = _exec_request(argv, stdin, env, dir, timeout, output)
        rec = self._c._json("exec", self.id, query={"wait": "0"}, payload=e)
        return self.exec_events(rec["id"])

    def exec_record(self, eid: str) -> Dict[str, Any]:
        """One exec's record: running, or how it ended (``result`` a :class:`Result`)."""
        return _with_result(self._c._json("exec_get", self.id, eid=eid))

    def exec_events(self, eid: str, *, last_event_id: Optional[int] = None) -> Iterator[Event]:
        """The events of exec ``eid``, from the start or after ``last_event_id``."""
        return self._c._stream("exec_events", self.id, eid=eid, last_event_id=last_event_id)

    def write(self, path: str, data: Bytes, mode: Optional[int] = None) -> None:
        """Write ``data`` at ``path`` (relative to the workspace)."""
        q = {"path": path}
        if mode is not None:
            q["mode"] = format(mode, "o")
        self._c._request("upload", self.id, query=q, body=data.encode() if isinstance(data, str) else bytes(data),
                         ctype="application/octet-stream")

    def read(self, path: str) -> bytes:
        """The bytes of the file at ``path``."""
        return self._c._request("download", self.id, query={"path": path})[1]

    def list(self, path: str = "") -> List[Dict[str, Any]]:
        """The entries of the directory ``path`` (default: the workspace)."""
        return self._c._json("files", self.id, query={"path": path})["entries"]

    def stat(self, path: str) -> Dict[str, Any]:
        return self._c._json("stat", self.id, query={"path": path})

    def remove(self, path: str) -> None:
        """Remove ``path`` (a directory with its contents)."""
        self._c._request("remove", self.id, query={"path": path})

    def read_archive(self, path: str = "") -> bytes:
        """The directory ``path`` (default: the workspace) as a tar archive."""
        return self._c._request("archive_get", self.id, query={"path": path})[1]

    def write_archive(self, data: bytes, path: str = "") -> None:
        """Extract the tar archive ``data`` into the directory ``path``
        (default: the workspace); an archive with an entry that cannot be
        extracted there is refused whole (:class:`BadInput`)."""
        self._c._request("archive_put", self.id, query={"path": path}, body=bytes(data), ctype="application/x-tar")

    def start(self, argv: Sequence[str], *, env: Optional[Iterable[str]] = None, dir: Optional[str] = None,
              output: Optional[int] = None, open_stdin: bool = False) -> Dict[str, Any]:
        """Start a background process and return its record (running, with
        its ``pid``): it outlives later execs until it exits, is killed or
        the session ends. With ``open_stdin``, :meth:`write_stdin` feeds it."""
        e = _drop_none({"argv": list(argv), "env": None if env is None else list(env), "dir": dir, "output": output,
                        "background": True, "open_stdin": open_stdin or None})
        return self._c._json("exec", self.id, payload=e)

    def processes(self) -> List[Dict[str, Any]]:
        """The background processes the session holds, oldest first."""
        return self._c._json("processes", self.id)["processes"]

    def process(self, eid: str) -> Dict[str, Any]:
        """One background process, with its output so far (``result``)."""
        return _with_result(self._c._json("process_get", self.id, eid=eid))

    def kill(self, eid: str) -> Dict[str, Any]:
        """Kill a background process with its own session's processes; its final record."""
        return _with_result(self._c._json("process_kill", self.id, eid=eid))

    def write_stdin(self, eid: str, data: Bytes, *, close: bool = False) -> Dict[str, Any]:
        """Write ``data`` to a background process's stdin as far as its
        pipe takes it now (``written``; the rest is yours to send again),
        closing it after all of it if ``close`` (``closed``)."""
        query = {"close": "true"} if close else None
        _, raw = self._c._request("process_stdin", self.id, eid=eid, query=query,
                                  body=data.encode() if isinstance(data, str) else bytes(data),
                                  ctype="application/octet-stream")
        return json.loads(raw)

    def pause(self) -> "Session":
        """Pause now, the sandbox given back: saved whole where its backend
        can (``resume_mode`` "snapshot": files and processes kept), else its
        workspace kept ("restart"). The next exec or file call resumes it."""
        self._update(self._c._json("session_pause", self.id))
        return self

    def resume(self) -> "Session":
        """Resume a paused session now, on the backend it was created on."""
        self._update(self._c._json("session_resume", self.id))
        return self

    def close(self) -> "Session":
        """End the session: its sandbox is destroyed."""
        self._update(self._c._json("session_delete", self.id))
        return self


def _with_result(rec: Dict[str, Any]) -> Dict[str, Any]:
    if rec.get("result") is not None:
        rec["result"] = Result.from_json(rec["result"])
    return rec


def _exec_request(argv, stdin, env, dir, timeout, output) -> Dict[str, Any]:
    return _drop_none({"argv": list(argv), "stdin": _b64(stdin), "env": None if env is None else list(env), "dir": dir,
                       "wall": _ns(timeout), "output": output})
