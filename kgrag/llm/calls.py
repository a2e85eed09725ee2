"""LLM calls: request/reply types, the on-disk call cache and the retry / timeout policy.

A backend only turns a batch of requests into replies. ``LLMClient`` wraps one with
(1) a SQLite cache keyed by model, messages and sampling params, so a re-run repeats no call, and
(2) retries with exponential backoff; a call still failing is returned with ``error`` set, never dropped.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence


@dataclass(frozen=True)
class LLMRequest:
    """One chat completion request."""

    messages: tuple[tuple[str, str], ...]  # (role, content)
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 64
    seed: int = 0
    stop: tuple[str, ...] = ()
    # Constrained decoding (optional): the output must be one of ``choices`` and / or match ``grammar``
    # (GBNF). Left at their defaults they are not part of the cache key (``call_key``).
    choices: tuple[str, ...] = ()
    grammar: str | None = None
    # Scoring (optional): when set, nothing is generated; the backend returns the log-likelihood of each
    # continuation as the assistant's reply after the prompt (``scores_of`` reads the reply). Left empty it is
    # not part of the cache key either.
    continuations: tuple[str, ...] = ()

    @property
    def constrained(self) -> bool:
        """Whether the request carries an output constraint."""
        return bool(self.choices) or self.grammar is not None

    @property
    def scoring(self) -> bool:
        """Whether this is a scoring request (``continuations`` set) rather than a generation request."""
        return bool(self.continuations)

    def as_messages(self) -> list[dict[str, str]]:
        """OpenAI-style message dicts."""
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass(frozen=True)
class LLMReply:
    """What a backend returns for one request."""

    text: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    error: str | None = None
    #: the error cannot change on retry (e.g. a prompt longer than the context window): recorded at once
    permanent: bool = False


class PermanentLLMError(ValueError):
    """A call that fails the same way however often it is tried (a prompt that does not fit the context
    window, a request the server rejects as invalid): recorded as a failure without retries."""


#: HTTP client errors that may go away on retry (timeout, conflict, too early, rate limit)
RETRYABLE_4XX = frozenset({408, 409, 425, 429})


def is_permanent(e: BaseException) -> bool:
    """Whether retrying the call that raised ``e`` cannot help: a ``PermanentLLMError``, or an HTTP 4xx
    response other than ``RETRYABLE_4XX`` (the server rejected the request itself). Timeouts, 5xx and malformed
    replies are transient."""
    if isinstance(e, PermanentLLMError):
        return True
    status = getattr(getattr(e, "response", None), "status_code", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in RETRYABLE_4XX


@dataclass(frozen=True)
class CallRecord:
    """One request as the client resolved it: the reply plus how it was obtained."""

    key: str
    reply: LLMReply
    cached: bool
    attempts: int
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> bool:
        """True when no attempt succeeded."""
        return self.reply.error is not None


class LLMBackend(Protocol):
    """Turns a batch of requests into replies (same order). Errors go into ``LLMReply.error``.

    A backend may accept ``on_reply(position, reply)`` and call it, from the calling thread, as each reply
    is ready: the client then caches every finished call at once, so a run killed mid-batch repeats none.

    A *scoring* request (``LLMRequest.continuations`` set) is answered with ``score_reply_text`` of its
    continuations' log-likelihoods; a backend that cannot score returns an ``error`` naming
    ``ScoringUnsupported`` (llamacpp, vllm and openai against a server returning prompt log-probs can).
    """

    model_id: str

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMReply]: ...


def _accepts_on_reply(backend: Any) -> bool:
    try:
        return "on_reply" in inspect.signature(backend.generate).parameters
    except (TypeError, ValueError):
        return False


# Fields added after the cache format was fixed: dropped from the key while at their default, so the key
# of every request that does not use them is what it was before they existed (existing caches stay valid).
_KEY_OPTIONAL = {"choices": (), "grammar": None, "continuations": ()}


def request_fields(req: LLMRequest) -> dict[str, Any]:
    """The request as a dict for keys and cache rows: optional fields left out while at their default."""
    d = asdict(req)
    for k, default in _KEY_OPTIONAL.items():
        if k in d and d[k] == default:
            del d[k]
    return d


def call_key(model_id: str, req: LLMRequest) -> str:
    """Cache key: hash of model, messages and sampling params (and the output constraint, when set)."""
    blob = json.dumps({"model": model_id, **request_fields(req)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class CallCache:
    """SQLite table of successful calls; safe for concurrent processes (WAL)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._con() as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS llm_calls (call_key TEXT PRIMARY KEY, model TEXT, request TEXT,"
                " response TEXT, tokens_in INTEGER, tokens_out INTEGER, latency_ms REAL, created REAL)"
            )

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA busy_timeout=60000")
            self._local.con = con
        return con

    def get(self, key: str) -> LLMReply | None:
        """The cached reply for ``key``, if any."""
        row = self._con().execute(
            "SELECT response, tokens_in, tokens_out, latency_ms FROM llm_calls WHERE call_key = ?", (key,)
        ).fetchone()
        return None if row is None else LLMReply(row[0], row[1], row[2], row[3])

    def put(self, key: str, model: str, req: LLMRequest, reply: LLMReply) -> None:
        """Store a successful reply."""
        self._con().execute(
            "INSERT OR REPLACE INTO llm_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key, model, json.dumps(request_fields(req)), reply.text, reply.tokens_in, reply.tokens_out,
             reply.latency_ms, time.time()),
        )

    def __len__(self) -> int:
        return int(self._con().execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0])


class LLMClient:
    """A backend behind the call cache and the retry policy."""

    def __init__(
        self, backend: LLMBackend, *, cache: CallCache | None, retries: int = 2, backoff_s: float = 0.5,
        sleep=time.sleep,
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.retries = retries
        self.backoff_s = backoff_s
        self._sleep = sleep

    @property
    def model_id(self) -> str:
        """The backend's model identifier."""
        return self.backend.model_id

    def key_model(self, req: LLMRequest) -> str:
        """The model part of ``req``'s cache key: the backend's ``score_model_id`` for a scoring request where
        the backend has one (its scores depend on more than the weights, e.g. the KV layout), else ``model_id``."""
        if req.continuations:
            return getattr(self.backend, "score_model_id", None) or self.model_id
        return self.model_id

    def generate(self, requests: Sequence[LLMRequest]) -> list[CallRecord]:
        """Resolve every request: from the cache, else from the backend (batched), retrying failures."""
        keys = [call_key(self.key_model(r), r) for r in requests]
        out: list[CallRecord | None] = [None] * len(requests)
        todo = []
        for i, (k, r) in enumerate(zip(keys, requests)):
            hit = self.cache.get(k) if self.cache is not None else None
            if hit is not None:
                out[i] = CallRecord(k, hit, cached=True, attempts=0)
            else:
                todo.append(i)
        errors: dict[int, list[str]] = {i: [] for i in todo}
        attempt = 0
        streaming = self.cache is not None and _accepts_on_reply(self.backend)
        while todo:
            attempt += 1
            saved: set[int] = set()

            def on_reply(pos: int, rep: LLMReply, _todo=tuple(todo), _saved=saved) -> None:
                if rep.error is None:  # cache a finished call now, not at the end of the batch
                    i = _todo[pos]
                    self.cache.put(keys[i], self.model_id, requests[i], rep)
                    _saved.add(i)

            try:
                batch = [requests[i] for i in todo]
                replies = self.backend.generate(batch, on_reply=on_reply) if streaming else self.backend.generate(batch)
            except Exception as e:  # a backend bug or outage: the whole batch failed this attempt
                replies = [LLMReply(error=f"{type(e).__name__}: {e}", permanent=is_permanent(e)) for _ in todo]
            still = []
            for i, rep in zip(todo, replies):
                if rep.error is None:
                    if self.cache is not None and i not in saved:
                        self.cache.put(keys[i], self.model_id, requests[i], rep)
                    out[i] = CallRecord(keys[i], rep, cached=False, attempts=attempt, errors=tuple(errors[i]))
                else:
                    errors[i].append(rep.error)
                    if attempt > self.retries or rep.permanent:  # a permanent error is not tried again
                        out[i] = CallRecord(keys[i], rep, cached=False, attempts=attempt, errors=tuple(errors[i]))
                    else:
                        still.append(i)
            todo = still
            if todo:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
        return [o for o in out if o is not None]

    def score(self, request: LLMRequest, continuations: Sequence[str]) -> CallRecord:
        """Log-likelihood of each continuation as the reply to ``request``'s prompt (one scoring call, through
        the cache under its own key: the continuations are part of it). ``scores_of`` reads the record."""
        return self.generate([replace(request, continuations=tuple(continuations))])[0]


def score_reply_text(scores: Sequence[tuple[float, int]]) -> str:
    """A scoring call's reply text: JSON ``[[sum log-prob, tokens], ...]`` per continuation, log-probs
    rounded to 6 decimals (so a cached reply and a fresh one rank alike)."""
    return json.dumps([[round(float(lp), 6), int(n)] for lp, n in scores])


def scores_of(rec: CallRecord | LLMReply) -> list[tuple[float, int]]:
    """(sum of the continuation's token log-probs, its token count) per continuation of a scoring call;
    ``[]`` when the call failed or its reply is no score list (a backend that answered with text)."""
    reply = rec.reply if isinstance(rec, CallRecord) else rec
    if reply.error is not None or not reply.text:
        return []
    try:
        return [(float(lp), int(n)) for lp, n in json.loads(reply.text)]
    except (ValueError, TypeError):
        return []


class ScoringUnsupported(NotImplementedError):
    """The backend (or the server behind it) cannot return continuation log-likelihoods."""


def with_seed(req: LLMRequest, seed: int) -> LLMRequest:
    """The same request with another sampling seed."""
    return replace(req, seed=seed)
