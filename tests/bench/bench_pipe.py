#!/usr/bin/env python3
"""What an editor saves by keeping one `llama8ctl pipe` instead of running
`llama8ctl generate` per request: N requests one after another (each waits
for the previous reply), both ways, against one llama8d on the synthetic
tiny checkpoint (CPU engine), for R rounds.

    tests/bench/bench_pipe.py [BUILD_DIR] [WORK_DIR]     (env N, R, NEW)

The difference per request is the cost of a new process: exec, the
tokenizer's load (from its table cache), the connection and handshake.
Prints a table; writes WORK_DIR/bench-pipe.json (rows: method, kind,
metrics, notes, error; the shape of shared/reference/bench-h100-linnet.json).
"""
import json, os, subprocess, sys, tempfile, time

src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(src, "build")
work = sys.argv[2] if len(sys.argv) > 2 else os.path.join(build, "bench-pipe")
N, R, NEW = int(os.environ.get("N", 20)), int(os.environ.get("R", 3)), int(os.environ.get("NEW", 1))
ctl = os.path.join(build, "client", "llama8ctl")
daemon = os.path.join(build, "daemon", "llama8d")
mk = os.path.join(build, "daemon", "tools", "llama8-mkmodel")
os.makedirs(work, exist_ok=True)
model = os.path.join(work, "model-tiny")
if not os.path.exists(os.path.join(model, "config.json")):
    subprocess.run([mk, "--preset", "tiny", "--seed", "1", "--out", model, "--quiet",
                    "--tokenizer", os.path.join(src, "tests/golden/tokenizer/tokenizer.json")],
                   check=True)

sock = os.path.join(tempfile.mkdtemp(), "llama8d.sock")
env = dict(os.environ, LLAMA8_SOCKET=sock)
log = open(os.path.join(work, "llama8d.log"), "w")
d = subprocess.Popen([daemon, "--model", model, "--socket", sock, "--backend", "cpu"], stderr=log)


def prompt(i):
    return f"Question number {i}: name a river."


def by_generate():
    t0 = time.monotonic()
    for i in range(N):
        subprocess.run([ctl, "generate", "--max-new", str(NEW), prompt(i)], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def by_pipe():
    """Start to last reply, the pipe's start included."""
    t0 = time.monotonic()
    p = subprocess.Popen([ctl, "pipe"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, bufsize=1)
    if json.loads(p.stdout.readline())["event"] != "ready":
        raise RuntimeError("pipe: no ready event")
    for i in range(N):
        p.stdin.write(json.dumps({"id": i, "text": prompt(i), "max_new": NEW}) + "\n")
        p.stdin.flush()
        while True:
            e = json.loads(p.stdout.readline())
            if e["event"] == "error":
                raise RuntimeError(f"pipe: {e}")
            if e["event"] == "done":
                break
    t = time.monotonic() - t0
    p.stdin.close()
    if p.wait() != 0:
        raise RuntimeError("pipe: exit status %d" % p.returncode)
    return t


rows = []
try:
    for _ in range(600):                             # the socket, then the model
        if os.path.exists(sock) or d.poll() is not None:
            break
        time.sleep(0.1)
    subprocess.run([ctl, "status"], env=env, check=True, stdout=subprocess.DEVNULL, timeout=60)
    by_generate()                                    # warm: the tokenizer cache, page cache
    gen, pipe = [], []
    for _ in range(R):
        gen.append(by_generate() / N * 1e3)
        pipe.append(by_pipe() / N * 1e3)
    print(f"{N} requests one after another, {NEW} new token(s) each, {R} rounds")
    print("%-36s %10s %10s" % ("method", "ms/req min", "ms/req max"))
    for name, v in (("llama8ctl generate, one per request", gen), ("llama8ctl pipe, one for all", pipe)):
        print("%-36s %10.1f %10.1f" % (name, min(v), max(v)))
        rows.append({"method": name, "kind": "llama8",
                     "metrics": {"ms_per_request_min": round(min(v), 2),
                                 "ms_per_request_max": round(max(v), 2)},
                     "notes": f"{N} sequential requests, {NEW} new, cpu engine, synthetic tiny, {R} rounds",
                     "error": None})
    print("saved per request: %.1f ms (min vs min)" % (min(gen) - min(pipe)))
except Exception as e:       # the JSON says what failed
    rows.append({"method": "llama8ctl pipe vs generate", "kind": "llama8", "metrics": {},
                 "notes": "", "error": str(e)})
    print("failed:", e, file=sys.stderr)
finally:
    d.terminate()
    d.wait()
with open(os.path.join(work, "bench-pipe.json"), "w") as f:
    json.dump(rows, f, indent=1)
sys.exit(1 if any(r["error"] for r in rows) else 0)
