#!/usr/bin/env python3
"""An editor's request while a batch job fills the daemon: time to its first
token with the daemon idle, then with another client keeping every one of
llama8d's `max_batch` sequence slots busy (`llama8ctl bench`, long replies).
Without a fair share of the slots between clients, the request waits until
one of the batch's replies ends; with it, the batch's youngest request is
preempted for it at the next step.

    tests/bench/bench_fair.py [BUILD_DIR] [WORK_DIR]   (env N, BATCH, LOAD_NEW, PACE)

One llama8d on the golden tiny model (CPU engine) with --max-batch BATCH;
the load is `llama8ctl bench -c 2*BATCH --new LOAD_NEW` on one connection,
the editor's requests N one after another on one `llama8ctl pipe` (16
prompt tokens, 4 new; under the load one every PACE s at most; the time is
from writing the request's line to reading its first token). The load's
throughput meanwhile says what the fair share costs the batch job. Prints a table; writes WORK_DIR/bench-fair.json (rows:
method, kind, metrics, notes, error; the shape of
shared/reference/bench-h100-linnet.json).
"""
import json, os, re, statistics, subprocess, sys, tempfile, time

src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(src, "build")
work = sys.argv[2] if len(sys.argv) > 2 else os.path.join(build, "bench-fair")
N = int(os.environ.get("N", 20))
BATCH = int(os.environ.get("BATCH", 16))
LOAD_NEW = int(os.environ.get("LOAD_NEW", 512))
PACE = float(os.environ.get("PACE", 0.5))
ctl = os.path.join(build, "client", "llama8ctl")
daemon = os.path.join(build, "daemon", "llama8d")
model = os.path.join(src, "tests", "golden", "tiny-llama31-fp8")
tokenizer = os.path.join(src, "tests", "golden", "tokenizer", "tokenizer.json")
os.makedirs(work, exist_ok=True)

sock = os.path.join(tempfile.mkdtemp(), "llama8d.sock")
env = dict(os.environ, LLAMA8_SOCKET=sock)
log = open(os.path.join(work, "llama8d.log"), "w")
d = subprocess.Popen([daemon, "--model", model, "--socket", sock, "--backend", "cpu",
                      "--max-batch", str(BATCH), "--log-level", "notice"], stderr=log)
FIRST = re.compile(r"first token ([0-9.]+) ms after submit")


def first_token_ms(pace=0.0):
    """N requests one after another on one `llama8ctl pipe` (no process
    start between them), the i-th sent no earlier than i * pace s after the
    first: from writing each line to reading its first token."""
    p = subprocess.Popen([ctl, "pipe", "--tokenizer", tokenizer], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
    out = []
    try:
        if json.loads(p.stdout.readline())["event"] != "ready":
            raise RuntimeError("pipe: no ready event")
        start = time.monotonic()
        for i in range(N):
            ids = [1 + (i * 16 + k) % 2000 for k in range(16)]
            time.sleep(max(0.0, start + i * pace - time.monotonic()))
            t0 = time.monotonic()
            p.stdin.write(json.dumps({"id": i, "ids": ids, "max_new": 4}) + "\n")
            p.stdin.flush()
            first = None
            while True:
                e = json.loads(p.stdout.readline())
                if e["event"] == "token" and first is None:
                    first = (time.monotonic() - t0) * 1e3
                if e["event"] == "error":
                    raise RuntimeError(f"pipe: {e}")
                if e["event"] == "done":
                    break
            out.append(first)
    finally:
        p.stdin.close()
        p.wait()
    return out


def status():
    return json.loads(subprocess.run([ctl, "status", "--json"], env=env, check=True,
                                     capture_output=True, text=True, timeout=60).stdout)


def row(name, v, notes):
    return {"method": name, "kind": "llama8",
            "metrics": {"first_token_ms_p50": round(statistics.median(v), 2),
                        "first_token_ms_max": round(max(v), 2), "requests": len(v)},
            "notes": notes, "error": None}


rows = []
load = None
try:
    for _ in range(600):                             # the socket, then the model
        if os.path.exists(sock) or d.poll() is not None:
            break
        time.sleep(0.1)
    subprocess.run([ctl, "status"], env=env, check=True, stdout=subprocess.DEVNULL, timeout=60)
    first_token_ms()                                 # warm
    idle = first_token_ms()
    load = subprocess.Popen([ctl, "bench", "-n", "100000", "-c", str(2 * BATCH), "--new",
                             str(LOAD_NEW), "--prompt-min", "16", "--prompt-max", "64"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)                                  # the slots fill, the queue forms
    s0, t0 = status(), time.monotonic()
    busy = first_token_ms(PACE)
    s1, t1 = status(), time.monotonic()
    steps = max(s1["decode_steps"] - s0["decode_steps"], 1)
    load_tps = (s1["tokens_generated"] - s0["tokens_generated"]) / (t1 - t0)
    notes = (f"golden tiny model, cpu engine, --max-batch {BATCH}; load: llama8ctl bench "
             f"-c {2 * BATCH} --new {LOAD_NEW} on one connection; {N} requests of 16 "
             f"prompt tokens, 4 new, one after another on one llama8ctl pipe (under the "
             f"load at most one every {PACE} s)")
    rows.append(row("editor request, daemon idle", idle, notes))
    rows.append(row("editor request, batch job filling the slots", busy,
                    notes + f"; {s1['preemptions'] - s0['preemptions']} preemptions meanwhile"))
    rows[-1]["metrics"]["daemon_tokens_per_s"] = round(load_tps, 1)
    print(f"time to first token, {N} requests one after another on one pipe (ms)")
    print("%-46s %8s %8s" % ("method", "p50", "max"))
    for r in rows:
        print("%-46s %8.2f %8.2f" % (r["method"], r["metrics"]["first_token_ms_p50"],
                                     r["metrics"]["first_token_ms_max"]))
    print("busy / idle p50: %.1fx; while busy: %.0f tokens/s generated in all, decode steps "
          "%.2f ms at batch %.1f, %d preemptions" % (
              statistics.median(busy) / statistics.median(idle), load_tps,
              (s1["decode_time_s"] - s0["decode_time_s"]) * 1e3 / steps,
              (s1["decode_rows"] - s0["decode_rows"]) / steps,
              s1["preemptions"] - s0["preemptions"]))
except Exception as e:       # the JSON says what failed
    rows.append({"method": "editor request beside a batch job", "kind": "llama8", "metrics": {},
                 "notes": "", "error": str(e)})
    print("failed:", e, file=sys.stderr)
finally:
    if load:
        load.terminate()
        load.wait()
    d.terminate()
    d.wait()
with open(os.path.join(work, "bench-fair.json"), "w") as f:
    json.dump(rows, f, indent=1)
sys.exit(1 if any(r["error"] for r in rows) else 0)
