"""The `openai` backend's scoring path against a local server speaking vLLM's OpenAI-compatible extensions.

vLLM's server answers ``POST /tokenize`` (root, not under /v1) with ``{"count", "max_model_len", "tokens",
"token_strs"}``: a request with ``messages`` gets the chat template applied (``add_generation_prompt``, default
true; ``add_special_tokens`` default false), one with ``prompt`` is plain text (``add_special_tokens`` default
true). ``POST /v1/completions`` takes token ids as ``prompt`` and, with ``prompt_logprobs: k``, returns in each
choice ``prompt_logprobs``: one entry per prompt token, the first ``null``, then a dict from token id (a JSON
string key) to ``{"logprob", "rank", "decoded_token"}`` holding the actual token plus the top k (``null`` when
the request did not ask for them). A prompt past the context length is a 400 ``ErrorResponse``.

The server here does that over ``tests.toy_lm``, a fully known model, so every expected score is computed
independently from the model and compared exactly.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kgrag.llm.backends.openai import OpenAIBackend, OpenAIParams
from kgrag.llm.clients import client_for
from kgrag.llm.prompts import build_request
from kgrag.llm.calls import LLMRequest, scores_of
from kgrag.params import GenerateParams
from tests import toy_lm

MODEL = "toy-lm"
CONTEXT = "(Heat, directed_by, Michael Mann)\n(Heat, starred_actors, Al Pacino)"
QUESTION = "who directed the movies starred by [Al Pacino]"
CANDIDATES = ("Michael Mann", "Heat", "Al Pacino")


class ToyVLLMServer:
    """vLLM's /tokenize, /v1/completions (prompt_logprobs) and /v1/chat/completions over ``toy_lm``.

    ``calls`` records ``(path, body, authorization)`` per request. ``queued[path]`` holds ``(status, body)``
    replies served (and consumed) before the normal answer; ``prompt_logprobs_supported=False`` answers like
    an OpenAI-compatible server without the extension; ``tokenize=False`` has no /tokenize route.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict, str | None]] = []
        self.queued: dict[str, list[tuple[int, object]]] = {}
        self.prompt_logprobs_supported = True
        self.tokenize = True
        self.max_model_len = 2048
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    def paths(self) -> list[str]:
        with self.lock:
            return [p for p, _, _ in self.calls]

    def bodies(self, path: str) -> list[dict]:
        with self.lock:
            return [b for p, b, _ in self.calls if p == path]

    # --- vLLM's answers -----------------------------------------------------------------------------------
    def tokenize_reply(self, body: dict) -> tuple[int, dict]:
        if "messages" in body:
            ids = toy_lm.encode_chat(body["messages"], body.get("add_generation_prompt", True))
            if body.get("add_special_tokens", False):
                ids = [toy_lm.BOS, *ids]
        else:
            ids = toy_lm.encode_text(body["prompt"], body.get("add_special_tokens", True))
        return 200, {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids, "token_strs": None}

    def completion_reply(self, body: dict) -> tuple[int, dict]:
        prompt = body["prompt"]
        if isinstance(prompt, str):
            prompt = toy_lm.encode_text(prompt, True)
        if not prompt or not all(isinstance(t, int) and 0 <= t < toy_lm.VOCAB for t in prompt):
            return 400, {"object": "error", "message": "invalid prompt", "type": "BadRequestError", "code": 400}
        if len(prompt) + body.get("max_tokens", 16) > self.max_model_len:
            return 400, {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                         "message": f"This model's maximum context length is {self.max_model_len} tokens. However, "
                                    f"you requested {len(prompt) + body.get('max_tokens', 16)} tokens."}
        k = body.get("prompt_logprobs")
        plp = None
        if k is not None and self.prompt_logprobs_supported:
            plp = [None]
            for i in range(1, len(prompt)):
                pre, tok = prompt[:i], prompt[i]
                top = sorted(range(toy_lm.VOCAB), key=lambda j: (-toy_lm.logprob(pre, j), j))[:k] if k else []
                plp.append({str(j): {"logprob": toy_lm.logprob(pre, j), "rank": toy_lm.rank(pre, j),
                                     "decoded_token": toy_lm.decode(j)} for j in dict.fromkeys([tok, *top])})
        nxt = toy_lm.argmax(prompt)
        return 200, {"id": "cmpl-toy", "object": "text_completion", "created": 0, "model": MODEL,
                     "choices": [{"index": 0, "text": toy_lm.decode(nxt), "logprobs": None, "finish_reason": "length",
                                  "stop_reason": None, "prompt_logprobs": plp}],
                     "usage": {"prompt_tokens": len(prompt), "completion_tokens": 1, "total_tokens": len(prompt) + 1}}

    def chat_reply(self, body: dict) -> tuple[int, dict]:
        ids = toy_lm.encode_chat(body["messages"], True)
        return 200, {"id": "chatcmpl-toy", "object": "chat.completion", "created": 0, "model": MODEL,
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": "Michael Mann"},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": len(ids), "completion_tokens": 2, "total_tokens": len(ids) + 2}}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: object) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                path = self.path
                with server.lock:
                    server.calls.append((path, body, self.headers.get("Authorization")))
                    queued = server.queued.get(path)
                    canned = queued.pop(0) if queued else None
                if canned is not None:
                    return self._send(*canned)
                routes = {"/v1/completions": server.completion_reply, "/v1/chat/completions": server.chat_reply}
                if server.tokenize:
                    routes["/tokenize"] = server.tokenize_reply
                if path not in routes:
                    return self._send(404, {"detail": "Not Found"})
                self._send(*routes[path](body))

        return Handler


@pytest.fixture
def server():
    s = ToyVLLMServer()
    yield s
    s.close()


def _req(question: str = QUESTION, continuations=CANDIDATES) -> LLMRequest:
    req = build_request(question=question, context=CONTEXT, temperature=0.0, top_p=1.0, max_tokens=16, seed=0)
    return replace(req, continuations=tuple(continuations))


def _expected(req: LLMRequest) -> tuple[list[int], list[tuple[float, int]]]:
    """The chat prompt's ids and, per continuation, (rounded sum of its tokens' log-probs, tokens)."""
    prompt = toy_lm.encode_chat(req.as_messages(), True)
    out = []
    for c in req.continuations:
        cont = toy_lm.encode_text(c, False)
        out.append((round(toy_lm.continuation_logprob(prompt, cont), 6), len(cont)))
    return prompt, out


def _backend(server, **kw) -> OpenAIBackend:
    return OpenAIBackend(OpenAIParams(base_url=server.url, model=MODEL, **kw), timeout_s=10)


def test_scores_are_the_continuations_log_likelihoods_and_requests_follow_vllms_api(server, monkeypatch):
    monkeypatch.setenv("TOY_KEY", "sk-toy")
    req = _req()
    prompt, expected = _expected(req)
    assert len({lp for lp, _ in expected}) == len(expected)  # the candidates' scores differ

    reply = _backend(server, api_key_env="TOY_KEY").generate([req])[0]
    assert reply.error is None
    assert scores_of(reply) == expected
    assert reply.tokens_in == len(prompt)

    # one chat /tokenize, then per continuation a text /tokenize and one completion, in that order
    assert server.paths() == ["/tokenize"] + ["/tokenize", "/v1/completions"] * len(CANDIDATES)
    assert {auth for _, _, auth in server.calls} == {"Bearer sk-toy"}
    chat_tok, *cont_tok = server.bodies("/tokenize")
    assert chat_tok == {"model": MODEL, "messages": req.as_messages(), "add_generation_prompt": True}
    assert cont_tok == [{"model": MODEL, "prompt": c, "add_special_tokens": False} for c in CANDIDATES]
    assert server.bodies("/v1/completions") == [
        {"model": MODEL, "prompt": prompt + toy_lm.encode_text(c, False), "max_tokens": 1, "temperature": 0.0,
         "prompt_logprobs": 0} for c in CANDIDATES]


def test_a_batch_mixing_scoring_and_generation_keeps_its_order(server):
    a, b = _req(), _req("who starred in [Heat]", ("Al Pacino", "Robert De Niro"))
    gen = replace(a, continuations=())
    replies = _backend(server, concurrency=3).generate([a, gen, b])
    assert [r.error for r in replies] == [None, None, None]
    assert scores_of(replies[0]) == _expected(a)[1]
    assert replies[1].text == "Michael Mann" and scores_of(replies[1]) == []
    assert scores_of(replies[2]) == _expected(b)[1]
    paths = server.paths()
    assert paths.count("/v1/chat/completions") == 1
    assert paths.count("/tokenize") == 2 + len(a.continuations) + len(b.continuations)
    assert paths.count("/v1/completions") == len(a.continuations) + len(b.continuations)


def _client(server, retries: int = 2, **openai):
    section = GenerateParams(backend="openai", openai={"base_url": server.url, "model": MODEL, **openai},
                             retries=retries, backoff_s=0.0, timeout_s=10)
    return client_for(section, cache=None, shared=False)


def test_a_server_error_is_retried_by_the_client(server):
    """A 5xx is transient: recorded, then the call is tried again and succeeds."""
    server.queued["/v1/completions"] = [(500, {"object": "error", "message": "engine dead", "code": 500})]
    req = _req(continuations=CANDIDATES[:2])
    rec = _client(server).score(replace(req, continuations=()), req.continuations)
    assert rec.reply.error is None and rec.attempts == 2
    assert len(rec.errors) == 1 and "500" in rec.errors[0]
    assert scores_of(rec) == _expected(req)[1]
    # attempt 1 stops at the failing completion; attempt 2 sends everything again
    assert server.paths() == ["/tokenize", "/tokenize", "/v1/completions"] + \
        ["/tokenize"] + ["/tokenize", "/v1/completions"] * 2


def test_a_prompt_past_the_context_is_a_permanent_error_not_retried(server):
    """vLLM rejects a prompt longer than max_model_len with a 400: a 4xx is permanent, so one attempt."""
    req = _req()
    server.max_model_len = len(toy_lm.encode_chat(req.as_messages(), True)) + 2
    rec = _client(server).score(replace(req, continuations=()), req.continuations)
    assert rec.failed and rec.attempts == 1 and rec.reply.permanent
    assert "400" in rec.reply.error and scores_of(rec) == []
    assert server.paths() == ["/tokenize", "/tokenize", "/v1/completions"]


def test_a_malformed_completion_is_an_error_retried_until_the_retries_run_out(server):
    server.queued["/v1/completions"] = [(200, {"id": "x", "choices": []})] * 3
    req = _req(continuations=("Heat",))
    rec = _client(server, retries=2).score(replace(req, continuations=()), req.continuations)
    assert rec.failed and rec.attempts == 3 and not rec.reply.permanent
    assert rec.reply.error.startswith("IndexError") and scores_of(rec) == []
    assert server.paths().count("/v1/completions") == 3


def test_a_server_without_prompt_logprobs_is_scoring_unsupported_at_once(server):
    """An OpenAI-compatible server that ignores ``prompt_logprobs`` answers ``null``: ScoringUnsupported, no
    retries (it cannot change)."""
    server.prompt_logprobs_supported = False
    req = _req()
    rec = _client(server).score(replace(req, continuations=()), req.continuations)
    assert rec.failed and rec.attempts == 1
    assert rec.reply.error.startswith("ScoringUnsupported") and "prompt_logprobs" in rec.reply.error
    assert server.paths() == ["/tokenize", "/tokenize", "/v1/completions"]


def test_a_server_without_tokenize_is_scoring_unsupported_at_once(server):
    server.tokenize = False
    req = _req()
    rec = _client(server).score(replace(req, continuations=()), req.continuations)
    assert rec.failed and rec.attempts == 1
    assert rec.reply.error.startswith("ScoringUnsupported") and "/tokenize not found" in rec.reply.error
    assert server.paths() == ["/tokenize"]


def test_scoring_none_refuses_without_a_request(server):
    req = _req()
    rec = _client(server, scoring="none").score(replace(req, continuations=()), req.continuations)
    assert rec.failed and rec.attempts == 1 and rec.reply.error.startswith("ScoringUnsupported")
    assert server.paths() == []
