"""The embedded model as a local OpenAI-compatible server (llama-cpp-python's), for the `openai` backend.

Used by the tests and benchmarks that exercise the HTTP protocol against a real server; also handy by hand:
``python -c "from kgrag.llm.backends.llamacpp_server import start_server; ..."``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*, log_path: str | Path, n_ctx: int = 2048, n_threads: int = 2, extra: tuple[str, ...] = (),
                 timeout_s: float = 180.0) -> tuple[subprocess.Popen, str, list[str]]:
    """Start ``python -m llama_cpp.server`` on the packaged SmolLM2 GGUF; wait until it answers /v1/models.

    Returns (process, base URL up to /v1, the server's arguments). Its output goes to ``log_path`` (a pipe
    would fill up and block it); if it exits or does not answer in ``timeout_s`` the error carries the
    log's tail.
    """
    import httpx

    from kgrag.llm.backends.llamacpp import packaged_gguf

    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads), "--model_alias", "smollm2",
           *extra]
    log = open(log_path, "w+b")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(log.read().decode(errors="replace")[-2000:])
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                return proc, url, cmd[2:]
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    log.seek(0)
    raise RuntimeError(f"llama_cpp.server did not start in {timeout_s:.0f} s:\n"
                       + log.read().decode(errors="replace")[-2000:])
