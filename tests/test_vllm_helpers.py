"""The `vllm` backend without a GPU: its pure helpers, and the backend class driven through kgrag's client
factory over a stand-in ``vllm`` module (``LLM``, ``SamplingParams``, ``StructuredOutputsParams``) whose
prompt log-probs come from ``tests.toy_lm`` and whose tokenizer is a real ``transformers`` tokenizer.

The last test is the real thing: ``@pytest.mark.gpu``, run where vLLM, a CUDA GPU and a local model
(``KGRAG_VLLM_MODEL``) exist, skipped elsewhere with what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from kgrag.llm.backends.vllm import VLLMBackend, VLLMParams, prompt_logprob_sums, structured_kwargs
from kgrag.llm.clients import client_for
from kgrag.llm.prompts import build_request
from kgrag.llm.calls import LLMRequest, scores_of
from kgrag.params import GenerateParams
from tests import toy_lm

CONTEXT = "(Heat, directed_by, Michael Mann)\n(Heat, starred_actors, Al Pacino)"
QUESTION = "who directed the movies starred by [Al Pacino]"


@dataclass
class Logprob:
    """vLLM's ``Logprob`` (``vllm.logprobs`` / ``vllm.sequence``)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def _req(**kw) -> LLMRequest:
    req = build_request(question=QUESTION, context=CONTEXT, temperature=0.0, top_p=1.0, max_tokens=8, seed=0)
    return replace(req, **kw)


# --- prompt_logprob_sums ----------------------------------------------------------------------------------

PLP = [None, {5: Logprob(-1.0, 1)}, {7: Logprob(-0.5, 2), 9: Logprob(-0.125, 1)}, {8: Logprob(-2.25, 3)}]


def test_prompt_logprob_sums_adds_the_continuations_tokens_only():
    assert prompt_logprob_sums(PLP, 2, [7, 8]) == (-2.75, 2)  # not position 1 (prompt), not token 9 (top-1)
    assert prompt_logprob_sums(PLP, 3, [8]) == (-2.25, 1)
    assert prompt_logprob_sums(PLP, 4, []) == (0.0, 0)


def test_prompt_logprob_sums_takes_plain_floats_and_fails_on_a_missing_token():
    floats = [None if d is None else {k: v.logprob for k, v in d.items()} for d in PLP]
    assert prompt_logprob_sums(floats, 1, [5, 7, 8]) == (-3.75, 3)
    with pytest.raises(KeyError):
        prompt_logprob_sums(PLP, 2, [9, 7])  # position 3 holds token 8 only: no silent substitute


# --- structured_kwargs --------------------------------------------------------------------------------------

class _Params:
    def __init__(self, **kw) -> None:
        self.kw = kw


def _fake_sampling_module(new_api: bool) -> types.ModuleType:
    sp = types.ModuleType("vllm.sampling_params")
    if new_api:
        sp.StructuredOutputsParams = type("StructuredOutputsParams", (_Params,), {})
    sp.GuidedDecodingParams = type("GuidedDecodingParams", (_Params,), {})
    return sp


@pytest.fixture
def no_vllm(monkeypatch):
    """``import vllm`` raises ImportError, whether or not vLLM is installed."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", None)


def test_structured_kwargs_of_an_unconstrained_request_is_empty_and_imports_nothing(no_vllm):
    assert structured_kwargs(_req()) == {}
    with pytest.raises(ImportError):
        structured_kwargs(_req(choices=("Yes", "No")))


@pytest.mark.parametrize("new_api,key", [(True, "structured_outputs"), (False, "guided_decoding")])
def test_structured_kwargs_uses_the_installed_vllms_api(monkeypatch, new_api, key):
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", _fake_sampling_module(new_api))
    (k, v), = structured_kwargs(_req(choices=("Yes", "No"))).items()
    assert k == key and v.kw == {"choice": ["Yes", "No"]}
    (k, v), = structured_kwargs(_req(grammar='root ::= "a" | "b"')).items()
    assert k == key and v.kw == {"grammar": 'root ::= "a" | "b"'}
    (k, v), = structured_kwargs(_req(choices=("a",), grammar='root ::= "a"')).items()  # the grammar wins
    assert v.kw == {"grammar": 'root ::= "a"'}


def test_the_module_imports_without_vllm_and_the_backend_says_what_to_install(no_vllm):
    code = ("import sys; sys.modules['vllm'] = None; import kgrag.llm.backends.vllm as m; "
            "print(m.prompt_logprob_sums([None, {3: -0.5}], 1, [3]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).parents[1])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(-0.5, 1)"
    with pytest.raises(ImportError, match=r"kgrag\[gpu\]"):
        VLLMBackend(VLLMParams())


# --- the backend over a stand-in vllm -----------------------------------------------------------------------

SPECIALS = ["<unk>", "<s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHARS = ["\n", *(chr(i) for i in range(32, 127))]
VOCAB = {s: i for i, s in enumerate(SPECIALS + CHARS)}
TEMPLATE = ("<s>{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def hf_tokenizer():
    """A character-level ``transformers`` tokenizer with a chat template (what ``LLM.get_tokenizer`` returns)."""
    pytest.importorskip("transformers")
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", chat_template=TEMPLATE,
                                   additional_special_tokens=SPECIALS[2:])


def _chat_ids(messages) -> list[int]:
    """The chat prompt's ids, by hand from the vocabulary and the template (not through the tokenizer)."""
    ids = [VOCAB["<s>"]]
    for m in messages:
        ids += [VOCAB[f"<|{m['role']}|>"], *(VOCAB[ch] for ch in m["content"]), VOCAB["<|end|>"]]
    return ids + [VOCAB["<|assistant|>"]]


def _expected_scores(req: LLMRequest) -> list[tuple[float, int]]:
    prompt = _chat_ids(req.as_messages())
    out = []
    for c in req.continuations:
        cont = [VOCAB[ch] for ch in c]
        out.append((round(toy_lm.continuation_logprob(prompt, cont), 6), len(cont)))
    return out


class FakeLLM:
    """``vllm.LLM`` over ``toy_lm``: ``generate`` fills ``prompt_logprobs`` the way vLLM does (one
    ``{token_id: Logprob}`` per prompt position, the first None, the actual token plus the top k)."""

    instances: list["FakeLLM"] = []
    tokenizer = None
    fail = False

    def __init__(self, model: str, **kw) -> None:
        self.model, self.kw, self.calls = model, kw, []
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return FakeLLM.tokenizer

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append(("generate", prompts, sampling_params))
        if FakeLLM.fail:
            raise RuntimeError("CUDA out of memory")
        k, outs = sampling_params.kw["prompt_logprobs"], []
        for p in prompts:
            ids = p["prompt_token_ids"]
            if not all(isinstance(t, int) and 0 <= t < toy_lm.VOCAB for t in ids):
                raise TypeError(f"prompt_token_ids must be token ids: {ids[:4]}")
            plp = [None]
            for i in range(1, len(ids)):
                top = sorted(range(toy_lm.VOCAB), key=lambda j: (-toy_lm.logprob(ids[:i], j), j))[:k] if k else []
                plp.append({j: Logprob(toy_lm.logprob(ids[:i], j), toy_lm.rank(ids[:i], j))
                            for j in dict.fromkeys([ids[i], *top])})
            outs.append(types.SimpleNamespace(prompt_token_ids=ids, prompt_logprobs=plp, outputs=[
                types.SimpleNamespace(text="x", token_ids=[toy_lm.argmax(ids)])]))
        return outs

    def chat(self, messages, sampling_params, use_tqdm=True):
        self.calls.append(("chat", messages, sampling_params))
        return [types.SimpleNamespace(prompt_token_ids=_chat_ids(m), outputs=[
            types.SimpleNamespace(text=f"reply {n}", token_ids=[7, 8])]) for n, m in enumerate(messages)]


@pytest.fixture
def fake_vllm(monkeypatch, hf_tokenizer):
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = FakeLLM, type("SamplingParams", (_Params,), {})
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", _fake_sampling_module(True))
    monkeypatch.setattr(FakeLLM, "instances", [])
    monkeypatch.setattr(FakeLLM, "tokenizer", hf_tokenizer)
    monkeypatch.setattr(FakeLLM, "fail", False)
    return FakeLLM


def _client(retries: int = 0):
    section = GenerateParams(backend="vllm", vllm={"model": "/models/toy", "gpu_memory_utilization": 0.5,
                                                   "max_model_len": 1024}, retries=retries, backoff_s=0.0)
    return client_for(section, cache=None, shared=False)


def test_backend_scores_and_generates_one_batch_each_in_request_order(fake_vllm):
    a = _req(continuations=("Michael Mann", "Heat", "Al Pacino"))
    b = _req(messages=(("user", "Who starred in Heat?"),), continuations=("Al Pacino", "Val Kilmer"))
    gen = _req(max_tokens=4)
    label = _req(choices=("Yes", "No"), max_tokens=2)
    recs = _client().generate([a, gen, b, label])
    assert [r.reply.error for r in recs] == [None] * 4
    assert scores_of(recs[0]) == _expected_scores(a)
    assert scores_of(recs[2]) == _expected_scores(b)
    assert [recs[1].reply.text, recs[3].reply.text] == ["reply 0", "reply 1"]
    assert recs[1].reply.tokens_out == 2 and recs[1].reply.tokens_in == len(_chat_ids(gen.as_messages()))

    (llm,) = fake_vllm.instances
    assert llm.model == "/models/toy" and llm.kw == {"gpu_memory_utilization": 0.5, "max_model_len": 1024}
    (kind, prompts, sp), (kind2, msgs, sps) = llm.calls  # one scoring batch, one generation batch
    assert kind == "generate" and sp.kw == {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
    assert prompts == [{"prompt_token_ids": _chat_ids(r.as_messages()) + [VOCAB[ch] for ch in c]}
                       for r in (a, b) for c in r.continuations]
    assert kind2 == "chat" and msgs == [gen.as_messages(), label.as_messages()]
    assert [s.kw["max_tokens"] for s in sps] == [4, 2] and sps[0].kw["stop"] is None
    assert "structured_outputs" not in sps[0].kw and sps[1].kw["structured_outputs"].kw == {"choice": ["Yes", "No"]}


def test_backend_engine_failure_is_an_error_per_request(fake_vllm):
    fake_vllm.fail = True
    recs = _client(retries=1).generate([_req(continuations=("Heat",)), _req(continuations=("Al Pacino",))])
    assert [r.attempts for r in recs] == [2, 2]
    assert all(r.failed and "CUDA out of memory" in r.reply.error for r in recs)


# --- the real vLLM on a GPU ---------------------------------------------------------------------------------

def _gpu_missing() -> list[str]:
    """What the real-vLLM test lacks here, each named ([] = it can run)."""
    import importlib.util

    missing = []
    has_vllm = importlib.util.find_spec("vllm") is not None
    if not has_vllm:
        missing.append("vllm not installed (pip install 'kgrag[gpu]')")
    if not (Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi")):
        missing.append("no CUDA GPU (no /dev/nvidia0, no nvidia-smi)")
    elif has_vllm:  # torch comes with vllm; importing it takes seconds, so only here
        import torch

        if not torch.cuda.is_available():
            missing.append(f"no CUDA GPU (torch {torch.__version__}: torch.cuda.is_available() is False)")
    model = os.environ.get("KGRAG_VLLM_MODEL")
    if not model:
        missing.append("KGRAG_VLLM_MODEL not set (a local model folder, e.g. SmolLM2-135M-Instruct)")
    elif not Path(model).is_dir() and os.environ.get("HF_HUB_OFFLINE") == "1":
        missing.append(f"KGRAG_VLLM_MODEL={model} is no local folder and HF_HUB_OFFLINE=1")
    return missing


@pytest.mark.gpu
def test_real_vllm_backend_scores_candidates_and_generates():
    missing = _gpu_missing()
    if missing:
        pytest.skip("; ".join(missing))
    section = GenerateParams(backend="vllm", vllm={"model": os.environ["KGRAG_VLLM_MODEL"],
                                                   "gpu_memory_utilization": 0.4, "max_model_len": 2048},
                             retries=0, max_tokens=16)
    client = client_for(section, cache=None, shared=False)
    candidates = ["Michael Mann", "banana bread recipe"]
    req = _req(max_tokens=16)
    rec = client.score(req, candidates)
    assert rec.reply.error is None, rec.reply.error
    scores = scores_of(rec)
    tok = client.backend._llm.get_tokenizer()
    assert [n for _, n in scores] == [len(tok.encode(c, add_special_tokens=False)) for c in candidates]
    assert all(lp < 0 for lp, _ in scores)
    assert scores[0][0] > scores[1][0]  # the fact in the context beats an unrelated string

    gen, label = client.generate([req, _req(choices=("Yes", "No"), max_tokens=4)])
    assert gen.reply.error is None and gen.reply.text.strip() and 0 < gen.reply.tokens_out <= 16
    assert label.reply.error is None and label.reply.text in ("Yes", "No")
    again = client.generate([req])[0]  # temperature 0: the same reply
    assert again.reply.text == gen.reply.text
