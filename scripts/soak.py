#!/usr/bin/env python3
"""soak.py — a long run of mixed traffic with faults against `specd serve`, checking that nothing is lost.

  scripts/soak.py [--minutes 30] [--lanes 2] [--workers 6] [--fault-every 60] [--bin build/bin] [--out DIR]

Starts `specd serve` on the demo pair (--lanes lanes, a draft model each, one thread a worker) and for
--minutes drives it from --workers threads with a mix of requests: completions streamed and not,
streams cancelled after a few chunks, long prompts (~1500 tokens), n = 2, JSON-schema and regex outputs,
forced tool calls in chat, seeded sampling — over prompts that share long prefixes, so the prefix cache
churns. Every --fault-every seconds it injects the next fault of a cycle: kill -9 a verifier (the
supervisor restarts it: the lane restarts), SIGSTOP a drafter for 3 s, kill -9 a drafter, SIGSTOP a
verifier for 2 s.

Checks, written to DIR/report.md (and report.json, rss.svg: each process's resident memory over time):
  - every completed greedy or seeded response equals specd-generate's output for it (computed first);
  - a response whose reference specd-generate could not give is counted apart (unchecked: the harness's
    failure, e.g. the binary being rebuilt beside the soak), never as exact;
  - every failure is clean: an HTTP error with the OpenAI-shaped JSON error, or a stream that ends with an
    error event and [DONE]; anything else (no answer, a broken stream, a wrong output) is counted as lost;
  - each process's RSS and open fds after the warm-up (the first fifth of the run, at least 60 s) against
    the end, per process that lived through both, the RSS growth split into the large buffers allocated at
    start-up (anonymous mappings of 64 MiB or more: KV pools, weights; first touched as they fill) and the
    rest (the heap, where a leak would show);
  - the lanes' KV pools are all free once the traffic stops;
  - every counter of /metrics (names ending in _total) only grows.
Run by hand, not in CI (it takes its --minutes). Exit status: 0 when nothing was lost or inexact."""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, "models", "tinycode-16m")
DRAFT = os.path.join(ROOT, "models", "tinycode-3m")

PREFIXES = [
    "import os\nimport sys\n\n\ndef read_config(path):\n    \"\"\"Reads a config file.\"\"\"\n    with open(path) as f:\n"
    "        lines = f.readlines()\n    out = {}\n    for line in lines:\n        k, v = line.split('=')\n"
    "        out[k.strip()] = v.strip()\n    return out\n\n\n",
    "class Node:\n    def __init__(self, value):\n        self.value = value\n        self.next = None\n\n\n"
    "class LinkedList:\n    def __init__(self):\n        self.head = None\n\n    def push(self, value):\n"
    "        node = Node(value)\n        node.next = self.head\n        self.head = node\n\n",
]
SUFFIXES = ["def main():\n", "def parse(text):\n", "def test_push():\n", "def fib(n):\n", "class Stack:\n"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "size": {"type": "integer"}},
          "required": ["name", "size"], "additionalProperties": False}
REGEX = r"(def|class) [a-z_]{1,12}\([a-z, ]{0,20}\):"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}]
TEMPLATE = "{%- for m in messages %}# {{ m.role }}: {{ m.content }}\n{% endfor %}{% if tools %}calls = {% endif %}\n"
KINDS = [("plain", 3), ("stream", 3), ("cancel", 1), ("long", 1), ("n2", 1), ("schema", 1), ("regex", 1),
         ("tools", 1), ("sampled", 2)]


def prompt_of(rng, long=False):
    p = rng.choice(PREFIXES) + rng.choice(SUFFIXES)
    return (PREFIXES[0] + PREFIXES[1]) * 6 + p if long else p


def reference(bin_dir, prompt, max_tokens, extra):
    """specd-generate's text for a greedy (or seeded) request."""
    cmd = [os.path.join(bin_dir, "specd-generate"), "--model", TARGET, "--prompt", prompt, "--max-tokens",
           str(max_tokens), "--threads", "1", "--json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)["text"]


class RefError(Exception):
    """specd-generate could not give a reference (the harness's failure, not the server's)."""


class Refs:
    """References computed once per (prompt, max_tokens, kind), shared by the workers."""

    def __init__(self, bin_dir):
        self.bin, self.lock, self.cache = bin_dir, threading.Lock(), {}

    def get(self, prompt, max_tokens, extra):
        key = (prompt, max_tokens, tuple(extra))
        with self.lock:
            if key not in self.cache:
                try:
                    self.cache[key] = reference(self.bin, prompt, max_tokens, extra)
                except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as e:
                    raise RefError(repr(e)) from e
            return self.cache[key]


def post(port, path, body, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def clean_error(status, data):
    try:
        e = json.loads(data)["error"]
        return status >= 400 and all(k in e for k in ("message", "type", "param", "code"))
    except (ValueError, KeyError, TypeError):
        return False


def stream(port, body, cancel_after=None):
    """A streamed completion: (text, done, error_event) or None when cancelled on purpose."""
    s = socket.create_connection(("127.0.0.1", port), timeout=300)
    raw = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
              b"Connection: close\r\n\r\n" % len(raw) + raw)
    data, chunks = b"", 0
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
        chunks = data.count(b"data: {")
        if cancel_after is not None and chunks >= cancel_after:
            s.close()
            return None
    s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else 0
    if status != 200:
        return ("status", status, rest)
    text, err = "", False
    for line in rest.split(b"\n"):
        if line.startswith(b"data: {"):
            j = json.loads(line[6:])
            if "error" in j:
                err = True
            for ch in j.get("choices", []):
                text += ch.get("text") or ""
    return (text, b"data: [DONE]" in rest, err)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.n = {"requests": 0, "exact": 0, "ok": 0, "cancelled": 0, "failed_cleanly": 0, "lost": 0, "inexact": 0,
                  "unchecked": 0}
        self.notes = []

    def add(self, what, note=None):
        with self.lock:
            self.n[what] += 1
            if note and len(self.notes) < 50:
                self.notes.append(note)


def one_request(port, rng, refs, tally, kind):
    greedy = {"temperature": 0, "top_p": 1, "top_k": 0, "ignore_eos": True}
    mt = rng.choice([32, 48, 64])
    tally.add("requests")
    try:
        if kind in ("plain", "long", "n2", "schema", "regex", "sampled"):
            p = prompt_of(rng, long=kind == "long")
            body = {"prompt": p, "max_tokens": mt}
            extra = []
            if kind == "sampled":
                seed = rng.randrange(1, 1000)
                # "match" verification reproduces plain sampling with the seed (rejection is exact in distribution)
                body.update({"temperature": 0.8, "seed": seed, "top_p": 1, "top_k": 0, "ignore_eos": True,
                             "speculative": {"verify": "match"}})
                extra = ["--temperature", "0.8", "--seed", str(seed), "--ignore-eos"]
            else:
                body.update(greedy)
                extra = ["--ignore-eos"]
            if kind == "n2":
                body["n"] = 2
            if kind == "schema":
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
                body.pop("ignore_eos")
                extra = ["--json-schema", json.dumps(SCHEMA)]
            if kind == "regex":
                body["structured_outputs"] = {"regex": REGEX}
                body.pop("ignore_eos")
                extra = ["--regex", REGEX]
            status, data = post(port, "/v1/completions", body)
            if status != 200:
                tally.add("failed_cleanly" if clean_error(status, data) else "lost", "%s: %d %s" % (kind, status, data[:200]))
                return
            want = refs.get(p, mt, extra)
            texts = [c["text"] for c in json.loads(data)["choices"]]
            if all(t == want for t in texts):
                tally.add("exact")
            else:
                tally.add("inexact", "%s: %r != %r" % (kind, texts[0][:80], want[:80]))
        elif kind in ("stream", "cancel"):
            p = prompt_of(rng)
            body = dict(greedy, prompt=p, max_tokens=mt, stream=True)
            r = stream(port, body, cancel_after=3 if kind == "cancel" else None)
            if r is None:
                tally.add("cancelled")
            elif r[0] == "status":
                tally.add("failed_cleanly" if clean_error(r[1], r[2]) else "lost", "stream: %d" % r[1])
            elif r[2] and r[1]:
                tally.add("failed_cleanly", "stream: an error event")
            elif not r[1]:
                tally.add("lost", "stream without [DONE]")
            elif r[0] == refs.get(p, mt, ["--ignore-eos"]):
                tally.add("exact")
            else:
                tally.add("inexact", "stream: %r" % r[0][:80])
        else:  # tools: a forced call the tool accepts
            body = {"messages": [{"role": "user", "content": "The weather in Paris?"}], "max_tokens": 96,
                    "temperature": 0, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}
            status, data = post(port, "/v1/chat/completions", body)
            if status != 200:
                tally.add("failed_cleanly" if clean_error(status, data) else "lost", "tools: %d" % status)
                return
            calls = json.loads(data)["choices"][0]["message"].get("tool_calls") or []
            args = json.loads(calls[0]["function"]["arguments"]) if calls else None
            if args and isinstance(args.get("city"), str):
                tally.add("ok")
            else:
                tally.add("inexact", "tools: %r" % calls)
    except RefError as e:  # answered, but its reference could not be computed: counted apart
        tally.add("unchecked", "%s: reference: %s" % (kind, e))
    except (OSError, http.client.HTTPException, ValueError) as e:
        tally.add("lost", "%s: %r" % (kind, e))


def worker(port, seed, refs, tally, stop):
    rng = random.Random(seed)
    kinds = [k for k, w in KINDS for _ in range(w)]
    while not stop.is_set():
        one_request(port, rng, refs, tally, rng.choice(kinds))


def children(pid):
    """{role: pid} of the supervisor's children, from their command lines."""
    out = {}
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    except OSError:
        return out
    for k in kids:
        try:
            cmd = open("/proc/%s/cmdline" % k, "rb").read().split(b"\0")
        except OSError:
            continue
        prog = os.path.basename(cmd[0].decode())
        if prog == "specd-router":
            out["router"] = int(k)
        else:
            sock = next((a.decode() for a in cmd if a.endswith(b".sock")), "")
            lane = sock.rsplit("-", 1)[-1].split(".")[0] if sock else "?"
            out["%s-%s" % (prog.replace("specd-", ""), lane)] = int(k)
    return out


BIG_KB = 64 * 1024  # an anonymous mapping this large is a buffer sized at start-up: a KV pool, weights


def big_rss_kb(pid):
    """The resident kB of the process's large anonymous mappings (its KV pool, its weights): memory that is
    allocated once at start and first touched as it is used, apart from the rest (the heap), where a leak
    would show."""
    big, size, anon = 0, 0, False
    for l in open("/proc/%d/smaps" % pid):
        f = l.split()
        if not f[0].endswith(":"):  # a mapping's header: range perms offset dev inode [path]
            anon = len(f) < 6
        elif f[0] == "Size:":
            size = int(f[1])
        elif f[0] == "Rss:" and anon and size >= BIG_KB:
            big += int(f[1])
    return big


def proc_stats(pid):
    try:
        rss = next(int(l.split()[1]) for l in open("/proc/%d/status" % pid) if l.startswith("VmRSS:"))
        fds = len(os.listdir("/proc/%d/fd" % pid))
        return rss, fds, big_rss_kb(pid)
    except (OSError, StopIteration, ValueError):
        return None


def metrics(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    except (OSError, http.client.HTTPException):
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def faults(serve, stop, log, every):
    cycle = [("verifier-0", signal.SIGKILL, 0), ("drafter-1", signal.SIGSTOP, 3), ("drafter-0", signal.SIGKILL, 0),
             ("verifier-1", signal.SIGSTOP, 2)]
    i = 0
    while not stop.wait(every):
        role, sig, hold = cycle[i % len(cycle)]
        i += 1
        pid = children(serve.pid).get(role)
        if not pid:
            log.append((time.time(), "no %s to fault" % role))
            continue
        os.kill(pid, sig)
        log.append((time.time(), "%s %s" % (signal.Signals(sig).name, role)))
        if sig == signal.SIGSTOP:
            time.sleep(hold)
            os.kill(pid, signal.SIGCONT)


def svg(series, path, t0):
    """RSS (MB) over minutes, one line per process."""
    pts = [(t, v) for s in series.values() for t, v in s]
    if not pts:
        return
    tmax = max(t for t, _ in pts) - t0 or 1
    vmax = max(v for _, v in pts) * 1.1 or 1
    W, H, L, B = 720, 360, 60, 40
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
           % (W, H), '<rect width="100%" height="100%" fill="white"/>']
    x = lambda t: L + (t - t0) / tmax * (W - L - 20)
    y = lambda v: H - B - v / vmax * (H - B - 20)
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - 20, H - B))
    out.append('<line x1="%d" y1="20" x2="%d" y2="%d" stroke="black"/>' % (L, L, H - B))
    for k in range(5):
        v = vmax * k / 4
        out.append('<text x="%d" y="%.0f" text-anchor="end">%.0f</text>' % (L - 4, y(v) + 4, v))
        t = t0 + tmax * k / 4
        out.append('<text x="%.0f" y="%d" text-anchor="middle">%.1f</text>' % (x(t), H - B + 16, (t - t0) / 60))
    out.append('<text x="%d" y="%d" text-anchor="middle">minutes</text>' % ((W + L) / 2, H - 6))
    out.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">RSS, MB</text>' % (H / 2, H / 2))
    for i, (name, s) in enumerate(sorted(series.items())):
        c = colors[i % len(colors)]
        out.append('<polyline fill="none" stroke="%s" points="%s"/>' % (c, " ".join("%.1f,%.1f" % (x(t), y(v)) for t, v in s)))
        out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (L + 8, 32 + 13 * i, c, name))
    out.append("</svg>")
    open(path, "w").write("\n".join(out))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_health(port, secs=120):
    end = time.time() + secs
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return True
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.5)
    return False


def kv_idle(port, lanes, secs=60):
    end = time.time() + secs
    while time.time() < end:
        m = metrics(port)
        tot = [v for k, v in m.items() if k.startswith("specd_kv_blocks{")]
        free = [v for k, v in m.items() if k.startswith("specd_kv_blocks_free{")]
        if len(tot) == lanes and tot == free and all(tot):
            return True, tot, free
        time.sleep(1)
    return False, tot, free


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--lanes", type=int, default=2)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--fault-every", type=float, default=60)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="specd-soak-")
    os.makedirs(out, exist_ok=True)
    tmpl = os.path.join(out, "tools.jinja")
    open(tmpl, "w").write(TEMPLATE)
    port = free_port()
    log = open(os.path.join(out, "serve.log"), "w")
    serve = subprocess.Popen([os.path.join(a.bin, "specd"), "serve", "--target", TARGET, "--draft", DRAFT, "--lanes",
                              str(a.lanes), "--port", str(port), "--threads", "1", "--router-arg",
                              "--chat-template=" + tmpl, "--router-arg", "--resume-wait=60"],
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_health(port):
            print("soak: specd serve did not come up (%s)" % os.path.join(out, "serve.log"), file=sys.stderr)
            return 1
        time.sleep(3)
        refs, tally, stop = Refs(a.bin), Tally(), threading.Event()
        fault_log = []
        t0 = time.time()
        workers = [threading.Thread(target=worker, args=(port, 1000 + i, refs, tally, stop)) for i in range(a.workers)]
        for w in workers:
            w.start()
        fthread = threading.Thread(target=faults, args=(serve, stop, fault_log, a.fault_every))
        fthread.start()
        series, samples, counters, decreased = {}, [], {}, []
        warm = t0 + max(60, a.minutes * 60 / 5)
        while time.time() - t0 < a.minutes * 60:
            now = time.time()
            roles = children(serve.pid)
            snap = {}
            for role, pid in roles.items():
                st = proc_stats(pid)
                if st:
                    snap[role] = (pid,) + st
                    series.setdefault(role, []).append((now, st[0] / 1024))
            samples.append((now, snap))
            m = metrics(port)
            for k, v in m.items():
                if "_total" in k.split("{")[0]:
                    if k in counters and v < counters[k]:
                        decreased.append((k, counters[k], v))
                    counters[k] = v
            time.sleep(5)
        stop.set()
        for w in workers:
            w.join()
        fthread.join()
        idle_ok, tot, free = kv_idle(port, a.lanes)
        end_snap = {role: (pid,) + proc_stats(pid) for role, pid in children(serve.pid).items() if proc_stats(pid)}
        warm_snap = next((s for t, s in samples if t >= warm), samples[-1][1] if samples else {})
        growth = {}
        for role, (pid, rss, fds, big) in end_snap.items():
            w = warm_snap.get(role)
            if w and w[0] == pid:
                growth[role] = {"pid": pid, "rss_kb_warm": w[1], "rss_kb_end": rss, "fds_warm": w[2], "fds_end": fds,
                                "big_kb_warm": w[3], "big_kb_end": big}
        svg(series, os.path.join(out, "rss.svg"), t0)
        rep = {"minutes": a.minutes, "lanes": a.lanes, "workers": a.workers, "tally": tally.n, "notes": tally.notes,
               "faults": [(round(t - t0), f) for t, f in fault_log], "kv_idle": idle_ok, "kv_total": tot,
               "kv_free": free, "growth": growth, "counters_decreased": decreased}
        json.dump(rep, open(os.path.join(out, "report.json"), "w"), indent=1)
        lines = ["# Soak: %.0f minutes, %d lanes, %d workers, a fault every %.0f s" % (a.minutes, a.lanes, a.workers,
                                                                                      a.fault_every), "",
                 "| requests | exact | ok (tools) | cancelled | failed cleanly | lost | inexact | unchecked (no reference) |",
                 "|---|---|---|---|---|---|---|---|",
                 "| %(requests)d | %(exact)d | %(ok)d | %(cancelled)d | %(failed_cleanly)d | %(lost)d | %(inexact)d | "
                 "%(unchecked)d |"
                 % tally.n, "", "Faults injected: %d (%s)." % (len(fault_log), ", ".join(sorted(set(f for _, f in fault_log)))),
                 "", "KV pools all free at the end: %s (total %s, free %s)." % (idle_ok, tot, free),
                 "Counters that decreased: %d." % len(decreased), "",
                 "| process | pid | RSS after warm-up (MB) | RSS at the end (MB) | growth (MB) | of it, in buffers "
                 "≥ 64 MiB (MB) | of it, the rest (MB) | fds after warm-up | fds at the end |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for role, g in sorted(growth.items()):
            grow, grow_big = g["rss_kb_end"] - g["rss_kb_warm"], g["big_kb_end"] - g["big_kb_warm"]
            lines.append("| %s | %d | %.1f | %.1f | %+.1f | %+.1f | %+.1f | %d | %d |" % (
                role, g["pid"], g["rss_kb_warm"] / 1024, g["rss_kb_end"] / 1024, grow / 1024, grow_big / 1024,
                (grow - grow_big) / 1024, g["fds_warm"], g["fds_end"]))
        lines += ["", "RSS over time: rss.svg. Notes (first 50): " + "; ".join(tally.notes[:10])]
        open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
        print("\n".join(lines))
        print("soak: report in %s" % out)
        return 0 if tally.n["lost"] == 0 and tally.n["inexact"] == 0 and idle_ok and not decreased else 1
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()


if __name__ == "__main__":
    sys.exit(main())
