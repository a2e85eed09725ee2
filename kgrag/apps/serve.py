"""``kgrag serve``: chat with your graph. A local web page (loopback only) where a user types questions against
the ingested KG with the current params and gets, per answer, the view of ``kgrag ask --html``: the retrieved
subgraph drawn, the reasoner's trace and its LLM calls. A starlette/FastAPI app run by uvicorn.
"""

from __future__ import annotations

import itertools
import socket
import sys
import threading

from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field

LOOPBACK = "127.0.0.1"


class AskBody(BaseModel):
    """The body of ``POST /ask``."""

    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, max_length=2000)


def make_app(asker, *, setup: str = "") -> FastAPI:
    """The app: ``GET /`` the page, ``POST /ask`` one question's view (an HTML fragment). ``asker`` is a
    :class:`kgrag.apps.ask.Asker` (or anything with ``ask(text, question_id)`` and ``view_data(answer)``); its
    questions run one at a time (the LLM backends are not thread-safe)."""
    from kgrag.reporting.report_html import question_view, serve_page

    app = FastAPI(title="kgrag serve", docs_url=None, redoc_url=None, openapi_url=None)
    lock = threading.Lock()
    counter = itertools.count(1)
    page = serve_page(setup=setup)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return page

    @app.post("/ask", response_class=HTMLResponse)
    def ask(body: AskBody) -> str:  # a plain def: FastAPI runs it in its thread pool
        text = body.question.strip()
        if not text:
            raise HTTPException(status_code=422, detail="empty question")
        with lock:
            n = next(counter)
            ans = asker.ask(text, question_id=f"ask-{n}")
            return question_view(asker.view_data(ans), index=n)

    return app


def bind(port: int = 0, host: str = LOOPBACK) -> socket.socket:
    """A listening socket on the loopback interface (``port`` 0: any free port)."""
    if host != LOOPBACK:
        raise ValueError(f"kgrag serve listens on {LOOPBACK} only, not {host!r}")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def run(asker, *, host: str = LOOPBACK, port: int = 0) -> int:
    """Serve until interrupted; prints ``kgrag serve: http://127.0.0.1:PORT/`` once listening."""
    import uvicorn

    p = asker.params
    setup = (f"KG data/validated/kg.duckdb ({asker.kg.num_entities} entities); retrieval {p.retrieve.method}, "
             f"reasoner {p.reason.method}, LLM {asker.client.model_id}")
    sock = bind(port, host)
    url = f"http://{host}:{sock.getsockname()[1]}/"
    server = uvicorn.Server(uvicorn.Config(make_app(asker, setup=setup), log_level="warning"))
    print(f"kgrag serve: {url}  ({setup}; Ctrl-C stops)", flush=True)
    sys.stdout.flush()
    server.run(sockets=[sock])
    return 0
