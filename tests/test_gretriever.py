"""G-Retriever (graph token + frozen / LoRA LLM): encoders, split, prompt layout, training step, checkpoints,
the ``gretriever`` backend and the train_gretriever stage, through the real SmolLM2-135M (converted from the packaged
GGUF) and real ExplaGraphs / MetaQA rows."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import METAQA, ROOT, SHARED, need

import torch  # noqa: E402  (pinned in pyproject: always installed)

from kgrag.gretriever import data as D  # noqa: E402
from kgrag.gretriever import datasets as DS  # noqa: E402
from kgrag.gretriever.encoders import GRAPH_ENCODERS, EncoderShape, build_encoder, mean_pool  # noqa: E402
from kgrag.gretriever.model import LoraConfig, ModelConfig, load_llm  # noqa: E402
from kgrag.gretriever.module import build_model  # noqa: E402
from kgrag.gretriever.presets import PRESETS, get_preset, model_config  # noqa: E402
from kgrag.gretriever.model import load_best  # noqa: E402
from kgrag.gretriever.train import TrainConfig, lr_at, mean_loss, optimizer_step, train  # noqa: E402

EXPLAGRAPHS = SHARED / "data" / "explagraphs"


def _has_pyg() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch_geometric") is not None


@pytest.fixture
def pyg():
    """The graph encoders' torch_geometric (the `train` extra): only the tests that build an encoder need it."""
    need(_has_pyg(), "torch_geometric not installed (pip install -e '.[train]')")


@pytest.fixture
def explagraphs():
    """The real ExplaGraphs files: only the tests that read them need them."""
    need((EXPLAGRAPHS / "train.tsv").exists(), f"real ExplaGraphs data not found at {EXPLAGRAPHS}")
    return EXPLAGRAPHS


# ---- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread (as gretriever.train.threads): far faster than two on the shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def llm_dir(tmp_path_factory) -> str:
    """The converted SmolLM2 folder: the convert_llm stage's output when present, else converted here."""
    from kgrag.llm.backends.llamacpp import packaged_gguf
    from kgrag.gretriever.convert import convert_gguf

    done = ROOT / "data" / "llm" / "smollm2-135m-instruct"
    if (done / "model.safetensors").exists() and (done / "source.json").exists():
        return str(done)
    out = tmp_path_factory.mktemp("llm") / "smollm2"
    info = convert_gguf(gguf=packaged_gguf(), out_dir=out)
    assert info["architecture"] == "LlamaForCausalLM" and info["parameters"] > 100_000_000
    return str(out)


@pytest.fixture(scope="session")
def splits():
    """ExplaGraphs train + dev split 6:2:2 (seed 0)."""
    need((EXPLAGRAPHS / "train.tsv").exists(), f"real ExplaGraphs data not found at {EXPLAGRAPHS}")
    return DS.explagraphs_examples(path=str(EXPLAGRAPHS), ratios=(0.6, 0.2, 0.2), seed=0)


@pytest.fixture(scope="session")
def embed():
    """The packaged MiniLM as a caching text embedder."""
    return D.TextEmbedder("all-MiniLM-L6-v2")


def small_cfg(llm_dir: str, **kw) -> ModelConfig:
    """A G-Retriever config with a small graph encoder (the LLM is the real one)."""
    base = dict(llm_dir=llm_dir, graph_token=True, encoder="transformer", encoder_hidden=64, encoder_layers=2,
                encoder_heads=4, projector_hidden=128, max_text_length=256, max_new_tokens=8, seed=0)
    base.update(kw)
    return ModelConfig(**base)


def rows_and_graphs(rows, embed):
    return rows, [D.graph_arrays(e.triples, embed) for e in rows]


def llm_snapshot(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.llm.named_parameters()}


# ---- data ----------------------------------------------------------------------------------------------


def test_split_is_6_2_2_seeded_and_disjoint():
    tr, va, te = D.split_indices(2765, ratios=(0.6, 0.2, 0.2), seed=0)
    assert (len(tr), len(va), len(te)) == (1659, 553, 553)
    assert not (set(tr) & set(va)) and not (set(tr) & set(te)) and not (set(va) & set(te))
    assert sorted(np.concatenate([tr, va, te]).tolist()) == list(range(2765))
    again = D.split_indices(2765, ratios=(0.6, 0.2, 0.2), seed=0)
    other = D.split_indices(2765, ratios=(0.6, 0.2, 0.2), seed=1)
    assert all(np.array_equal(a, b) for a, b in zip((tr, va, te), again))
    assert not np.array_equal(tr, other[0])
    with pytest.raises(ValueError, match="summing to 1"):
        D.split_indices(10, ratios=(0.5, 0.2, 0.2), seed=0)


def test_explagraphs_examples_cover_train_and_dev(splits):
    n = sum(len(v) for v in splits.values())
    lines = sum(1 for f in ("train.tsv", "dev.tsv") for line in open(EXPLAGRAPHS / f) if line.strip())
    assert n == lines  # every row kept (none quarantined in the real files)
    assert len(splits["train"]) == int(n * 0.6) and len(splits["val"]) == int(n * 0.8) - int(n * 0.6)
    ids = [e.example_id for v in splits.values() for e in v]
    assert len(set(ids)) == n and any("-dev-" in i for i in ids) and any("-train-" in i for i in ids)
    for e in splits["train"][:50]:
        assert e.label in ("support", "counter") and e.answers == (e.label,) and e.choices == ("support", "counter")
        assert e.triples and "Argument 1:" in e.question


def test_graph_arrays_follow_the_textualized_node_table(splits, embed):
    ex = splits["train"][0]
    g = D.graph_arrays(ex.triples, embed)
    text = D.graph_text(ex.triples)
    node_rows = text.split("\n\n")[0].splitlines()[1:]
    assert g.num_nodes == len(node_rows) and g.edge_index.shape == (2, len(ex.triples))
    assert g.x.shape == (g.num_nodes, 384) and g.edge_attr.shape == (len(ex.triples), 384)
    first = node_rows[0].split(",", 1)[1]
    assert np.allclose(g.x[0], embed([first])[0])
    empty = D.graph_arrays((), embed)
    assert empty.num_nodes == 0 and empty.edge_index.shape == (2, 0)


@pytest.mark.parametrize("form", ["csv", "triples", "grouped"])
def test_parse_prompt_inverts_build_request(splits, form):
    from kgrag.llm.prompts import build_request, clean_question, context_text

    for ex in splits["test"][:20]:
        ctx = context_text(list(ex.triples), form=form, max_triples=60)
        req = build_request(question=ex.question, context=ctx, temperature=0.0, top_p=1.0, max_tokens=8, seed=0,
                            choices=ex.choices)
        question, triples = D.parse_prompt(req.messages[-1][1])
        assert question == clean_question(ex.question)
        if form == "grouped":  # a line per (head, relation): the same triples, grouped and deduplicated
            assert sorted(set(triples)) == sorted(set(ex.triples)) and len(ctx) <= len(
                context_text(list(ex.triples), form="triples", max_triples=60))
        else:
            assert triples == list(ex.triples)
    req = build_request(question="who directed [Heat]", context="", temperature=0.0, top_p=1.0, max_tokens=8, seed=0)
    assert D.parse_prompt(req.messages[-1][1]) == ("who directed Heat", [])


# ---- encoders ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gcn", "gat", "transformer"])
def test_encoder_shapes_and_pooling(pyg, name):
    torch.manual_seed(0)
    shape = EncoderShape(in_dim=12, hidden=16, out_dim=8, layers=3, heads=4)
    enc = build_encoder(name, shape)
    x = torch.randn(7, 12)
    # graph 0: nodes 0-3, node 1 with three in-edges; graph 1: nodes 4-6
    ei = torch.tensor([[0, 2, 3, 1, 4, 6, 5], [1, 1, 1, 2, 5, 5, 6]])
    ea = torch.randn(7, 12)
    h = enc(x, ei, ea)
    assert h.shape == (7, 8)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    pooled = mean_pool(h, batch, 3)  # graph 2 has no node
    assert pooled.shape == (3, 8)
    assert torch.allclose(pooled[0], h[:4].mean(0), atol=1e-6) and torch.allclose(pooled[1], h[4:].mean(0), atol=1e-6)
    assert torch.count_nonzero(pooled[2]) == 0
    (pooled[:2] @ torch.randn(8)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in enc.parameters() if p.dim() > 1)
    if name != "gcn":  # edge features reach the output
        assert not torch.allclose(enc(x, ei, ea * 3), h)


def test_unknown_encoder_lists_choices():
    with pytest.raises(KeyError, match="valid choices: gat, gcn, transformer"):
        build_encoder("gin", EncoderShape(in_dim=4))
    assert GRAPH_ENCODERS.names() == ["gat", "gcn", "transformer"]


# ---- presets and schedule ------------------------------------------------------------------------------


def test_presets_match_tables_3_and_6():
    from kgrag.params import load

    g = load(ROOT / "params.yaml").gretriever
    cfg = {n: model_config(p, g, embed_model="m", node_dim=384) for n, p in PRESETS.items()}
    assert not cfg["inference_only"].trains and not PRESETS["inference_only"].train
    assert cfg["prompt_tuning"].virtual_tokens == 10 and not cfg["prompt_tuning"].graph_token
    assert cfg["g_retriever"].graph_token and cfg["g_retriever"].lora is None and cfg["g_retriever"].textualize
    assert cfg["lora"].lora is not None and not cfg["lora"].graph_token
    assert cfg["g_retriever_lora"].lora == LoraConfig(r=8, alpha=16.0, dropout=0.05, targets=("q_proj", "v_proj"))
    assert cfg["no_graph_encoder"].virtual_tokens == 10 and not cfg["no_graph_encoder"].graph_token
    assert cfg["no_projector"].graph_token and not cfg["no_projector"].projector
    assert cfg["no_textualized_graph"].graph_token and not cfg["no_textualized_graph"].textualize
    assert PRESETS["no_retrieval"].retrieval == "none" and PRESETS["g_retriever"].retrieval == "pcst"
    assert {p.table for p in PRESETS.values()} == {"3", "6"}
    with pytest.raises(KeyError, match="valid choices: inference_only"):
        get_preset("g-retriever")


def test_lr_schedule_warms_up_then_half_cosine():
    cfg = TrainConfig(lr=1e-4, min_lr=1e-5, epochs=4, warmup_epochs=1.0)
    lrs = [lr_at(s, steps_per_epoch=10, cfg=cfg) for s in range(0, 41)]
    assert lrs[0] == 0.0 and lrs[5] == pytest.approx(5e-5) and lrs[10] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))  # non-increasing after warm-up
    assert lrs[25] == pytest.approx(1e-5 + 0.5 * 9e-5)  # half-way through the cosine
    assert lrs[40] == pytest.approx(1e-5)


def test_table_shows_budget_and_tagged_runs(tmp_path, monkeypatch):
    """stages.gretriever_table: one table for the DVC runs, one per ``--tag`` folder, each row saying the
    training budget (rows × epochs run; "no training" for inference-only) next to the paper's number."""
    from stages import gretriever_table

    def summary(dataset, preset, acc, train_rows, epochs):
        test = {"accuracy": acc} if dataset == "explagraphs" else {"hit": acc, "hit_at_1": acc / 2}
        return {"test": test, "seconds": {"setup": 10.0, "train": 90.0, "test": 20.0, "total": 80.0}, "epochs_run": epochs,
                "sizes": {"train": train_rows, "val": 5, "test": 7}}

    root = tmp_path / "reports" / "gretriever"
    runs = {root / "explagraphs-g_retriever": summary("explagraphs", "g_retriever", 0.75, 1659, 2),
            root / "explagraphs-inference_only": summary("explagraphs", "inference_only", 0.5, 1659, 0),
            root / "budget" / "explagraphs-lora": summary("explagraphs", "lora", 0.625, 400, 1),
            root / "budget" / "metaqa-lora": summary("metaqa", "lora", 0.25, 400, 1)}
    for folder, s in runs.items():
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(s))
    monkeypatch.chdir(tmp_path)
    gretriever_table.main()
    md = (root / "table.md").read_text()
    main, tagged = md.split("### Runs tagged `budget`")
    g_line = next(line for line in main.splitlines() if "G-Retriever |" in line)
    assert "0.7500" in g_line and "0.8516" in g_line and "1659 × 2" in g_line and "2.0 / –" in g_line
    assert "no training" in next(line for line in main.splitlines() if "Inference-only" in line)
    assert len([line for line in main.splitlines() if line.startswith("| 3") or line.startswith("| 6")]) == len(PRESETS)
    lora = [line for line in tagged.splitlines() if line.startswith("| 3") or line.startswith("| 6")]
    assert len(lora) == 1 and "0.6250" in lora[0] and "25.00" in lora[0] and "12.50" in lora[0]
    assert "400 × 1 / 400 × 1" in lora[0]
    out = json.loads((root / "table.json").read_text())
    assert set(out) == {"runs", "budget"} and out["budget"][0]["preset"] == "lora"


def test_table_minutes_come_from_current_run_records(tmp_path, monkeypatch):
    """A summary holds no wall time: the table's minutes are the run record's (data/timings/gretriever/<run>/),
    and a record that no longer describes the run's reports (stale) gives "–", not another run's time."""
    from kgrag import io
    from stages import gretriever_table

    monkeypatch.chdir(tmp_path)
    rep = io.REPORTS / "gretriever" / "explagraphs-g_retriever"
    rep.mkdir(parents=True)
    (rep / "summary.json").write_text(json.dumps({"test": {"accuracy": 0.75}, "epochs_run": 2,
                                                  "sizes": {"train": 1659, "val": 5, "test": 7}}))
    record = {"stage": "train_gretriever", "run_seconds": {"setup": 30.0, "train": 150.0, "test": 60.0, "total": 240.0},
              "outputs": {(rep / "summary.json").as_posix(): io.file_hash(rep / "summary.json")}}
    io.write_json(io.TIMINGS / "gretriever" / "explagraphs-g_retriever" / "timing.json", record)

    def g_line() -> str:
        gretriever_table.main()
        return next(x for x in (rep.parent / "table.md").read_text().splitlines() if "G-Retriever |" in x)

    assert "| 4.0 / – |" in g_line()
    (rep / "summary.json").write_text(json.dumps({"test": {"accuracy": 0.5}, "epochs_run": 2,
                                                  "sizes": {"train": 1659, "val": 5, "test": 7}}))
    assert "| – / – |" in g_line()


# ---- the model through the real LLM --------------------------------------------------------------------


@pytest.mark.slow
def test_graph_token_changes_output_gets_gradients_llm_frozen(pyg, llm_dir, splits, embed):
    rows, graphs = rows_and_graphs(splits["train"][:2], embed)
    model = build_model(small_cfg(llm_dir))
    assert all(not p.requires_grad for p in model.llm.parameters())
    assert not any(n.startswith("llm") for n in model.state_dict())  # the LLM is not part of the trainable state
    before = llm_snapshot(model)
    model.eval()
    with torch.no_grad():
        own = float(model.loss(rows, graphs))
        swapped = float(model.loss(rows, graphs[::-1]))
        emb, mask, pos, _ = model.assemble(rows, graphs, with_labels=False)
        out_a = model.llm(inputs_embeds=emb, attention_mask=mask, position_ids=pos).logits[:, -1]
        emb2 = emb.clone()
        first = mask.argmax(dim=1) + 1  # the graph token follows each row's anchor (BOS)
        emb2[torch.arange(len(rows)), first] = 0.0
        out_b = model.llm(inputs_embeds=emb2, attention_mask=mask, position_ids=pos).logits[:, -1]
    assert own != pytest.approx(swapped, abs=1e-6)  # another graph, another output
    assert (out_a - out_b).abs().max() > 1e-3
    model.train()
    loss = model.loss(rows, graphs)
    loss.backward()
    enc = [p for p in model.encoder.parameters() if p.dim() > 1]
    assert all(p.grad is not None for p in enc)
    # the messages reach every layer (keys and queries of a node with one in-edge get no gradient: softmax of one)
    values = [c.conv.lin_value.weight for c in model.encoder.convs]
    assert all(v.grad.abs().sum() > 0 for v in values)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.projector.parameters())
    assert all(p.grad is None for p in model.llm.parameters())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    enc_before = values[0].detach().clone()
    opt.step()
    assert not torch.equal(values[0], enc_before)
    after = dict(model.llm.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before)


@pytest.mark.slow
def test_lora_starts_as_the_base_llm_and_only_lora_weights_change(pyg, llm_dir, splits, embed):
    rows = splits["train"][:2]
    plain = build_model(small_cfg(llm_dir, graph_token=False))
    with torch.no_grad():
        base_loss = float(plain.eval().loss(rows))
    model = build_model(small_cfg(llm_dir, graph_token=False, lora=LoraConfig(r=4, alpha=8.0, dropout=0.0)))
    try:
        before = llm_snapshot(model)
        names = list(model.state_dict())
        assert names and all(n.startswith("lora.") for n in names)
        assert len(model.lora) == 2 * model.llm.config.num_hidden_layers  # q_proj and v_proj of every layer
        with torch.no_grad():
            assert float(model.eval().loss(rows)) == pytest.approx(base_loss, abs=1e-5)  # B = 0 at start
        lora_before = {k: v.clone() for k, v in model.state_dict().items()}
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer_step(model=model, opt=torch.optim.AdamW(params, lr=1e-3), params=params, groups=[(rows, None)],
                       lr=1e-3, grad_clip=0.1)
        after = dict(model.llm.named_parameters())
        assert all(torch.equal(before[n], after[n]) for n in before)
        changed = [k for k, v in model.state_dict().items() if not torch.equal(v, lora_before[k])]
        assert changed and all(k.startswith("lora.") for k in changed)
        with torch.no_grad():
            assert float(model.eval().loss(rows)) != pytest.approx(base_loss, abs=1e-5)
    finally:
        model.release()
    with torch.no_grad():  # hooks gone: the shared LLM is the base model again
        assert float(plain.eval().loss(rows)) == pytest.approx(base_loss, abs=1e-6)


@pytest.mark.slow
def test_one_training_step_lowers_the_loss_on_real_rows(pyg, llm_dir, splits, embed):
    rows, graphs = rows_and_graphs(splits["train"][:4], embed)
    g = __import__("kgrag.params", fromlist=["load"]).load(ROOT / "params.yaml").gretriever
    # the paper's encoder sizes; the textualized graph cut to 96 tokens (the paper keeps 512): the step's cost is
    # the frozen LLM's forward and backward over the prompt, and the claim holds at any length
    cfg = replace(model_config(get_preset("g_retriever"), g, embed_model="all-MiniLM-L6-v2", node_dim=384),
                  llm_dir=llm_dir, max_text_length=96)
    model = build_model(cfg)
    with torch.no_grad():
        before = float(model.eval().loss(rows, graphs))
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    optimizer_step(model=model, opt=torch.optim.AdamW(params, weight_decay=0.05), params=params,
                   groups=[(rows, graphs)], lr=1e-5, grad_clip=0.1)  # the paper's lr
    with torch.no_grad():
        after = float(model.eval().loss(rows, graphs))
    assert after < before


@pytest.mark.slow
def test_checkpoint_round_trip_and_resume(pyg, llm_dir, splits, embed, tmp_path):
    train_rows, val_rows = splits["train"][:4], splits["val"][:2]
    graphs = {e.example_id: D.graph_arrays(e.triples, embed) for e in train_rows + val_rows}
    cfg = small_cfg(llm_dir, encoder_dropout=0.1)
    tc = TrainConfig(lr=1e-4, min_lr=1e-5, batch_size=2, epochs=2, warmup_epochs=0.5, patience=5, val_loss=True,
                     val_generate=False, checkpoint_every=1, seed=3)
    score = lambda ex, preds: 0.0  # noqa: E731
    quiet = lambda m: None  # noqa: E731
    full = build_model(cfg)
    s_full = train(model=full, train_rows=train_rows, val_rows=val_rows, graphs=graphs, cfg=tc,
                   out_dir=tmp_path / "a", score=score, run_key="k", log=quiet)
    assert s_full["done"] and s_full["step"] == 4 and len(s_full["history"]) == 2
    part = build_model(cfg)
    record = tmp_path / "timings" / "progress.json"  # the run record: wall times, outside the checkpoint folder
    s1 = train(model=part, train_rows=train_rows, val_rows=val_rows, graphs=graphs, cfg=tc, out_dir=tmp_path / "b",
               score=score, run_key="k", log=quiet, stop_after_steps=3, record=record)  # interrupted inside epoch 2
    assert not s1["done"] and s1["step"] == 3 and (tmp_path / "b" / "last.pt").exists()
    first = json.loads(record.read_text())
    assert first["resumed"] == 0 and first["seconds"] == pytest.approx(s1["seconds"]) and len(first["epochs"]) == 1
    resumed = build_model(cfg)  # a new process: fresh weights, state from last.pt
    s2 = train(model=resumed, train_rows=train_rows, val_rows=val_rows, graphs=graphs, cfg=tc,
               out_dir=tmp_path / "b", score=score, run_key="k", log=quiet, record=record)
    assert s2["resumed"] == 1 and s2["done"] and s2["step"] == 4
    # the wall times are the record's: summed over both processes, never in a checkpoint or the history
    assert s2["seconds"] > first["seconds"] and [e["epoch"] for e in s2["epoch_seconds"]] == [1, 2]
    assert json.loads(record.read_text())["resumed"] == 1
    for ck in ("a", "b"):
        st = torch.load(tmp_path / ck / "last.pt", weights_only=False)["state"]
        assert not {"seconds", "resumed"} & set(st)
        assert all(not any(k.endswith("seconds") for k in r) for r in st["history"])
    assert all(not any(k.endswith("seconds") for k in r) for r in s2["history"])
    a, b = full.state_dict(), resumed.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)  # same steps as the uninterrupted run
    assert [r["train_loss"] for r in s2["history"]] == pytest.approx([r["train_loss"] for r in s_full["history"]],
                                                                     abs=1e-5)
    fresh = build_model(cfg)
    rec = load_best(fresh, tmp_path / "b")
    assert rec["epoch"] == s2["best_epoch"]
    best_w = torch.load(tmp_path / "b" / "best.pt", weights_only=False)["trainable"]
    assert all(torch.equal(fresh.state_dict()[k], best_w[k]) for k in best_w)
    # the reloaded weights give the validation loss recorded when best.pt was written
    assert mean_loss(fresh, val_rows, graphs, batch_size=tc.eval_batch_size) == pytest.approx(rec["val_loss"], abs=1e-5)
    other = train(model=build_model(cfg), train_rows=train_rows, val_rows=val_rows, graphs=graphs,
                  cfg=replace(tc, epochs=1), out_dir=tmp_path / "b", score=score, run_key="other", log=quiet)
    assert other["resumed"] == 0 and other["step"] == 2  # another run's checkpoint is not resumed


# ---- backend and stage ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_backend_answers_like_the_model_it_loads(pyg, llm_dir, splits, embed, tmp_path):
    from kgrag.gretriever.backend import GRetrieverBackend, GRetrieverBackendParams
    from kgrag.llm.prompts import build_request, context_text
    from kgrag.llm.calls import LLMRequest

    cfg = small_cfg(llm_dir)
    model = build_model(cfg)
    folder = tmp_path / "ck"
    folder.mkdir()
    torch.save({"trainable": model.state_dict(), "epoch": 1}, folder / "best.pt")
    (folder / "config.json").write_text(json.dumps({"model": cfg.to_dict()}))
    rows = splits["test"][:3]
    direct = model.generate(rows, [D.graph_arrays(e.triples, embed) for e in rows], max_new_tokens=8)
    backend = GRetrieverBackend(GRetrieverBackendParams(checkpoint=str(folder), batch_size=4))
    assert backend.model_id.startswith("gretriever:ck:")
    reqs = [build_request(question=e.question, context=context_text(list(e.triples), form="csv", max_triples=60),
                          temperature=0.0, top_p=1.0, max_tokens=8, seed=0, choices=e.choices) for e in rows]
    seen = []
    bad = LLMRequest(messages=(("user", "Knowledge graph facts (head, relation, tail):\nno question here"),))
    replies = backend.generate([reqs[0], bad, reqs[1], reqs[2]], on_reply=lambda i, r: seen.append(i))
    assert replies[1].error and "Question" in replies[1].error  # a malformed prompt is an error reply ...
    good = [replies[0], replies[2], replies[3]]  # ... and the others are answered as one batch, as `direct`
    assert [r.text for r in good] == [t for t, _, _ in direct]
    assert all(r.error is None and r.tokens_in > 0 for r in good)
    assert seen == [0, 1, 2, 3]
    with pytest.raises(FileNotFoundError, match="no trained G-Retriever checkpoint"):
        GRetrieverBackend(GRetrieverBackendParams(checkpoint=str(tmp_path / "none")))


@pytest.mark.e2e
def test_train_stage_writes_reports_and_checkpoints(pyg, explagraphs, llm_dir, tmp_path, monkeypatch):
    from stages import train_gretriever as stage

    monkeypatch.chdir(tmp_path)
    stage.main(["--dataset", "explagraphs", "--preset", "g_retriever", "--limit", "train=8,val=4,test=4",
                "--params", str(ROOT / "params.yaml"), "--set", f"gretriever.llm_dir={llm_dir}",
                "--set", f"gretriever.explagraphs.path={EXPLAGRAPHS}", "--set", "gretriever.train.epochs=1",
                "--set", "gretriever.encoder.hidden=64", "--set", "gretriever.encoder.projector_hidden=64",
                "--set", "gretriever.max_new_tokens=4", "--set", "gretriever.train.eval_batch_size=4",
                "--set", "gretriever.max_text_length=64"])  # short prompts: the stage's files, not the model, are checked
    rep = tmp_path / "reports" / "gretriever" / "explagraphs-g_retriever"
    s = json.loads((rep / "summary.json").read_text())
    assert s["sizes"] == {"train": 8, "val": 4, "test": 4} and s["epochs_run"] == 1 and s["best_epoch"] == 1
    assert 0.0 <= s["test"]["accuracy"] <= 1.0 and s["test"]["n"] == 4
    assert s["seeds"] == {"train": 0, "data": 0}
    h = json.loads((rep / "history.json").read_text())
    assert len(h["epochs"]) == 1 and h["epochs"][0]["train_loss"] > 0 and h["epochs"][0]["val_score"] is not None
    assert (rep / "curve.png").stat().st_size > 1000
    preds = json.loads((rep / "predictions.json").read_text())
    assert len(preds) == 4 and all(p["gold"] in (["support"], ["counter"]) for p in preds)
    ck = tmp_path / "data" / "gretriever" / "explagraphs-g_retriever"
    assert (ck / "best.pt").exists() and json.loads((ck / "config.json").read_text())["preset"] == "g_retriever"
    _assert_no_wall_time(rep, ck)
    rec = _run_record("explagraphs-g_retriever")
    assert rec["run_seconds"]["train"] > 0 and rec["resumed"] == 0 and len(rec["epoch_seconds"]) == 1
    assert rec["test_ms_per_row"] > 0


def _assert_no_wall_time(rep: Path, ck: Path) -> None:
    """The DVC outputs of a train_gretriever stage (reports and checkpoints) hold no wall time and no run record."""
    assert sorted(f.name for f in rep.iterdir()) == sorted(
        ["summary.json", "history.json", "predictions.json"] + (["curve.png"] if (rep / "curve.png").exists() else []))

    def keys(x):
        if isinstance(x, dict):
            return set(x) | set().union(*map(keys, x.values()))
        return set().union(*map(keys, x)) if isinstance(x, list) else set()

    timed = {"seconds", "ms", "resumed", "train_seconds", "val_seconds", "run_seconds"}
    for f in ("summary.json", "history.json", "predictions.json"):
        assert not timed & keys(json.loads((rep / f).read_text())), f
    for f in ck.glob("*.pt"):
        st = torch.load(f, weights_only=False).get("state", {})
        assert not timed & keys(st), f


def _run_record(name: str) -> dict:
    """A train run's record (data/timings/gretriever/<name>/timing.json), checked to describe its outputs."""
    from kgrag import io
    rec = json.loads((io.TIMINGS / "gretriever" / name / "timing.json").read_text())
    assert rec["stage"] == "train_gretriever" and rec["seconds"] > 0
    assert rec["outputs"] == {p: io.file_hash(p) for p in rec["outputs"]} and len(rec["outputs"]) == 4
    return rec


@pytest.mark.e2e
def test_train_stage_inference_only_writes_its_dvc_output(explagraphs, llm_dir, tmp_path, monkeypatch):
    """No training, yet the checkpoint folder (a DVC output) exists, with the config marked untrained."""
    from stages import train_gretriever as stage

    monkeypatch.chdir(tmp_path)
    stage.main(["--dataset", "explagraphs", "--preset", "inference_only", "--limit", "train=2,val=2,test=2",
                "--params", str(ROOT / "params.yaml"), "--set", f"gretriever.llm_dir={llm_dir}",
                "--set", f"gretriever.explagraphs.path={EXPLAGRAPHS}", "--set", "gretriever.max_new_tokens=4"])
    cfg = json.loads((tmp_path / "data" / "gretriever" / "explagraphs-inference_only" / "config.json").read_text())
    assert cfg["trained"] is False and cfg["preset"] == "inference_only" and not cfg["model"]["graph_token"]
    rep = tmp_path / "reports" / "gretriever" / "explagraphs-inference_only"
    s = json.loads((rep / "summary.json").read_text())
    assert s["epochs_run"] == 0 and s["test"]["n"] == 2
    _assert_no_wall_time(rep, tmp_path / "data" / "gretriever" / "explagraphs-inference_only")
    assert _run_record("explagraphs-inference_only")["run_seconds"]["train"] == 0.0


@pytest.mark.slow
@pytest.mark.e2e
def test_metaqa_examples_from_pcst_and_whole_neighbourhood(tmp_path):
    """Real MetaQA KB: dev questions for train / val, test questions for test, each with its retrieved
    subgraph (PCST, or the whole 2-hop neighbourhood), labels joining the gold answers."""
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.index.embed import EmbeddingIndex, encode
    from kgrag.kg.loaders.metaqa import load_metaqa
    from kgrag.params import RetrieveParams
    from kgrag.kg.store import KGStore
    from tests.conftest import metaqa_entity_vectors

    need((METAQA / "kb.txt").exists(), "real MetaQA data not found")
    t = load_metaqa(path=str(METAQA), hops=2, split="test", sample=1, seed=0)
    write_duckdb(tmp_path / "kg.duckdb", {"entities": t.entities, "relations": t.relations, "triples": t.triples,
                                          "questions": t.questions})
    kg = KGStore(tmp_path / "kg.duckdb")
    index = EmbeddingIndex(model="all-MiniLM-L6-v2",
                           entity_vectors=metaqa_entity_vectors([str(n) for n in kg.entity_names]),
                           relation_vectors=encode([D.relation_text(str(r)) for r in kg.relation_names],
                                                   model="all-MiniLM-L6-v2"))
    retrieve = RetrieveParams(method="pcst", max_neighbourhood_edges=300)
    out = DS.metaqa_examples(kg=kg, index=index, retrieve=retrieve, path=str(METAQA), hops=2, train=3, val=2, test=2,
                            seed=0, mode="pcst")
    assert [len(out[k]) for k in ("train", "val", "test")] == [3, 2, 2]
    assert not {e.example_id for e in out["train"]} & {e.example_id for e in out["val"]}
    known = set(kg.named_triples(kg.heads, kg.relations, kg.tails))
    for e in out["train"] + out["val"] + out["test"]:
        assert e.triples and set(e.triples) <= known
        assert e.label == "|".join(e.answers) and e.answers and not e.choices
    whole = DS.metaqa_examples(kg=kg, index=index, retrieve=retrieve, path=str(METAQA), hops=2, train=3, val=2,
                              test=2, seed=0, mode="none")
    for a, b in zip(out["test"], whole["test"]):
        assert a.example_id == b.example_id and len(b.triples) >= len(a.triples)
    # a lazy index (the default): names read through its vector cache, which retrieval filled
    cache = index.entity_vectors.cache
    emb = D.TextEmbedder("all-MiniLM-L6-v2", preset=DS.index_vectors(kg=kg, index=index), encode=cache.get)
    before = cache.encoded
    g = D.graph_arrays(out["test"][0].triples, emb)  # every name and relation comes from the index
    assert g.num_nodes >= 2 and cache.encoded == before
    assert DS.scores(out["test"], [{"id": e.example_id, "prediction": e.answers[0]} for e in out["test"]])["hit"] == 1.0


def test_auto_dtype_is_bfloat16_only_where_the_cpu_has_native_bf16():
    from kgrag.gretriever.model import resolve_dtype

    xeon = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16\n"
    epyc = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"
    assert resolve_dtype("auto", xeon) == "bfloat16"
    assert resolve_dtype("auto", epyc) == "float32"
    assert resolve_dtype("auto", "") == "float32"  # unreadable: the safe choice
    assert resolve_dtype("bfloat16", epyc) == "bfloat16" and resolve_dtype("float32", xeon) == "float32"
