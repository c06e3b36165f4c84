"""llama8: talk to llama8d from Python, over libllama8client (ctypes).

    import llama8
    with llama8.Client() as c:
        for tok in c.generate("Write a haiku about shared memory.", max_new=48):
            print(tok.text, end="", flush=True)

A Client is one connection (the daemon's socket: ``socket``, else
``$LLAMA8_SOCKET``, else /run/llama8d/llama8d.sock), used by one thread at a
time. ``generate`` and ``chat`` submit a request and return a ``Stream``:
iterating it yields a ``Token`` per generated token as it arrives; several
streams of one client may be read in any order. Text goes through the
tokenizer of the model the daemon serves (found from the handshake) unless
``tokenizer`` names another. Whatever the daemon refuses raises ``Error``
with its code (``Error.code``, ``Error.name``: "BAD_PARAMS", ...) and its
message. ``AsyncClient`` is the same for asyncio, waiting on the client's
event descriptor.

The library: ``$LLAMA8_CLIENT_LIB`` (a path), else libllama8client.so.0 where
the dynamic linker finds it.
"""
from __future__ import annotations

import asyncio
import ctypes as C
import errno as _errno
import math
import os
from collections import deque
from typing import Any, AsyncIterator, Deque, Dict, Iterable, List, NamedTuple, Optional, \
    Sequence, Union

__all__ = ["Client", "AsyncClient", "Stream", "Token", "Error"]

_ERRLEN = 256
_MAX_EOS = 8
_EV_TOKEN, _EV_DONE, _EV_ERROR, _EV_STARTED, _EV_WAITING = 1, 2, 3, 4, 5
_ERR_BAD_GRAMMAR = 15
_CONSTRAINTS = {"grammar": 1, "json_schema": 2, "regex": 3, "json_object": 4}
_ROLES = {"system": 0, "user": 1, "assistant": 2, "ipython": 3, "tool": 3}


class _Info(C.Structure):
    _fields_ = [("client_id", C.c_uint64), ("protocol_version", C.c_uint32),
                ("daemon_version", C.c_char_p), ("model_name", C.c_char_p),
                ("model_dir", C.c_char_p), ("backend", C.c_char_p),
                ("vocab_size", C.c_uint32), ("context_length", C.c_uint32),
                ("bos_id", C.c_int32), ("n_eos", C.c_uint32),
                ("eos_ids", C.c_uint32 * _MAX_EOS), ("max_requests", C.c_uint32),
                ("max_prompt_tokens", C.c_uint32), ("max_new_tokens", C.c_uint32),
                ("max_stop_ids", C.c_uint32), ("max_priority", C.c_int32),
                ("sq_entries", C.c_uint32), ("eq_entries", C.c_uint32),
                ("arena_size", C.c_uint32)]


class _Params(C.Structure):
    _fields_ = [("temperature", C.c_float), ("top_k", C.c_uint32), ("top_p", C.c_float),
                ("min_p", C.c_float), ("repetition_penalty", C.c_float),
                ("seed", C.c_uint64), ("max_new_tokens", C.c_uint32),
                ("stop_ids", C.POINTER(C.c_uint32)), ("n_stop_ids", C.c_uint32),
                ("logprobs", C.c_bool), ("ignore_eos", C.c_bool), ("no_speculate", C.c_bool),
                ("priority", C.c_int32), ("constraint", C.c_int),
                ("constraint_text", C.c_char_p), ("constraint_len", C.c_size_t)]


class _Event(C.Structure):
    _fields_ = [("request_id", C.c_uint64), ("t_ns", C.c_uint64), ("token", C.c_uint32),
                ("index", C.c_uint32), ("logprob", C.c_float), ("kind", C.c_uint8),
                ("reason", C.c_uint8), ("code", C.c_uint16)]


# The first fields of struct l8c_status (llama8client.h); the call writes
# the whole struct into a buffer of _STATUS_BYTES.
class _Status(C.Structure):
    _fields_ = [("model_name", C.c_char * 128), ("backend", C.c_char * 16),
                ("pages_total", C.c_uint32), ("pages_used", C.c_uint32),
                ("pages_cached", C.c_uint32), ("page_size", C.c_uint32),
                ("clients", C.c_uint32), ("requests_running", C.c_uint32),
                ("requests_waiting", C.c_uint32), ("context_length", C.c_uint32),
                ("tokens_per_s", C.c_double), ("uptime_s", C.c_double),
                ("tokens_generated", C.c_uint64), ("requests_done", C.c_uint64),
                ("prompt_tokens", C.c_uint64), ("prompt_tokens_cached", C.c_uint64),
                ("draining", C.c_bool)]


_STATUS_BYTES = 16384   # well above sizeof(struct l8c_status)


class _Ids(C.Structure):
    _fields_ = [("ids", C.POINTER(C.c_uint32)), ("n", C.c_size_t), ("cap", C.c_size_t)]


class _Msg(C.Structure):
    _fields_ = [("role", C.c_int), ("content", C.c_char_p), ("len", C.c_size_t)]


class _ChatOpts(C.Structure):
    _fields_ = [("today_date", C.c_char_p), ("knowledge_cutoff", C.c_char_p),
                ("add_generation_prompt", C.c_bool), ("special_in_content", C.c_bool),
                ("tools", C.POINTER(C.c_char_p)), ("n_tools", C.c_size_t),
                ("tools_in_system", C.c_bool)]


def _load_lib() -> C.CDLL:
    lib = C.CDLL(os.environ.get("LLAMA8_CLIENT_LIB") or "libllama8client.so.0")
    P, I, S, VP = C.POINTER, C.c_int, C.c_size_t, C.c_void_p
    sig = {
        "l8c_params_init": (None, [P(_Params)]),
        "l8c_connect": (I, [C.c_char_p, C.c_char_p, P(VP), C.c_char_p]),
        "l8c_close": (None, [VP]),
        "l8c_info": (P(_Info), [VP]),
        "l8c_last_error": (C.c_char_p, [VP, P(I)]),
        "l8c_submit": (I, [VP, P(C.c_uint32), C.c_uint32, P(_Params), P(C.c_uint64)]),
        "l8c_cancel": (I, [VP, C.c_uint64]),
        "l8c_request_error": (C.c_char_p, [VP, C.c_uint64]),
        "l8c_poll_events": (I, [VP, P(_Event), I]),
        "l8c_wait_events": (I, [VP, P(_Event), I, I]),
        "l8c_event_fd": (I, [VP]),
        "l8c_ctl_fd": (I, [VP]),
        "l8c_prepare_wait": (I, [VP]),
        "l8c_status": (I, [VP, VP, I]),
        "l8c_err_name": (C.c_char_p, [I]),
        "l8c_error_text": (C.c_char_p, [P(_Event), C.c_char_p]),
        "l8c_wait_text": (C.c_char_p, [P(_Event), C.c_char_p]),
        "l8c_done_name": (C.c_char_p, [I]),
        "l8tok_load": (I, [C.c_char_p, P(VP)]),
        "l8tok_free": (None, [VP]),
        "l8tok_encode": (I, [VP, C.c_char_p, S, C.c_uint, P(_Ids)]),
        "l8tok_decode": (I, [VP, P(C.c_uint32), S, P(VP), P(S)]),
        "l8tok_ids_free": (None, [P(_Ids)]),
        "l8tok_stream_new": (I, [VP, P(VP)]),
        "l8tok_stream_free": (None, [VP]),
        "l8tok_stream_push": (I, [VP, C.c_uint32, P(VP), P(S)]),
        "l8tok_stream_flush": (I, [VP, P(VP), P(S)]),
        "l8chat_opts_init": (None, [P(_ChatOpts)]),
        "l8chat_encode": (I, [VP, P(_Msg), S, P(_ChatOpts), P(_Ids)]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


_lib: Optional[C.CDLL] = None
_libc = C.CDLL(None)
_libc.free.argtypes = [C.c_void_p]


def _L() -> C.CDLL:
    global _lib
    if _lib is None:
        _lib = _load_lib()
    return _lib


class Error(Exception):
    """What went wrong: the daemon's error code where it gave one.

    code: the protocol's error code (llama8.proto ErrorCode) or None;
    name: its name ("BAD_PARAMS", ...), else the errno's ("ECONNREFUSED");
    message: what was wrong, in words.
    """

    def __init__(self, message: str, code: Optional[int] = None, name: str = ""):
        super().__init__(f"{name}: {message}" if name else message)
        self.message, self.code, self.name = message, code, name


def _errno_error(rc: int, what: str, client: Any = None) -> Error:
    msg, code = "", C.c_int(0)
    if client is not None:
        raw = _L().l8c_last_error(client, C.byref(code))
        msg = raw.decode("utf-8", "replace") if raw else ""
    name = _errno.errorcode.get(-rc, str(rc))
    if code.value:
        return Error(msg or what, code.value, _L().l8c_err_name(code.value).decode())
    return Error(f"{what}: {msg or os.strerror(-rc)}", None, name)


class Token(NamedTuple):
    """One generated token: its id, the text it completes ("" while a
    character's bytes are held back, and for a stop id), its index in the
    reply, its log-probability (None unless asked for with logprobs). Bytes
    still held back when the reply ends come as a last Token of id -1 (as
    U+FFFD, like llama8ctl's done text)."""
    id: int
    text: str
    index: int
    logprob: Optional[float]


class Stream:
    """One request's reply. Iterate for its tokens; afterwards ``reason``
    says why it ended ("eos", "stop", "length", "context", "cancelled",
    "grammar") and ``tokens`` how many were generated. ``text()`` reads the
    rest and returns the whole reply. While the request waits to start,
    ``waiting`` says why ("behind 3 requests", "for KV pages: needs 12, 4
    free"), as the daemon last told it (None: it never waited long)."""

    def __init__(self, client: "Client", rid: int, params: _Params, stops: Sequence[int]):
        self._c, self.request_id = client, rid
        self._q: Deque[Any] = deque()
        self._stops = set(stops)
        self.reason: Optional[str] = None
        self.tokens = 0
        self.prompt_tokens: Optional[int] = None
        self.cached_tokens: Optional[int] = None
        self.waiting: Optional[str] = None
        self._decoder = client._new_decoder()
        self._params = params   # the stop ids stay alive while it runs

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> Token:
        while True:
            t = self._take()
            if t is not None:
                return t
            if self.reason is not None:
                raise StopIteration
            self._c._pump(-1)

    def _take(self) -> Optional[Token]:
        """The next token already received, or None; raises a queued error."""
        while self._q:
            item = self._q.popleft()
            if isinstance(item, Error):
                self.reason = "error"
                self._c._streams.pop(self.request_id, None)
                raise item
            if isinstance(item, Token):
                return item
        return None

    def text(self) -> str:
        return "".join(t.text for t in self)

    def cancel(self) -> None:
        """Ask the daemon to stop this reply (it ends with reason "cancelled")."""
        if self.reason is None:
            self._c.cancel(self.request_id)

    def _event(self, e: _Event) -> None:
        if e.kind == _EV_STARTED:
            self.prompt_tokens, self.cached_tokens = e.token, e.index
        elif e.kind == _EV_WAITING:
            buf = C.create_string_buffer(_ERRLEN)
            self.waiting = _L().l8c_wait_text(C.byref(e), buf).decode()
        elif e.kind == _EV_TOKEN:
            text = "" if e.token in self._stops else self._c._push(self._decoder, e.token)
            lp = None if math.isnan(e.logprob) else e.logprob
            self._q.append(Token(e.token, text, e.index, lp))
        elif e.kind == _EV_DONE:
            rest = self._c._flush(self._decoder)
            if rest:
                self._q.append(Token(-1, rest, e.index, None))
            self.tokens = e.index
            self.reason = _L().l8c_done_name(e.reason).decode()
            self._c._streams.pop(self.request_id, None)
        elif e.kind == _EV_ERROR:
            name = _L().l8c_err_name(e.code).decode()
            why = None
            if e.code == _ERR_BAD_GRAMMAR:
                why = _L().l8c_request_error(self._c._h, e.request_id)
            if not why:
                buf = C.create_string_buffer(_ERRLEN)
                why = _L().l8c_error_text(C.byref(e), buf)
            self._q.append(Error(why.decode("utf-8", "replace"), e.code, name))
            self.reason = "error"

    def __del__(self) -> None:
        d, self._decoder = getattr(self, "_decoder", None), None
        if d and _lib is not None:
            _lib.l8tok_stream_free(d)


class Client:
    """One connection to llama8d (see the module's help)."""

    def __init__(self, socket: Optional[str] = None, name: str = "python",
                 tokenizer: Optional[str] = None):
        h, err = C.c_void_p(), C.create_string_buffer(_ERRLEN)
        rc = _L().l8c_connect(socket.encode() if socket else None, name.encode(),
                              C.byref(h), err)
        if rc < 0:
            raise Error(err.value.decode("utf-8", "replace") or os.strerror(-rc), None,
                        _errno.errorcode.get(-rc, str(rc)))
        self._h = h
        self._tok_path = tokenizer
        self._tok: Optional[C.c_void_p] = None
        self._streams: Dict[int, Stream] = {}
        self._events = (_Event * 64)()
        i = _L().l8c_info(h).contents
        self.info: Dict[str, Any] = {
            f: (getattr(i, f).decode() if isinstance(getattr(i, f), bytes) else getattr(i, f))
            for f, _ in _Info._fields_ if f not in ("eos_ids", "n_eos")}
        self.info["eos_ids"] = list(i.eos_ids[:i.n_eos])

    # -- connection

    def close(self) -> None:
        """Close the connection; the daemon cancels what still runs."""
        if self._h:
            _L().l8c_close(self._h)
            self._h = None
        if self._tok:
            _L().l8tok_free(self._tok)
            self._tok = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- text

    def _tokenizer(self) -> C.c_void_p:
        if self._tok is None:
            path = self._tok_path or os.environ.get("LLAMA8_TOKENIZER") or self.info["model_dir"]
            t = C.c_void_p()
            rc = _L().l8tok_load(path.encode(), C.byref(t))
            if rc < 0:
                raise Error(f"loading the tokenizer {path}: {os.strerror(-rc)}", None,
                            _errno.errorcode.get(-rc, str(rc)))
            self._tok = t
        return self._tok

    def tokenize(self, text: str, special: bool = False) -> List[int]:
        """text -> token ids (no <|begin_of_text|>). special: recognise special
        tokens written in the text ("<|eot_id|>"); by default they are text."""
        b = text.encode("utf-8")
        ids = _Ids()
        rc = _L().l8tok_encode(self._tokenizer(), b, len(b), 0 if special else 1, C.byref(ids))
        try:
            if rc < 0:
                raise Error(f"encoding: {os.strerror(-rc)}", None, _errno.errorcode.get(-rc, ""))
            return ids.ids[:ids.n] if ids.n else []
        finally:
            _L().l8tok_ids_free(C.byref(ids))

    def detokenize(self, ids: Sequence[int]) -> str:
        """token ids -> text (bytes that are not UTF-8 as U+FFFD)."""
        arr = (C.c_uint32 * len(ids))(*ids)
        p, n = C.c_void_p(), C.c_size_t()
        rc = _L().l8tok_decode(self._tokenizer(), arr, len(ids), C.byref(p), C.byref(n))
        if rc < 0:
            raise Error("decoding: an id that is not a token" if rc == -_errno.EINVAL
                        else os.strerror(-rc), None, _errno.errorcode.get(-rc, ""))
        try:
            return C.string_at(p, n.value).decode("utf-8", "replace")
        finally:
            _libc.free(p)

    def _new_decoder(self) -> Optional[C.c_void_p]:
        if self._tok is None and self._tok_path is None and not self.info["model_dir"]:
            return None
        d = C.c_void_p()
        if _L().l8tok_stream_new(self._tokenizer(), C.byref(d)) < 0:
            raise Error("out of memory", None, "ENOMEM")
        return d

    def _push(self, d: Optional[C.c_void_p], tok: int) -> str:
        if not d:
            return ""
        p, n = C.c_void_p(), C.c_size_t()
        if _L().l8tok_stream_push(d, tok, C.byref(p), C.byref(n)) < 0:
            return ""
        return C.string_at(p, n.value).decode("utf-8") if n.value else ""

    def _flush(self, d: Optional[C.c_void_p]) -> str:
        if not d:
            return ""
        p, n = C.c_void_p(), C.c_size_t()
        _L().l8tok_stream_flush(d, C.byref(p), C.byref(n))
        return C.string_at(p, n.value).decode("utf-8") if n.value else ""

    def _chat_ids(self, messages: Iterable[Dict[str, str]]) -> List[int]:
        msgs, keep = [], []
        for m in messages:
            role = m.get("role")
            if role not in _ROLES:
                raise Error(f"a message's role must be one of {', '.join(_ROLES)}, not {role!r}",
                            None, "EINVAL")
            b = str(m.get("content", "")).encode("utf-8")
            keep.append(b)
            msgs.append(_Msg(_ROLES[role], b, len(b)))
        arr = (_Msg * len(msgs))(*msgs)
        opts = _ChatOpts()
        _L().l8chat_opts_init(C.byref(opts))
        ids = _Ids()
        rc = _L().l8chat_encode(self._tokenizer(), arr, len(msgs), C.byref(opts), C.byref(ids))
        try:
            if rc < 0:
                raise Error(f"encoding the conversation: {os.strerror(-rc)}", None,
                            _errno.errorcode.get(-rc, ""))
            return ids.ids[:ids.n]
        finally:
            _L().l8tok_ids_free(C.byref(ids))

    # -- requests

    def generate(self, prompt: Union[str, Sequence[int]], *, system: Optional[str] = None,
                 raw: bool = False, **sampling: Any) -> Stream:
        """Submit prompt and return its Stream. A str is a user message in the
        Llama 3.1 chat format (after ``system``, if given), or with raw=True
        <|begin_of_text|> and the text's tokens; a sequence of ints is the
        prompt's ids as they are.

        sampling: max_new (default 256, or the daemon's limit if lower),
        temperature (0: greedy), top_k, top_p, min_p, repetition_penalty,
        seed, stop_ids, ignore_eos, logprobs, no_speculate, priority, and one
        constraint: regex=RE, json_schema=TEXT (or a dict), grammar=GBNF,
        json_object=True."""
        if isinstance(prompt, str):
            if raw:
                ids = ([self.info["bos_id"]] if self.info["bos_id"] >= 0 else []) \
                    + self.tokenize(prompt, special=True)
            else:
                msgs = ([{"role": "system", "content": system}] if system else []) \
                    + [{"role": "user", "content": prompt}]
                ids = self._chat_ids(msgs)
        else:
            ids = [int(i) for i in prompt]
        return self._submit(ids, sampling)

    def chat(self, messages: Iterable[Dict[str, str]], **sampling: Any) -> Stream:
        """Submit a conversation ([{"role": "system"|"user"|"assistant"|
        "ipython", "content": TEXT}, ...]) for the assistant's next turn;
        sampling as for generate."""
        return self._submit(self._chat_ids(messages), sampling)

    def _params(self, s: Dict[str, Any]) -> _Params:
        p = _Params()
        _L().l8c_params_init(C.byref(p))
        known = {"max_new", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                 "seed", "stop_ids", "ignore_eos", "logprobs", "no_speculate", "priority",
                 *_CONSTRAINTS}
        bad = sorted(set(s) - known)
        if bad:
            raise TypeError(f"unknown sampling argument(s): {', '.join(bad)}")
        mn = s.get("max_new")
        p.max_new_tokens = int(mn) if mn is not None else min(256, self.info["max_new_tokens"])
        for f in ("temperature", "top_p", "min_p", "repetition_penalty"):
            if f in s:
                setattr(p, f, float(s[f]))
        for f in ("top_k", "seed", "priority"):
            if f in s:
                setattr(p, f, int(s[f]))
        for f in ("ignore_eos", "logprobs", "no_speculate"):
            if f in s:
                setattr(p, f, bool(s[f]))
        stops = [int(i) for i in s.get("stop_ids", ())]
        arr = (C.c_uint32 * max(1, len(stops)))(*stops)
        p._stop_arr = arr   # kept alive with the params
        p.stop_ids, p.n_stop_ids = arr, len(stops)
        given = [k for k in _CONSTRAINTS if s.get(k) not in (None, False)]
        if len(given) > 1:
            raise TypeError(f"one constraint at most, not {' and '.join(given)}")
        if given:
            k = given[0]
            p.constraint = _CONSTRAINTS[k]
            if k != "json_object":
                v = s[k]
                if k == "json_schema" and not isinstance(v, str):
                    import json
                    v = json.dumps(v)
                b = v.encode("utf-8")
                p._ctext = b
                p.constraint_text, p.constraint_len = b, len(b)
        return p

    def _submit(self, ids: List[int], sampling: Dict[str, Any]) -> Stream:
        p = self._params(sampling)
        arr = (C.c_uint32 * max(1, len(ids)))(*ids)
        rid = C.c_uint64()
        while True:
            rc = _L().l8c_submit(self._h, arr, len(ids), C.byref(p), C.byref(rid))
            if rc != -_errno.EAGAIN:
                break
            self._pump(100)      # rings full: take events, then again
        if rc < 0:
            raise _errno_error(rc, "submitting", self._h)
        stops = list(p.stop_ids[:p.n_stop_ids])
        if not p.ignore_eos:
            stops += self.info["eos_ids"]
        st = Stream(self, rid.value, p, stops)
        self._streams[rid.value] = st
        return st

    def cancel(self, request_id: int) -> None:
        """Cancel a request (its stream ends with reason "cancelled")."""
        rc = _L().l8c_cancel(self._h, request_id)
        if rc < 0:
            raise _errno_error(rc, "cancelling", self._h)

    def _dispatch(self, n: int) -> None:
        for k in range(n):
            e = self._events[k]
            st = self._streams.get(e.request_id)
            if st is not None:
                st._event(e)
            elif e.kind == _EV_ERROR and e.request_id == 0:
                buf = C.create_string_buffer(_ERRLEN)
                raise Error(_L().l8c_error_text(C.byref(e), buf).decode("utf-8", "replace"),
                            e.code, _L().l8c_err_name(e.code).decode())

    def _pump(self, timeout_ms: int) -> int:
        """Waits up to timeout_ms (-1: until some arrive) and hands the events
        to their streams; returns how many."""
        if not self._h:
            raise Error("the client is closed", None, "EBADF")
        n = _L().l8c_wait_events(self._h, self._events, len(self._events), timeout_ms)
        if n < 0:
            raise _errno_error(n, "waiting for events", self._h)
        self._dispatch(n)
        return n

    def _poll(self) -> int:
        n = _L().l8c_poll_events(self._h, self._events, len(self._events))
        if n < 0:
            raise _errno_error(n, "reading events", self._h)
        self._dispatch(n)
        return n

    def status(self) -> Dict[str, Any]:
        """The daemon's status (as `llama8ctl status --json` shows it, in part):
        model_name, backend, pages_total / used / cached, page_size, clients,
        requests_running / waiting, context_length, tokens_per_s, uptime_s,
        tokens_generated, requests_done, prompt_tokens(_cached), draining."""
        buf = C.create_string_buffer(_STATUS_BYTES)
        rc = _L().l8c_status(self._h, buf, 5000)
        if rc < 0:
            raise _errno_error(rc, "status", self._h)
        s = _Status.from_buffer(buf)
        return {f: (getattr(s, f).decode() if isinstance(getattr(s, f), bytes) else getattr(s, f))
                for f, _ in _Status._fields_}


class AsyncClient:
    """Client for asyncio: ``async for tok in await ac.generate(...)``; the
    loop waits on the client's event descriptor, never blocking."""

    def __init__(self, socket: Optional[str] = None, name: str = "python-asyncio",
                 tokenizer: Optional[str] = None):
        self.client = Client(socket, name, tokenizer)
        self._wake: Optional[asyncio.Future] = None

    @property
    def info(self) -> Dict[str, Any]:
        return self.client.info

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    async def _wait(self) -> None:
        """Until the daemon has something for this client: one wait on its
        descriptors, which every coroutine reading a stream shares."""
        c = self.client
        if _L().l8c_prepare_wait(c._h) == 1:
            return
        if self._wake is None or self._wake.done():
            loop = asyncio.get_running_loop()
            fut = self._wake = loop.create_future()
            fds = (_L().l8c_event_fd(c._h), _L().l8c_ctl_fd(c._h))

            def wake() -> None:
                for fd in fds:
                    loop.remove_reader(fd)
                if not fut.done():
                    fut.set_result(None)
            for fd in fds:
                loop.add_reader(fd, wake)
        await asyncio.shield(self._wake)

    async def _tokens(self, st: Stream) -> AsyncIterator[Token]:
        while True:
            t = st._take()
            if t is not None:
                yield t
                continue
            if st.reason is not None:
                return
            if self.client._poll() == 0:
                await self._wait()

    async def generate(self, prompt: Union[str, Sequence[int]], **kw: Any) -> AsyncIterator[Token]:
        """As Client.generate; the tokens as an async iterator."""
        return self._tokens(self.client.generate(prompt, **kw))

    async def chat(self, messages: Iterable[Dict[str, str]], **kw: Any) -> AsyncIterator[Token]:
        return self._tokens(self.client.chat(messages, **kw))

    def tokenize(self, text: str, special: bool = False) -> List[int]:
        return self.client.tokenize(text, special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.client.detokenize(ids)

    def status(self) -> Dict[str, Any]:
        return self.client.status()
