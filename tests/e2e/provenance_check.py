"""provenance_check.py URL — the provenance checks of test_provenance.sh
against a running `specd serve` with a drafter. Prints ok / FAIL lines;
exits 1 when a check failed."""
import json
import sys
import urllib.request

URL = sys.argv[1]
FAILS = 0
PROMPTS = ["def fibonacci(n):", "class Stack:\n    def __init__(self):", "import os\nimport sys\n\ndef main():",
           "# return the sum of a list\ndef total(xs):"]


def check(name, cond, detail=""):
    global FAILS
    print(("ok   - " if cond else "FAIL - ") + name + ("" if cond else "  " + str(detail)[:400]))
    FAILS += 0 if cond else 1


def post(path, body):
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def stream(path, body):
    body = dict(body, stream=True)
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        lines = r.read().decode().split("\n")
    return [json.loads(l[6:]) for l in lines if l.startswith("data: ") and l != "data: [DONE]"]


def text_of(choice):
    return choice["message"]["content"] if "message" in choice else choice["text"]


def consistent(pv, spec, text, name, cut=False):
    """The provenance of one choice against its text and the totals."""
    toks, steps = pv["tokens"], pv["steps"]
    joined = "".join(t["text"] for t in toks)
    check(name + ": token texts join to the text", joined.startswith(text) if cut else joined == text,
          (joined, text))
    by_step = {}
    for t in toks:
        by_step.setdefault(t["step"], []).append(t)
    good = True
    for st in steps:
        ts = by_step.get(st["step"], [])
        n = min(st["accepted"], len(ts))
        srcs = [t["source"] for t in ts]
        want = [st["source"]] * n + ["verifier"] * (len(ts) - n)
        good &= srcs == want and (st["drafted"] > 0 or st["source"] == "none") and st["accepted"] <= st["drafted"]
        if not good:
            check(name + ": sources follow the steps", False, (st, srcs))
            return
    check(name + ": sources follow the steps", good)
    check(name + ": steps numbered 1..n", [s["step"] for s in steps] == list(range(1, len(steps) + 1)))
    if spec is not None:
        check(name + ": steps add up to the totals",
              sum(s["drafted"] for s in steps) == spec["draft_tokens"] and
              sum(s["accepted"] for s in steps) == spec["accepted_tokens"],
              (sum(s["drafted"] for s in steps), sum(s["accepted"] for s in steps), spec))


def prov_of_stream(chunks, index=0):
    toks, steps, text = [], [], ""
    for c in chunks:
        for ch in c["choices"]:
            if ch["index"] != index:
                continue
            d = ch.get("delta", {}).get("content") if "delta" in ch else ch.get("text")
            text += d or ""
            if "provenance" in ch:
                toks += ch["provenance"]["tokens"]
                steps += ch["provenance"]["steps"]
    return {"tokens": toks, "steps": steps}, text


sources = {"drafter": 0, "ngram": 0, "verifier": 0}
for path, key in (("/v1/completions", "prompt"), ("/v1/chat/completions", "messages")):
    for i, p in enumerate(PROMPTS):
        q = p if key == "prompt" else [{"role": "user", "content": p}]
        base = {key: q, "max_tokens": 64, "temperature": 0}
        plain = post(path, dict(base, speculative={"enabled": False}))
        off = post(path, base)
        on = post(path, dict(base, speculative={"provenance": True}))
        name = "%s %d" % (path, i)
        c0, c1, c2 = plain["choices"][0], off["choices"][0], on["choices"][0]
        check(name + ": greedy, the same text with and without provenance (and plain)",
              text_of(c0) == text_of(c1) == text_of(c2), (text_of(c0), text_of(c2)))
        check(name + ": no provenance unless asked", "provenance" not in c1 and "provenance" not in c0)
        pv = c2.get("provenance")
        check(name + ": one entry per token", pv is not None and len(pv["tokens"]) ==
              on["usage"]["completion_tokens"], on["usage"])
        if pv:
            consistent(pv, on["speculative"], text_of(c2), name)
            for t in pv["tokens"]:
                sources[t["source"]] += 1
        chunks = stream(path, dict(base, speculative={"provenance": True}))
        spv, stext = prov_of_stream(chunks)
        check(name + ": streamed, the same text", stext == text_of(c0), (stext, text_of(c0)))
        check(name + ": streamed, the same tokens",
              pv is not None and [t["id"] for t in spv["tokens"]] == [t["id"] for t in pv["tokens"]])
        last = [c for c in chunks if c.get("speculative")]
        consistent(spv, last[-1]["speculative"] if last else None, stext, name + " streamed")
        check(name + ": a streamed chunk without provenance asked carries none",
              all("provenance" not in ch for c in stream(path, base) for ch in c["choices"]))

# sampled with a seed: verify "match" keeps the seed's text token for token
for i, p in enumerate(PROMPTS[:2]):
    base = {"prompt": p, "max_tokens": 48, "temperature": 0.8, "seed": 11 + i}
    plain = post("/v1/completions", dict(base, speculative={"enabled": False}))
    on = post("/v1/completions", dict(base, speculative={"provenance": True, "verify": "match"}))
    off = post("/v1/completions", dict(base, speculative={"verify": "match"}))
    check("sampled %d: the same text with and without provenance and plain" % i,
          text_of(plain["choices"][0]) == text_of(on["choices"][0]) == text_of(off["choices"][0]))
    consistent(on["choices"][0]["provenance"], on["speculative"], text_of(on["choices"][0]), "sampled %d" % i)

# n = 2: each choice its own
two = post("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 32, "temperature": 0.7, "seed": 5, "n": 2,
                               "speculative": {"provenance": True, "verify": "match"}})
for c in two["choices"]:
    consistent(c["provenance"], None, text_of(c), "n=2 choice %d" % c["index"])

# a stop string: the text is cut, the tokens up to the one that completed it are there
# (the stop string is a piece from the middle of the greedy text, so it is met)
full = text_of(post("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 64, "temperature": 0})["choices"][0])
cut_at = len(full) // 2
piece = full[cut_at:cut_at + 4]
stop = post("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 64, "temperature": 0, "stop": [piece],
                                "speculative": {"provenance": True}})
c = stop["choices"][0]
check("stop string: finished by it", c["finish_reason"] == "stop" and full.startswith(text_of(c) + piece),
      (piece, c["finish_reason"], text_of(c)))
if c["finish_reason"] == "stop":
    consistent(c["provenance"], None, text_of(c), "stop string", cut=True)

# a fixed draft length: every step verifies drafts whatever the adaptive choice would make of a busy machine;
# which proposer supplied them (the drafter's span or the n-gram fallback) depends on timing, so the check is
# on accepted drafts of either (the labels are checked exactly against the fake verifier in
# test_playground_http.sh)
fixed = post("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 64, "temperature": 0,
                                 "speculative": {"provenance": True, "num_draft": 4}})
fc = fixed["choices"][0]
consistent(fc["provenance"], fixed["speculative"], text_of(fc), "num_draft 4")
for t in fc["provenance"]["tokens"]:
    sources[t["source"]] += 1
check("accepted drafts show up (%s)" % sources, sources["drafter"] + sources["ngram"] > 0, sources)
check("the verifier's tokens show up", sources["verifier"] > 0, sources)
sys.exit(1 if FAILS else 0)
