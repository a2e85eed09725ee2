"""The tune_answer_scorer stage's parts on the real packaged SmolLM2 (issue "The LLM earns its place"): a few training
rows written by hand (a prompt, a gold candidate, distractors), so the tests run in about a minute: the same inputs
give the same adapter weights, the tuned scores move in the trained direction, the merged GGUF served by llama.cpp
scores as the torch model does, an interrupted training resumes from its checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

SYSTEM = "You answer questions using the knowledge graph facts you are given."


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The packaged GGUF, its llama.cpp tokenizer and its Hugging Face conversion (once per module)."""
    from llama_cpp import Llama

    from kgrag.gretriever.convert import convert_gguf
    from kgrag.llm.backends.llamacpp import packaged_gguf

    gguf = packaged_gguf()
    hf = tmp_path_factory.mktemp("hf") / "smollm2"
    convert_gguf(gguf=gguf, out_dir=hf)
    return gguf, Llama(model_path=str(gguf), vocab_only=True, verbose=False), hf


def _rows(tok):
    from kgrag.llm.backends.llamacpp_engine import chat_tokens, continuation_tokens

    facts = [("Entity One", "relation_1", "Entity Two"), ("Entity One", "relation_2", "Entity Three"),
             ("Entity Four", "relation_1", "Entity Five")]
    out = []
    for i, (h, r, t) in enumerate(facts * 2):
        ctx = "\n".join(f"({a}, {b}, {c})" for a, b, c in facts)
        q = f"Knowledge graph facts (head, relation, tail):\n{ctx}\n\nQuestion: what is the {r} of {h}\nAnswer:"
        names = [t] + [c for _, _, c in facts if c != t]
        out.append({"question_id": f"q{i}", "names": names,
                    "prompt": chat_tokens(tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]),
                    "candidates": [continuation_tokens(tok, n) for n in names], "gold": [True, False, False]})
    return out


def _model(hf, seed=0):
    from transformers import AutoModelForCausalLM

    from kgrag.tune.lora import LoraSpec, add_lora

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    return model, add_lora(model, LoraSpec(layers=2, targets=("v_proj", "down_proj"), r=4, alpha=8.0), seed)


def _train(model, adapters, rows, ckpt, **kw):
    from kgrag.tune.train import train

    return train(model=model, adapters=adapters, rows=rows, epochs=kw.get("epochs", 3), lr=3e-3, negatives=2,
                 seed=0, max_prompt=512, checkpoint=ckpt, checkpoint_every=kw.get("every", 2),
                 progress=kw.get("progress", lambda *a: None))


@pytest.mark.slow
def test_same_inputs_same_weights_and_scores_move_in_the_trained_direction(base, tmp_path):
    from kgrag.tune.lora import adapter_state
    from kgrag.tune.train import scores_of

    _, tok, hf = base
    rows = _rows(tok)
    model, adapters = _model(hf)
    before = scores_of(model, rows, 512)
    hist = _train(model, adapters, rows, tmp_path / "a.pt")
    after = scores_of(model, rows, 512)
    margin = lambda s: np.mean([x[0] - max(x[1:]) for x in s])  # noqa: E731
    assert margin(after) > 0 and margin(after) > margin(before) + 0.3, (margin(before), margin(after))
    assert hist["trained_rows"] == len(rows) and len(hist["loss_per_epoch"]) == 3
    model2, adapters2 = _model(hf)
    _train(model2, adapters2, rows, tmp_path / "b.pt")
    s1, s2 = adapter_state(adapters), adapter_state(adapters2)
    assert all(torch.equal(s1[k], s2[k]) for k in s1)  # the same inputs (seed, threads) give the same weights


@pytest.mark.slow
def test_an_interrupted_training_resumes_from_its_checkpoint(base, tmp_path):
    from kgrag.tune.lora import adapter_state

    _, tok, hf = base
    rows = _rows(tok)
    full_model, full = _model(hf)
    _train(full_model, full, rows, tmp_path / "full.pt")

    class Stop(Exception):
        pass

    def stop_at_5(i, n, loss):
        if i == 5:
            raise Stop
    model, adapters = _model(hf)
    with pytest.raises(Stop):
        _train(model, adapters, rows, tmp_path / "cut.pt", progress=stop_at_5)  # checkpoint after row 4 of 18
    model, adapters = _model(hf)  # a new process: the adapters start fresh and read the checkpoint
    seen = []
    _train(model, adapters, rows, tmp_path / "cut.pt", progress=lambda i, n, loss: seen.append(i))
    assert seen[0] == 5  # rows 1-4 were not trained again (checkpoints every 2 rows)
    a, b = adapter_state(full), adapter_state(adapters)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.slow
def test_the_served_gguf_scores_as_the_torch_model(base, tmp_path):
    """llama.cpp on the merged GGUF (the tuned tensors float32, the others the packaged Q4_1, as-is) against the torch
    model with its adapters: the same candidate order, each score within 0.5 nats (llama.cpp multiplies Q4_1 weights
    with 8-bit activations, torch the de-quantized weights in float32)."""
    from llama_cpp import Llama

    from kgrag.llm.backends.llamacpp_engine import ScoreEngine
    from kgrag.tune.gguf import write_merged
    from kgrag.tune.lora import deltas
    from kgrag.tune.train import scores_of

    gguf, tok, hf = base
    rows = _rows(tok)
    model, adapters = _model(hf)
    _train(model, adapters, rows, tmp_path / "c.pt", epochs=1)
    torch_scores = scores_of(model, rows[:3], 512)
    write_merged(base=gguf, out=tmp_path / "tuned.gguf", deltas=deltas(adapters), name="test")
    llm = Llama(model_path=str(tmp_path / "tuned.gguf"), n_ctx=1024, n_threads=1, verbose=False)
    engine = ScoreEngine(llm, n_ctx=1024, n_batch=256, n_threads=1, exact=True)
    for r, ts in zip(rows[:3], torch_scores):
        cs = [s for s, _ in engine.score(r["prompt"], r["candidates"])]
        assert np.argsort(cs).tolist() == np.argsort(ts).tolist()
        assert np.max(np.abs(np.asarray(cs) - np.asarray(ts))) < 0.5, (cs, ts)


# ---- the checkpoint loads tensors and plain data only (a tiny model: no SmolLM2) ---------------------------------

_RAN: list[str] = []


def _ran_on_load(what):  # what an unsafe load of the pickle below would run
    _RAN.append(what)
    return what


class _Payload:
    def __reduce__(self):
        return _ran_on_load, ("code from the checkpoint",)


def _tiny():
    """A causal LM of 8 tokens whose logits are a LoRA-like update alone (B starts at zero) and its adapter."""
    from types import SimpleNamespace

    from torch import nn

    class Adapter(nn.Module):
        def __init__(self):
            super().__init__()
            self.A = nn.Parameter(torch.randn(2, 4, generator=torch.Generator().manual_seed(0)))
            self.B = nn.Parameter(torch.zeros(8, 2))

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(8, 4).requires_grad_(False)
            self.ad = Adapter()

        def forward(self, input_ids, **kw):
            return SimpleNamespace(logits=self.emb(input_ids) @ self.ad.A.t() @ self.ad.B.t(), past_key_values=None)

    torch.manual_seed(0)
    m = Tiny()
    return m, {"0.v_proj": m.ad}


def _tiny_rows():
    return [{"question_id": f"q{i}", "prompt": [1, 2, i % 3], "candidates": [[4], [5], [6]],
             "gold": [True, False, False]} for i in range(6)]


def _tiny_train(model, adapters, ckpt, progress=lambda *a: None):
    from kgrag.tune.train import train

    return train(model=model, adapters=adapters, rows=_tiny_rows(), epochs=2, lr=0.05, negatives=2, seed=0,
                 max_prompt=8, checkpoint=ckpt, checkpoint_every=2, progress=progress)


def test_a_checkpoint_holding_other_objects_is_refused_not_run(tmp_path):
    """A pickle of an arbitrary object where the checkpoint belongs: training refuses it (weights_only=True) and
    the object's code never runs."""
    ckpt = tmp_path / "last.pt"
    torch.save({"key": {}, "adapters": {}, "state": _Payload()}, ckpt)
    model, adapters = _tiny()
    with pytest.raises(ValueError, match="not a tune checkpoint"):
        _tiny_train(model, adapters, ckpt)
    assert _RAN == []


def test_a_real_checkpoint_still_resumes(tmp_path):
    """A checkpoint written by train (adapters, AdamW state, position) loads with weights_only=True and resumes
    where the run stopped, to the weights of an uninterrupted run."""
    from kgrag.tune.lora import adapter_state

    full_model, full = _tiny()
    _tiny_train(full_model, full, tmp_path / "full.pt")

    class Stop(Exception):
        pass

    def stop_at_9(i, n, loss):
        if i == 9:
            raise Stop
    model, adapters = _tiny()
    with pytest.raises(Stop):
        _tiny_train(model, adapters, tmp_path / "cut.pt", progress=stop_at_9)  # checkpoint after row 8 of 12
    model, adapters = _tiny()
    seen = []
    _tiny_train(model, adapters, tmp_path / "cut.pt", progress=lambda i, n, loss: seen.append(i))
    assert seen[0] == 9
    a, b = adapter_state(full), adapter_state(adapters)
    assert any(a[k].abs().sum() > 0 for k in a) and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
