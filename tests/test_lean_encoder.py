"""The lean BERT encoder (kgrag.index.lean_bert) gives sentence-transformers' vectors bit for bit (the committed
dvc.lock hashes vectors and what is retrieved with them), without importing sentence_transformers/transformers;
``load_model`` picks it for a folder it supports, falls back to SentenceTransformer otherwise, and
``$KGRAG_ENCODER=sentence-transformers`` forces the old path. Real model, no mocks."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kgrag.index import encoder as enc
from kgrag.index import lean_bert
from tests.conftest import METAQA

ROOT = Path(__file__).resolve().parents[1]
MODEL = "all-MiniLM-L6-v2"
#: the marker that starts the texts of 256 tokens or more at the end of `texts`
TRUNCATED = "the texts from here on are cut at 256 tokens " * 40
N_SAMPLE = 600  # random entity names in `texts`, after the 9 relation names (the long, non-ASCII and padded ones come on top)


def _kb() -> list[list[str]]:
    if not (METAQA / "kb.txt").exists():
        pytest.skip(f"real MetaQA data not found at {METAQA}")
    with open(METAQA / "kb.txt", encoding="utf-8") as f:
        return [line.rstrip("\n").split("|") for line in f if line.strip()]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """The 9 MetaQA relation names, ~800 entity names (a seeded sample plus the longest and non-ASCII ones),
    padded names, an empty string, a text over 256 tokens, special-token strings and some questions."""
    kb = _kb()
    relations = sorted({r for _, r, _ in kb})
    assert len(relations) == 9
    names = sorted({x for h, _, t in kb for x in (h, t)})
    rng = random.Random(7)
    sample = rng.sample(names, N_SAMPLE)
    longest = sorted(names, key=len, reverse=True)[:40]
    unicode = rng.sample([n for n in names if not n.isascii()], 120)
    padded = [" " + n + " " for n in rng.sample(names, 10)] + ["\t" + n + "\n" for n in rng.sample(names, 10)]
    padded += ["   ", "\u3000" + names[0], names[1] + "\u00a0"]
    long_text = " ".join(rng.sample(names, 200))  # well over 256 word pieces: truncated
    questions = []
    with open(METAQA / "qa_1hop_test.txt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= 60:
                break
            questions.append(line.split("\t")[0].replace("[", "").replace("]", ""))
    out = relations + sample + longest + unicode + padded + questions + [
        "", "[CLS] [SEP] [MASK] [PAD] [UNK]", "directed_by " * 5]
    # texts at or over the 256-token cut: in one length-sorted batch of 256 they pad every text of it to 256 tokens
    # (45 s a batch size on 2 cores), so they are encoded at the small batch sizes only
    out += [TRUNCATED, long_text, long_text[:700], "x" * 300]
    assert len(out) > 800
    return out


@pytest.fixture(scope="module")
def st():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(enc.model_path(MODEL), device="cpu")


@pytest.fixture(scope="module")
def lean():
    return lean_bert.LeanBertEncoder(enc.model_path(MODEL))


@pytest.fixture(scope="module")
def reference(st):
    """sentence-transformers' vectors of a text list at a batch size (computed once per module)."""
    done: dict[tuple[int, int], np.ndarray] = {}

    def vectors(texts: list[str], batch_size: int) -> np.ndarray:
        key = (hash(tuple(texts)), batch_size)
        if key not in done:
            done[key] = st.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                  show_progress_bar=False)
        return done[key]

    return vectors


def test_the_packaged_model_is_supported():
    spec = lean_bert.check(enc.model_path(MODEL))
    assert spec["max_length"] == 256 and spec["hidden"] == 384 and spec["layers"] == 6 and spec["normalize"]


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 7, 256])
def test_vectors_are_bit_identical_to_sentence_transformers(texts, reference, lean, batch_size):
    if batch_size == 1:  # one forward per text: 200 of the random names are enough (and every special text)
        texts = texts[: 9 + 200] + texts[9 + N_SAMPLE:]
    if batch_size > 7:
        texts = texts[: texts.index(TRUNCATED)]
    want = reference(texts, batch_size)
    got = lean.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                      show_progress_bar=False)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == (len(texts), 384)
    assert np.array_equal(got, want), f"{int((got != want).any(1).sum())} rows differ, max {np.abs(got - want).max()}"


@pytest.mark.slow
def test_encode_through_kgrag_on_the_lean_path_and_with_the_escape_hatch(texts, reference, monkeypatch):
    monkeypatch.delenv(enc.CACHE_ENV, raising=False)  # encode, not read a cached list
    texts = texts[: texts.index(TRUNCATED)]
    want = reference(texts, 256)  # kgrag's batch size
    from sentence_transformers import SentenceTransformer

    monkeypatch.delenv(enc.ENCODER_ENV, raising=False)
    assert isinstance(enc.load_model(MODEL), lean_bert.LeanBertEncoder)
    assert np.array_equal(enc.encode(texts, model=MODEL), want)
    assert enc.encode([], model=MODEL).shape == (0, 384)
    monkeypatch.setenv(enc.ENCODER_ENV, "sentence-transformers")
    assert isinstance(enc.load_model(MODEL), SentenceTransformer)
    assert np.array_equal(enc.encode(texts, model=MODEL), want)
    monkeypatch.setenv(enc.ENCODER_ENV, "lean")
    assert isinstance(enc.load_model(MODEL), lean_bert.LeanBertEncoder)
    monkeypatch.setenv(enc.ENCODER_ENV, "nonsense")
    with pytest.raises(ValueError, match="KGRAG_ENCODER"):
        enc.load_model(MODEL)


def test_the_lean_interface(lean):
    assert lean.get_sentence_embedding_dimension() == lean.get_embedding_dimension() == 384
    one = lean.encode("hello", normalize_embeddings=True)
    assert one.shape == (384,) and np.array_equal(one, lean.encode(["hello"], normalize_embeddings=True)[0])
    assert abs(float(np.linalg.norm(one)) - 1) < 1e-6
    assert lean.encode(["hello"], convert_to_tensor=True).shape == (1, 384)
    assert lean.encode([]).shape == (0,)


@pytest.mark.slow
def test_a_process_encoding_with_the_default_model_imports_no_sentence_transformers():
    code = ("import sys, kgrag.index.encoder as e; v = e.encode(['x'], model='all-MiniLM-L6-v2'); "
            "assert v.shape == (1, 384), v.shape; "
            "bad = [m for m in ('sentence_transformers', 'transformers') if m in sys.modules]; "
            "assert not bad, bad; print('ok')")
    env = {k: v for k, v in os.environ.items() if k != enc.ENCODER_ENV}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def _copy(src: str, dst: Path) -> Path:
    """A copy of model folder ``src`` whose large files are links."""
    for p in Path(src).rglob("*"):
        q = dst / p.relative_to(src)
        if p.is_dir():
            q.mkdir(parents=True, exist_ok=True)
        else:
            q.parent.mkdir(parents=True, exist_ok=True)
            if p.stat().st_size > 1_000_000:
                q.symlink_to(p)
            else:
                q.write_bytes(p.read_bytes())
    return dst


def _edit(path: Path, fn) -> None:
    path.write_text(json.dumps(fn(json.loads(path.read_text()))))


DENSE = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}


@pytest.mark.parametrize("file, change, why", [
    ("modules.json", lambda m: m[:2] + [DENSE], "Normalize"),
    ("modules.json", lambda m: m + [DENSE], "modules.json"),
    ("modules.json", lambda m: m[:1], "modules.json"),
    ("1_Pooling/config.json", lambda c: {**c, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True},
     "pooling"),
    ("1_Pooling/config.json", lambda c: {**c, "pooling_mode_max_tokens": True}, "pooling"),
    ("config.json", lambda c: {**c, "model_type": "roberta"}, "model_type"),
    ("config.json", lambda c: {**c, "hidden_act": "gelu_new"}, "hidden_act"),
    ("config_sentence_transformers.json", lambda c: {**c, "prompts": {"query": "query: "}}, "prompts"),
    ("sentence_bert_config.json", lambda c: {**c, "do_lower_case": True}, "do_lower_case"),
    ("tokenizer_config.json", lambda c: {**c, "do_lower_case": False}, "normalizer"),
])
def test_an_unsupported_folder_is_refused(tmp_path, file, change, why):
    folder = _copy(enc.model_path(MODEL), tmp_path / "m")
    _edit(folder / file, change)
    with pytest.raises(lean_bert.Unsupported, match=why):
        lean_bert.check(folder)
    assert not lean_bert.supported(folder)


@pytest.mark.slow
def test_an_unsupported_folder_loads_sentence_transformers(tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    folder = _copy(enc.model_path(MODEL), tmp_path / "cls")
    _edit(folder / "1_Pooling/config.json",
          lambda c: {**c, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True})
    monkeypatch.delenv(enc.ENCODER_ENV, raising=False)
    model = enc.load_model(str(folder))
    assert isinstance(model, SentenceTransformer) and model[1].pooling_mode == "cls"
    monkeypatch.setenv(enc.ENCODER_ENV, "lean")
    with pytest.raises(lean_bert.Unsupported, match="pooling"):
        enc.load_model(str(folder))


@pytest.mark.slow
def test_a_model_saved_by_sentence_transformers_is_lean_and_bit_identical(texts, st, tmp_path):
    """A fine-tuned scorer (stage finetune_path_scorer) is a SentenceTransformer.save of changed weights: the lean
    encoder reads its sentence-transformers 6 configs and gives the same vectors as it reloaded."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(enc.model_path(MODEL), device="cpu")
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 1e-3)  # a stand-in for training
    folder = tmp_path / "st_model"
    model.save(str(folder))
    assert lean_bert.supported(folder)
    sub = texts[::5]
    want = SentenceTransformer(str(folder), device="cpu").encode(sub, batch_size=32, normalize_embeddings=True)
    got = lean_bert.LeanBertEncoder(folder).encode(sub, batch_size=32, normalize_embeddings=True)
    assert np.array_equal(got, want)
    assert not np.array_equal(got, st.encode(sub, batch_size=32, normalize_embeddings=True))
