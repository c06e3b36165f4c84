#!/usr/bin/env python3
"""An editor's request while a batch job fills the daemon: time to its first
token with the daemon idle, then with another client keeping every one of
llama8d's `max_batch` sequence slots busy (`llama8ctl bench`, long replies).
Without a fair share of the slots between clients, the request waits until
one of the batch's replies ends; with it, the batch's youngest request is
preempted for it at the next step.

    tests/bench/bench_fair.py [BUILD_DIR] [WORK_DIR]   (env N, BATCH, LOAD_NEW)

One llama8d on the golden tiny model (CPU engine) with --max-batch BATCH;
the load is `llama8ctl bench -c 2*BATCH --new LOAD_NEW` on one connection,
the editor's requests N one after another (`llama8ctl generate --stats`,
16 prompt tokens, 4 new; the time is the client's, from submit to the
first token). Prints a table; writes WORK_DIR/bench-fair.json (rows:
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
ctl = os.path.join(build, "client", "llama8ctl")
daemon = os.path.join(build, "daemon", "llama8d")
model = os.path.join(src, "tests", "golden", "tiny-llama31-fp8")
os.makedirs(work, exist_ok=True)

sock = os.path.join(tempfile.mkdtemp(), "llama8d.sock")
env = dict(os.environ, LLAMA8_SOCKET=sock)
log = open(os.path.join(work, "llama8d.log"), "w")
d = subprocess.Popen([daemon, "--model", model, "--socket", sock, "--backend", "cpu",
                      "--max-batch", str(BATCH), "--log-level", "notice"], stderr=log)
FIRST = re.compile(r"first token ([0-9.]+) ms after submit")


def first_token_ms():
    """N requests one after another: the time to each one's first token."""
    out = []
    for i in range(N):
        ids = ",".join(str(1 + (i * 16 + k) % 2000) for k in range(16))
        r = subprocess.run([ctl, "generate", "--ids", ids, "--max-new", "4", "--stats"],
                           env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=120)
        m = FIRST.search(r.stderr)
        if not m:
            raise RuntimeError("generate --stats said no first token: " + r.stderr)
        out.append(float(m.group(1)))
    return out


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
    busy = first_token_ms()
    st = json.loads(subprocess.run([ctl, "status", "--json"], env=env, check=True,
                                   capture_output=True, text=True, timeout=60).stdout)
    notes = (f"golden tiny model, cpu engine, --max-batch {BATCH}; load: llama8ctl bench "
             f"-c {2 * BATCH} --new {LOAD_NEW} on one connection; {N} requests of 16 "
             f"prompt tokens, 4 new, one after another")
    rows.append(row("editor request, daemon idle", idle, notes))
    rows.append(row("editor request, batch job filling the slots", busy,
                    notes + f"; {st['preemptions']} preemptions by the end"))
    print(f"time to first token, {N} requests one after another (ms)")
    print("%-46s %8s %8s" % ("method", "p50", "max"))
    for r in rows:
        print("%-46s %8.2f %8.2f" % (r["method"], r["metrics"]["first_token_ms_p50"],
                                     r["metrics"]["first_token_ms_max"]))
    print("busy / idle p50: %.1fx; mean step under load %.2f ms (batch %.1f)" % (
        statistics.median(busy) / statistics.median(idle),
        st["decode_time_s"] * 1e3 / max(st["decode_steps"], 1),
        st["decode_rows"] / max(st["decode_steps"], 1)))
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
