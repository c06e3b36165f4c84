#!/usr/bin/env python3
"""test_chat_pty.py - llama8ctl chat as a person uses it, on a pseudo-terminal,
against a real llama8d on the synthetic tiny checkpoint:

- a reply equals llama8ctl generate's for the same message;
- a paste of several lines is one message, and so is a \"\"\" block;
- Ctrl-C during a reply cancels it and keeps the conversation (the partial
  reply included), the next message is answered; Ctrl-C at the prompt drops
  the line; Ctrl-D ends with status 0, also one typed while a reply
  streams or at the end of a paste;
- /help, /system, /clear, /save, /load, an unknown command, //TEXT;
- a conversation that outgrows a 192-position context drops its oldest
  turns with a note instead of refusing (from a pipe);
- the system header's "Today Date" is today's local date (Meta's "%d %b %Y")
  unless --date (or $LLAMA8_CHAT_DATE) gives one: chat's reply is generate's
  for the ids tokenize --chat --date makes (from a pipe).

usage: test_chat_pty.py LLAMA8D LLAMA8CTL MKMODEL TOKENIZER
"""
import faulthandler
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

daemon, ctl, mkmodel, tokenizer = sys.argv[1:5]
faulthandler.dump_traceback_later(240, exit=True)   # a hang says where, before meson's timeout
tmp = tempfile.mkdtemp(prefix="l8-chat.")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, flush=True)


def start_daemon(name, *extra):
    sock = os.path.join(tmp, name + ".sock")
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([daemon, "--model", os.path.join(tmp, "model"), "--socket", sock,
                          "--config", "/dev/null", "--threads", "1", "--allowed-group", "",
                          *extra], stderr=log)
    for _ in range(600):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    return p, sock


class Chat:
    """llama8ctl chat on a pty: write keys, read what the terminal shows."""

    def __init__(self, sock, *args):
        env = dict(os.environ, XDG_STATE_HOME=os.path.join(tmp, "state"), TERM="dumb")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execve(ctl, [ctl, "chat", "--socket", sock, *args], env)
        self.out = b""
        self.log = []

    def send(self, data):
        self.log.append((time.time(), ">", data))
        os.write(self.fd, data)

    def read(self):
        try:
            b = os.read(self.fd, 65536)
        except OSError:
            return b""
        self.log.append((time.time(), "<", b))
        return b

    def expect(self, pattern, timeout=30):
        """Read until pattern matches what came since the last expect; that text."""
        rx = re.compile(pattern.encode() if isinstance(pattern, str) else pattern, re.S)
        end = time.time() + timeout
        while True:
            m = rx.search(self.out)
            if m:
                got, self.out = self.out[:m.end()], self.out[m.end():]
                return got.decode(errors="replace")
            left = end - time.time()
            if left <= 0:
                got = self.out.decode(errors="replace")
                check(False, "timed out waiting for %r; the terminal showed %r" % (pattern, got))
                self.out = b""
                return None
            r, _, _ = select.select([self.fd], [], [], min(left, 0.1))
            if r:
                self.out += self.read()

    def reply_to(self, line):
        """Send a line; the reply as printed, up to the next prompt."""
        self.send(line.encode() + b"\r")
        got = self.expect(r"\r?\n> $|\n> ", 60)
        return got

    def wait_exit(self, timeout):
        """The exit status once it ends by itself (None: not in time)."""
        end = time.time() + timeout
        while time.time() < end:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(st)
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if r:
                self.out += self.read()
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        return None

    def end(self, timeout=20):
        """Ctrl-D at the prompt, once; the exit status (None: it did not end)."""
        self.send(b"\x04")
        st = self.wait_exit(timeout)
        if st is None:
            t0 = self.log[0][0]
            for t, d, b in self.log[-12:]:     # what was typed (>) and shown (<) last
                print("  %.3f %s %r" % (t - t0, d, b))
        return st


def saved(chat, name):
    path = os.path.join(tmp, name)
    chat.send(("/save %s\r" % path).encode())
    chat.expect(r"saved to .*\n> ")
    with open(path) as f:
        return json.load(f)


def strip_echo(shown, line):
    """The reply as shown: what follows the echoed line, CRs gone, up to the prompt.
    Keys typed before the line editor has the terminal are echoed twice (the
    terminal's echo, then the editor's)."""
    text = shown.replace("\r\n", "\n").replace("\r", "")
    i = text.find(line + "\n")
    if i >= 0:
        text = text[i + len(line) + 1:]
    while text.startswith(line + "\n"):
        text = text[len(line) + 1:]
    return re.sub(r"\n> $", "\n", text)


subprocess.run([mkmodel, "--preset", "tiny", "--seed", "1", "--out", os.path.join(tmp, "model"),
                "--tokenizer", tokenizer, "--quiet"], check=True)
d1, sock = start_daemon("d1")
try:
    want = subprocess.run([ctl, "generate", "--socket", sock, "--max-new", "24", "Say hi"],
                          capture_output=True, stdin=subprocess.DEVNULL).stdout.decode()

    c = Chat(sock, "--max-new", "24")
    c.expect(r"Ctrl-D to end\r?\n> ")
    got = strip_echo(c.reply_to("Say hi"), "Say hi")
    check(got == want, "the chat's reply %r differs from generate's %r" % (got, want))

    # A paste: three lines in one write are one message.
    c.send(b"line one\nline two\nline three\r")
    c.expect(r"\n> ", 60)
    conv = saved(c, "paste.json")
    check(conv[-2] == {"role": "user", "content": "line one\nline two\nline three"},
          "a paste of three lines: %r" % conv[-2:])

    # A """ block, typed a line at a time.
    for line in [b'"""', b"first", b"second", b'"""']:
        c.send(line + b"\r")
        time.sleep(0.15)
    c.expect(r"\n> ", 60)
    conv = saved(c, "block.json")
    check(conv[-2] == {"role": "user", "content": "first\nsecond"}, "a block: %r" % conv[-2:])

    # Commands.
    c.send(b"/help\r")
    shown = c.expect(r"/load FILE.*\n> ")
    check(shown is not None and "/save FILE" in shown, "/help: %r" % shown)
    c.send(b"/bogus\r")
    shown = c.expect(r"\n> ")
    check(shown is not None and "unknown command /bogus" in shown, "/bogus: %r" % shown)
    c.send(b"/system Answer in French.\r")
    c.expect(r"system message is set.*\n> ")
    conv = saved(c, "system.json")
    check(conv[0] == {"role": "system", "content": "Answer in French."} and len(conv) == 7,
          "/system: %r" % conv[:2])
    c.send(b"/clear\r")
    c.expect(r"cleared.*\n> ")
    conv = saved(c, "cleared.json")
    check(conv == [{"role": "system", "content": "Answer in French."}], "/clear: %r" % conv)
    c.send(("/load %s\r" % os.path.join(tmp, "paste.json")).encode())
    shown = c.expect(r"loaded from .*\n> ")
    check(shown is not None and "4 messages loaded" in shown, "/load: %r" % shown)
    c.reply_to("//not a command")
    conv = saved(c, "slash.json")
    check(len(conv) == 6 and conv[4] == {"role": "user", "content": "/not a command"},
          "//TEXT: %r" % conv[4:])

    # Ctrl-C at the prompt drops the line; the program goes on.
    c.send(b"half a li")
    time.sleep(0.2)
    c.send(b"\x03")
    c.expect(r"\n> ")
    c.reply_to("again")
    conv = saved(c, "after_ctrl_c.json")
    check(conv[-2] == {"role": "user", "content": "again"}, "after Ctrl-C at the prompt: %r"
          % conv[-2:])
    st = c.end()
    check(st == 0, "Ctrl-D: chat's exit status %r" % st)

    # Ctrl-C during a long reply: cancelled, kept, and the chat goes on.
    c = Chat(sock, "--max-new", "3000", "--ignore-eos")
    c.expect(r"Ctrl-D to end\r?\n> ")
    c.send(b"Tell me a long story\r")
    c.expect(r"Tell me a long story\r?\n.{40}", 30)    # the reply has begun
    t0 = time.time()
    c.send(b"\x03")
    shown = c.expect(r"reply cancelled.*\n> ", 10)
    check(shown is not None and time.time() - t0 < 5, "Ctrl-C during a reply: %r" % shown)
    conv = saved(c, "cancelled.json")
    check(len(conv) == 2 and conv[0]["content"] == "Tell me a long story" and
          conv[1]["role"] == "assistant" and len(conv[1]["content"]) > 0,
          "the conversation after Ctrl-C: %r" % [(m["role"], len(m["content"])) for m in conv])
    c.send(b"\x03")     # a second Ctrl-C, at the prompt: the program stays
    time.sleep(0.2)
    c.send(b"/clear\r")
    c.expect(r"cleared.*\n> ")
    st = c.end()
    check(st == 0, "Ctrl-D after a cancelled reply: chat's exit status %r" % st)

    # The date in the system header: today's unless --date says (from a pipe).
    # The suite fixes the default for every other test ($LLAMA8_CHAT_DATE):
    # not here.
    plain_env = {k: v for k, v in os.environ.items() if k != "LLAMA8_CHAT_DATE"}

    def run(*args, stdin=b"", env=plain_env):
        r = subprocess.run([ctl, *args], input=stdin, capture_output=True, timeout=120,
                           env=env)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def chat_ids(*date):
        return run("tokenize", "--socket", sock, "--chat", *date, "Say hi")[1].strip()

    days = {time.strftime("%d %b %Y")}
    plain = chat_ids()
    days.add(time.strftime("%d %b %Y"))    # a run across midnight: either day
    today = [d for d in days if chat_ids("--date", d) == plain]
    check(len(today) == 1, "tokenize --chat without --date writes today's date %r: %s"
          % (sorted(days), plain))
    other = "01 Jan 2025"
    check(chat_ids("--date", other) != plain, "--date %s changes the prompt" % other)
    # chat as a person runs it (no --date: today's), and with --date.
    for date, opt in [(today[0] if today else "?", []), (other, ["--date", other])]:
        st, ids, err = run("generate", "--socket", sock, "--max-new", "24", "--ids",
                           chat_ids("--date", date))
        want = json.loads(run("detokenize", "--socket", sock, "--json", stdin=json.dumps(
            [int(i) for i in ids.split()]).encode())[1] or "{}").get("text", "?") + "\n"
        st2, got, err2 = run("chat", "--socket", sock, "--max-new", "24", *opt,
                             stdin=b"Say hi\n")
        check(st == 0 and st2 == 0 and want and got == want,
              "chat %r: reply %r; generate --ids of tokenize --chat --date %r: %r (%s %s)"
              % (opt, got, date, want, err, err2))
    # $LLAMA8_CHAT_DATE: the default instead of today's.
    fixed = run("tokenize", "--socket", sock, "--chat", "Say hi",
                env=dict(plain_env, LLAMA8_CHAT_DATE=other))[1].strip()
    check(fixed == chat_ids("--date", other), "LLAMA8_CHAT_DATE=%r: %s" % (other, fixed))
    st, out, _ = run("chat", "--help")
    check(st == 0 and "--date TEXT" in out and "$LLAMA8_CHAT_DATE, else today's" in out,
          "chat --help names --date and its default: %r" % out)
finally:
    d1.terminate()
    d1.wait()

# A 192-position context, from a pipe: the oldest turns go, nothing is refused.
d2, sock2 = start_daemon("d2", "--max-ctx", "192")
try:
    lines = "".join("Tell me something about the number %d.\n" % i for i in range(8))
    save = os.path.join(tmp, "small.json")
    r = subprocess.run([ctl, "chat", "--socket", sock2, "--max-new", "24"],
                       input=(lines + "/save %s\n" % save).encode(), capture_output=True,
                       timeout=120)
    err = r.stderr.decode()
    check(r.returncode == 0 and "oldest 2 messages dropped" in err and "refuse" not in err,
          "a full context: status %d, stderr %r" % (r.returncode, err))
    with open(save) as f:
        conv = json.load(f)
    check(2 <= len(conv) < 16 and conv[-2]["content"] == "Tell me something about the number 7.",
          "the conversation kept in 192 positions: %d messages, last %r" % (len(conv), conv[-2:]))
finally:
    d2.terminate()
    d2.wait()

subprocess.run(["rm", "-rf", tmp])
if failures:
    sys.exit(1)
print("ok: chat on a pty")
