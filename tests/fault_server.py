"""A fault-injecting OpenAI-compatible chat-completions server (loopback), for reliability tests.

Run: ``python -m tests.fault_server --port 8123 [--faults] [--slow-s 60] [--delay-s 0.1] [--hold-after N]``.

Replies are deterministic functions of the prompt: the answer is the tail of the first ``(head, relation,
tail)`` triple of the last user message's context (or ``unknown``). With ``--faults`` each distinct prompt
gets a class from the order in which prompts first arrive (the n-th new prompt gets class n mod 10), so ten
consecutive new prompts meet every fault; its retries keep that class:

=====  ===========================================  ==========================
class  first attempt                                later attempts
=====  ===========================================  ==========================
0      HTTP 500                                     HTTP 500 (never succeeds)
1      200 with ``{"choices": []}`` (malformed)     same (never succeeds)
2      HTTP 500                                     ok
3      held until the prompt's retry arrives (the   ok
       client timed out), at most ``--slow-s``
4      truncated JSON body                          ok
5      200 with a non-JSON body                     ok
6-9    ok                                           ok
=====  ===========================================  ==========================

``GET /stats`` returns every request seen: prompt key, attempt number, fault, start and end times.

``--hold-after N``: the first N requests are answered, every later one is held (no reply) until ``POST /release``.
A test waits for the N-th reply (an event it can count), kills the client, and knows exactly which calls
finished, whatever the machine's load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PERMANENT = {0: "http500", 1: "malformed"}
TRANSIENT = {2: "http500", 3: "slow", 4: "truncated", 5: "not_json"}
TRIPLE = re.compile(r"\(([^,()]+), ([^,()]+), ([^()]+)\)")


def prompt_key(messages: list[dict]) -> str:
    """Identity of a prompt (hash of its messages)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def fault_for(c: int, attempt: int, faults: bool) -> str | None:
    """The fault injected into attempt ``attempt`` (1-based) of a prompt of class ``c``, or None."""
    if not faults:
        return None
    if c in PERMANENT:
        return PERMANENT[c]
    if c in TRANSIENT and attempt == 1:
        return TRANSIENT[c]
    return None


def answer_for(messages: list[dict]) -> str:
    """The deterministic reply: the tail of the last message's first fact triple, else ``unknown``."""
    text = messages[-1].get("content", "") if messages else ""
    m = TRIPLE.search(text.split("\n", 1)[-1])  # past the "facts (head, relation, tail):" header
    return m.group(3).strip() if m else "unknown"


class State:
    """Requests seen, per prompt attempts."""

    def __init__(self, faults: bool, slow_s: float, delay_s: float, hold_after: int | None = None) -> None:
        self.faults, self.slow_s, self.delay_s, self.hold_after = faults, slow_s, delay_s, hold_after
        self.lock = threading.Lock()
        self.retried: dict[str, threading.Event] = {}  # set when a prompt's second attempt arrives
        self.released = threading.Event()
        self.admitted = 0  # requests let through to a reply (for --hold-after)
        self.attempts: dict[str, int] = {}
        self.classes: dict[str, int] = {}
        self.log: list[dict] = []


def make_handler(state: State):
    """The request handler bound to ``state``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_GET(self):  # noqa: N802
            if self.path.rstrip("/").endswith("/stats"):
                with state.lock:
                    self._send(200, json.dumps({"requests": state.log}).encode())
            elif self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"data": [{"id": "fault-server"}]}).encode())
            else:
                self._send(404, b"{}")

        def do_POST(self):  # noqa: N802
            if self.path.rstrip("/").endswith("/release"):
                state.released.set()
                self._send(200, b"{}")
                return
            t0 = time.time()
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            messages = body.get("messages", [])
            key = prompt_key(messages)
            with state.lock:
                state.attempts[key] = attempt = state.attempts.get(key, 0) + 1
                c = state.classes.setdefault(key, len(state.classes) % 10)
                entry = {"key": key, "class": c, "attempt": attempt, "fault": fault_for(c, attempt, state.faults),
                         "start": t0, "end": None}
                state.log.append(entry)
                state.retried.setdefault(key, threading.Event())
                if attempt > 1:
                    state.retried[key].set()
                hold = state.hold_after is not None and state.admitted >= state.hold_after
                state.admitted += not hold
            if hold:
                state.released.wait()
            fault = entry["fault"]
            if fault == "slow":
                state.retried[key].wait(timeout=state.slow_s)  # past the client timeout: until it tries again
            elif state.delay_s:
                time.sleep(state.delay_s)
            text = answer_for(messages)
            ok = {"id": f"cmpl-{key}", "object": "chat.completion", "model": "fault-server",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": len(json.dumps(messages)) // 4, "completion_tokens": 2}}
            if fault == "http500":
                self._send(500, b'{"error": "injected"}')
            elif fault == "malformed":
                self._send(200, b'{"choices": []}')
            elif fault == "truncated":
                self._send(200, json.dumps(ok).encode()[:40])
            elif fault == "not_json":
                self._send(200, b"<html>proxy error</html>", "text/html")
            else:
                self._send(200, json.dumps(ok).encode())
            with state.lock:
                entry["end"] = time.time()

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve until killed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--faults", action="store_true", help="inject the faults of the table above")
    ap.add_argument("--slow-s", type=float, default=60.0,
                    help="longest hold of a 'slow' reply (it is sent when the prompt's retry arrives)")
    ap.add_argument("--delay-s", type=float, default=0.0, help="delay of every reply")
    ap.add_argument("--hold-after", type=int, default=None,
                    help="answer this many requests, then hold every later one until POST /release")
    args = ap.parse_args(argv)
    state = State(args.faults, args.slow_s, args.delay_s, args.hold_after)
    ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(state)).serve_forever()


if __name__ == "__main__":
    main()
