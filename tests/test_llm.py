"""LLM client: the call cache, retries with backoff, failures recorded (scripted backends)."""

from __future__ import annotations

from kgrag.llm.calls import CallCache, LLMClient, LLMReply, LLMRequest, call_key


class Scripted:
    """Replies from a script; 'FAIL' entries return an error."""

    model_id = "scripted"

    def __init__(self, script):
        self.script = list(script)
        self.calls = 0

    def generate(self, requests):
        out = []
        for r in requests:
            self.calls += 1
            s = self.script.pop(0)
            out.append(LLMReply(error="boom") if s == "FAIL" else LLMReply(text=s, tokens_in=3, tokens_out=1))
        return out


def req(text="q"):
    return LLMRequest(messages=(("user", text),), max_tokens=4)


def test_cache_prevents_repeat_calls(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    b = Scripted(["a", "b"])
    c = LLMClient(b, cache=cache)
    first = c.generate([req("x"), req("y")])
    again = c.generate([req("x"), req("y")])
    assert [r.reply.text for r in first] == ["a", "b"] == [r.reply.text for r in again]
    assert b.calls == 2 and all(r.cached for r in again) and not any(r.cached for r in first)
    # a new process sees the same cache
    assert CallCache(tmp_path / "c.sqlite").get(call_key("scripted", req("x"))).text == "a"


def test_key_depends_on_sampling_params():
    assert call_key("m", req()) != call_key("m", LLMRequest(messages=(("user", "q"),), max_tokens=5))
    assert call_key("m", req()) != call_key("m2", req())


def test_retry_then_success_and_failure_recorded(tmp_path):
    sleeps = []
    b = Scripted(["FAIL", "FAIL", "ok", "FAIL", "FAIL"])
    c = LLMClient(b, cache=CallCache(tmp_path / "c.sqlite"), retries=2, backoff_s=0.1, sleep=sleeps.append)
    r1, r2 = c.generate([req("1"), req("2")])
    # attempt 1: both fail; attempt 2: r1 ok, r2 fails; attempt 3: r2 fails → recorded as failed
    assert r1.reply.text == "ok" and r1.attempts == 2 and not r1.failed
    assert r2.failed and r2.attempts == 3 and r2.errors == ("boom", "boom", "boom")
    assert sleeps == [0.1, 0.2]
    # failures are not cached: the next run tries again
    b2 = Scripted(["late"])
    assert LLMClient(b2, cache=c.cache).generate([req("2")])[0].reply.text == "late"


def test_backend_exception_becomes_failure():
    class Broken:
        model_id = "broken"

        def generate(self, requests):
            raise ConnectionError("down")

    r = LLMClient(Broken(), cache=None, retries=1, sleep=lambda s: None).generate([req()])[0]
    assert r.failed and "ConnectionError" in r.reply.error and r.attempts == 2


class DiesMidBatch:
    """Streams replies through ``on_reply`` and dies (like a killed process) after ``n`` of them."""

    model_id = "dies"

    def __init__(self, n):
        self.n, self.calls = n, 0

    def generate(self, requests, on_reply=None):
        for i, r in enumerate(requests):
            if i == self.n:
                raise KeyboardInterrupt("killed")
            self.calls += 1
            on_reply(i, LLMReply(text=f"ans-{r.messages[0][1]}"))
        raise AssertionError("unreachable in this test")


def test_finished_calls_of_a_batch_are_cached_before_the_batch_ends(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    reqs = [req(f"q{i}") for i in range(5)]
    try:
        LLMClient(DiesMidBatch(3), cache=cache).generate(reqs)
    except KeyboardInterrupt:
        pass
    # a fresh client (the resumed run) finds the 3 finished calls and asks the backend only for the rest
    b = Scripted(["late-3", "late-4"])
    b.model_id = "dies"  # the same model
    got = LLMClient(b, cache=CallCache(tmp_path / "c.sqlite")).generate(reqs)
    assert b.calls == 2
    assert [r.reply.text for r in got] == ["ans-q0", "ans-q1", "ans-q2", "late-3", "late-4"]
    assert [r.cached for r in got] == [True, True, True, False, False]
