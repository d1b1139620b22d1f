"""Pairs the SDK's run of /bin/true with the same call as a raw HTTP
request (urllib, the JSON written by hand), alternating call by call
against one daemon, and prints both medians and their ratio (the issue's
target: at most 1.2).

    python3 bench.py URL TOKEN [N] [TRUST]
"""

import json
import statistics
import sys
import time
import urllib.request

import wovyr


def main():
    url, token = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    trust = sys.argv[4] if len(sys.argv) > 4 else "trusted"
    c = wovyr.Client(url, token)
    body = json.dumps({"workload": {"kind": "command", "argv": ["/bin/true"]}, "policy": {"trust": trust}}).encode()

    def sdk():
        r = c.run(["/bin/true"], trust=trust)
        assert r.exit_code == 0, r

    def raw():
        req = urllib.request.Request(url + "/v1/invocations?wait=30s", data=body, method="POST",
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req) as resp:
            rec = json.loads(resp.read())
        assert rec["state"] == "done" and rec["result"]["exit_code"] == 0, rec

    for _ in range(10):
        sdk(), raw()
    ts = {"sdk": [], "raw": []}
    for i in range(n):
        pair = [("sdk", sdk), ("raw", raw)] if i % 2 == 0 else [("raw", raw), ("sdk", sdk)]
        for name, fn in pair:
            t0 = time.perf_counter()
            fn()
            ts[name].append(time.perf_counter() - t0)
    s, r = statistics.median(ts["sdk"]), statistics.median(ts["raw"])
    print(f"n={n} sdk p50 {s * 1000:.3f} ms  raw p50 {r * 1000:.3f} ms  sdk/raw {s / r:.3f}")


if __name__ == "__main__":
    main()
