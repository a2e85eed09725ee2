"""Typed params: the committed params.yaml validates; typos and unknown modules fail with file, line, key."""

from __future__ import annotations

import pytest

from kgrag.params import ParamsError, load, parse
from tests.conftest import ROOT


def test_committed_params_validate():
    p = load(ROOT / "params.yaml")
    assert p.retrieve.method == "relpath"
    assert p.generate.backend == "llamacpp"
    rp = p.retrieve.module_params()
    assert (rp.paths, rp.plan, rp.fallback) == (1, "data/relplan", "khop")
    assert p.relplan.split != p.data.split
    assert p.data.sample == 200


def test_unknown_key_names_file_line_and_key(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("data:\n  sample: 5\nretrieve:\n  method: pcst\n  pcst:\n    topkk: 3\n")
    with pytest.raises(ParamsError) as e:
        load(f)
    msg = str(e.value)
    assert f"{f}:5" in msg or f"{f}:6" in msg
    assert "retrieve.pcst.topkk" in msg


def test_unknown_module_lists_choices():
    with pytest.raises(ParamsError) as e:
        parse({"retrieve": {"method": "pcts"}})
    assert "unknown retriever module 'pcts'" in str(e.value)
    assert "pcst" in str(e.value) and "none" in str(e.value)


def test_unknown_section_lists_valid_keys():
    with pytest.raises(ParamsError) as e:
        parse({"retreive": {}})
    assert "valid keys here" in str(e.value) and "retrieve" in str(e.value)


def test_wrong_type_fails():
    with pytest.raises(ParamsError) as e:
        parse({"generate": {"temperature": "hot"}})
    assert "generate.temperature" in str(e.value)


def test_unselected_module_subsection_is_validated_on_use_and_by_kgrag_check(tmp_path):
    """Loading checks an unselected module's sub-section by name only (its module is not imported); it is
    validated when first used, and `kgrag check` (modules="all") validates it at once with file, line, key."""
    raw = {"generate": {"backend": "llamacpp", "openai": {"base_urll": "x"}}}
    p = parse(raw)  # the chosen backend (llamacpp) is validated; openai's section only by name
    assert p.generate.module_params().n_ctx > 0
    with pytest.raises(ParamsError) as e:
        p.generate.module_params("openai")
    assert "generate.openai.base_urll" in str(e.value) and "kgrag check" in str(e.value)
    with pytest.raises(ParamsError) as e:
        parse(raw, modules="all")
    assert "generate.openai.base_urll" in str(e.value)
    with pytest.raises(ParamsError):  # a chosen module's typo fails at load, whatever the depth
        parse({"generate": {"backend": "openai", "openai": {"base_urll": "x"}}})
    with pytest.raises(ParamsError) as e:  # not a mapping
        parse({"reason": {"method": "rank", "tog": 3}})
    assert "reason.tog" in str(e.value) and "mapping" in str(e.value)
    f = tmp_path / "params.yaml"
    f.write_text("generate:\n  backend: llamacpp\n  openai:\n    base_urll: x\n")
    from kgrag.cli import main

    assert main(["check", "--params", str(f)]) == 2


def test_loading_params_imports_only_the_chosen_modules():
    """The committed params.yaml loads without importing an unchosen module: of each kind, only the module
    the params choose (or none) is imported. Run in a fresh interpreter; fails when loading imports them all."""
    import json
    import subprocess
    import sys

    code = ("import sys, json; from kgrag.params import load; p = load('params.yaml'); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kgrag'))))")
    mods = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                     check=True).stdout)
    from kgrag.catalogue import BUILTINS

    p = load(ROOT / "params.yaml")
    chosen = {"loader": {p.data.dataset}, "retriever": {p.retrieve.method}, "reasoner": {p.reason.method},
              "backend": {p.generate.backend}, "task_runner": {p.cluster.task_runner}}
    for kind, picked in chosen.items():
        loaded = {name for name, mod in BUILTINS[kind].items() if mod in mods}
        assert loaded <= picked, (kind, sorted(loaded - picked))
    assert not [m for m in mods if m.startswith("kgrag.reasoning.community.")], mods  # no detector chosen


def test_overrides_apply_and_validate():
    p = load(ROOT / "params.yaml", ["retrieve.method=pcst", "retrieve.pcst.topk=7", "generate.max_tokens=5"])
    assert p.retrieve.module_params().topk == 7
    assert p.generate.max_tokens == 5
    with pytest.raises(ParamsError):  # the chosen retriever's section: at load
        load(ROOT / "params.yaml", ["retrieve.method=pcst", "retrieve.pcst.topk=-1"])
    with pytest.raises(ParamsError):  # an unchosen one's: by `kgrag check` (modules="all")
        load(ROOT / "params.yaml", ["retrieve.pcst.topk=-1"], modules="all")


def test_committed_data_section_selects_metaqa_with_its_params():
    p = load(ROOT / "params.yaml")
    assert p.data.dataset == "metaqa"
    assert p.data.loader_kwargs() == {"path": "../shared/data/metaqa", "hops": 2, "split": "test", "sample": 200,
                                      "seed": 0}


def test_loader_section_and_unknown_loader():
    p = load(ROOT / "params.yaml", ["data.dataset=triples", "data.triples.path=kb.txt", "data.triples.delimiter='|'",
                                    "data.input=kb.txt"])
    assert p.data.loader_params().delimiter == "|"
    with pytest.raises(ParamsError) as e:
        load(ROOT / "params.yaml", ["data.dataset=rdf"])
    assert "unknown loader module 'rdf'" in str(e.value) and "ntriples" in str(e.value)
    with pytest.raises(ParamsError) as e:
        load(ROOT / "params.yaml", ["data.dataset=gretriever"])
    assert "data.gretriever.path: required when data.dataset is gretriever" in str(e.value)


@pytest.mark.parametrize("loader", ["triples", "ntriples", "jsonl", "gretriever", "rog"])
def test_dvc_set_reaches_every_loaders_section(tmp_path, loader):
    """`dvc exp run -S data.<loader>.path=...` works for every loader as for a reasoner (issue 24: it failed with
    "Key 'jsonl' is not in struct"): DVC's own override code (hydra, struct mode) on a copy of params.yaml."""
    from dvc.utils.hydra import apply_overrides

    (tmp_path / "my").mkdir()
    (tmp_path / "my" / "kg.tsv").write_text("a\tr\tb\n")
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    apply_overrides(tmp_path / "params.yaml", [f"data.dataset={loader}", f"data.{loader}.path={tmp_path}/my/kg.tsv",
                                               f"data.input={tmp_path}/my"])
    p = load(tmp_path / "params.yaml")
    assert p.data.dataset == loader and p.data.loader_params().path == f"{tmp_path}/my/kg.tsv"


def test_data_input_must_hold_the_selected_loaders_inputs(tmp_path):
    """data.input is the ingest stage's DVC dependency: switching loader without it is an error naming the
    key and a fitting value; a folder holding every input (or the file itself) passes."""
    committed = load(ROOT / "params.yaml")
    assert committed.data.input_paths() == {"data.path": committed.data.input}  # the committed run tracks MetaQA
    with pytest.raises(ParamsError) as e:
        load(ROOT / "params.yaml", ["data.dataset=explagraphs"])
    msg = str(e.value)
    assert "data.input" in msg and "data.explagraphs.path" in msg and "data.input=../shared/data/explagraphs" in msg
    ok = load(ROOT / "params.yaml", ["data.dataset=explagraphs", "data.input=../shared/data/explagraphs"])
    assert ok.data.input_paths() == {"data.explagraphs.path": "../shared/data/explagraphs"}
    # two inputs: both must lie under data.input; the hint is their common folder
    kb, qs = tmp_path / "kg" / "kb.tsv", tmp_path / "q" / "questions.jsonl"
    base = ["data.dataset=triples", f"data.triples.path={kb}", f"data.triples.questions={qs}"]
    with pytest.raises(ParamsError) as e:
        load(ROOT / "params.yaml", base + [f"data.input={kb}"])
    assert "data.triples.questions" in str(e.value) and f"data.input={tmp_path}" in str(e.value)
    assert load(ROOT / "params.yaml", base + [f"data.input={tmp_path}"]).data.input == str(tmp_path)
    # a sibling folder whose name starts like the input is not inside it
    with pytest.raises(ParamsError):
        load(ROOT / "params.yaml", ["data.dataset=explagraphs", "data.explagraphs.path=../shared/data/explagraphs2",
                                    "data.input=../shared/data/explagraphs"])


def test_params_yaml_lists_every_module_param_with_its_default():
    """Every module's params are in params.yaml with the module's defaults, so `dvc exp run -S` reaches any of
    them without `+` / `++`. Exempt: keys without a default (a loader's `path` of the user's data), the LEGO
    stage keys (they override the preset), and MetaQA (its keys sit at the top of `data`)."""
    import yaml
    from pydantic_core import PydanticUndefined

    from kgrag.registry import ALL

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    where = {"retriever": raw["retrieve"], "backend": raw["generate"], "reasoner": raw["reason"],
             "loader": raw["data"], "task_runner": raw["cluster"]}
    exempt = {("retriever", "lego"): {"preset", "extract", "prune", "filter", "refine", "llm", "trace_nodes", "trace_ms"},
              ("loader", "metaqa"): None}
    # the default experiment's deliberate choices: listed, with the module default named in params.yaml's comment
    chosen = {("retriever", "relpath", "paths"): "module default 5", ("retriever", "relpath", "plan"): "the module default)"}
    text = (ROOT / "params.yaml").read_text()
    for (_, _, key), note in chosen.items():
        assert note in text, (key, note)
    problems = []
    for kind, section in where.items():
        for name in ALL[kind].names():
            fields = {k: f for k, f in ALL[kind].get(name).params.model_fields.items()
                      if f.default is not PydanticUndefined or f.default_factory is not None}
            skip = exempt.get((kind, name), set())
            if skip is None or not fields:
                continue
            have = section.get(name)
            if have is None and set(fields) - skip:
                if any(f.default is PydanticUndefined for f in ALL[kind].get(name).params.model_fields.values()):
                    continue  # needs a value only the user has (a data path): documented, not defaulted
                problems.append(f"{kind} {name}: no section")
                continue
            for k, f in fields.items():
                if k in skip:
                    continue
                want = f.default_factory() if f.default is PydanticUndefined else f.default
                if k not in have:
                    problems.append(f"{kind} {name}.{k}: missing")
                elif (kind, name, k) in chosen:
                    continue
                elif have[k] != want and not (isinstance(want, tuple) and list(want) == have[k]):
                    problems.append(f"{kind} {name}.{k}: {have[k]!r} in params.yaml, default {want!r}")
    assert not problems, problems


def _section_defaults_that_differ(model, raw: dict, path: str = "") -> list[str]:
    """Keys of ``raw`` (params.yaml's values) whose ``model`` field default differs, recursing into sub-models."""
    import pydantic

    out = []
    for name, f in model.model_fields.items():
        if name not in raw:
            continue
        value, ann = raw[name], f.annotation
        if not (isinstance(ann, type) and issubclass(ann, pydantic.BaseModel)) and not f.is_required():
            ann = type(f.get_default(call_default_factory=True))  # a section typed Any (G-Retriever's, by name)
        if isinstance(value, dict) and isinstance(ann, type) and issubclass(ann, pydantic.BaseModel):
            out += _section_defaults_that_differ(ann, value, f"{path}{name}.")
            continue
        if f.is_required():
            continue
        want = f.get_default(call_default_factory=True)
        want = want.model_dump() if isinstance(want, pydantic.BaseModel) else want
        want = list(want) if isinstance(want, tuple) else want
        if want != value:
            out.append(f"{path}{name}: {value!r} in params.yaml, default {want!r} in its params model")
    return out


def test_params_models_and_params_yaml_have_one_set_of_defaults():
    """One source of defaults: every section key params.yaml sets (retrieve.method, reason.method, the G-Retriever
    training budget, ...) has that value as the params model's default, so code that builds `RetrieveParams()`
    gets the experiment params.yaml describes. Exempt: data.input, the path of the user's data."""
    import yaml

    from kgrag.params import Params

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    problems = [p for p in _section_defaults_that_differ(Params, raw) if not p.startswith("data.input:")]
    assert not problems, problems


@pytest.mark.slow
def test_the_ingest_stage_imports_only_the_modules_its_params_choose(tmp_path):
    """`python -m stages.ingest`, run for real on 5 MetaQA questions, imports one loader (the chosen one) and no
    retriever, reasoner, backend or task-runner module but those params.yaml chooses; of kgrag's modules it
    imports fewer than half (counted in the stage's own interpreter)."""
    import json
    import subprocess
    import sys

    from tests.conftest import METAQA, need

    need(METAQA.is_dir(), f"real MetaQA data not found at {METAQA}")
    code = ("import sys, json, runpy; sys.argv = ['stages.ingest'] + sys.argv[1:]; "
            "runpy.run_module('stages.ingest', run_name='__main__'); "
            "print('MODULES=' + json.dumps(sorted(m for m in sys.modules if m.startswith('kgrag'))))")
    out = subprocess.run([sys.executable, "-c", code, "--params", str(ROOT / "params.yaml"), "--set", "data.sample=5",
                          "--set", f"data.path={METAQA}", "--set", f"data.input={METAQA}"],
                         cwd=tmp_path, capture_output=True, text=True, env={**__import__("os").environ,
                                                                           "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    mods = json.loads(out.stdout.split("MODULES=")[-1])
    assert (tmp_path / "data" / "ingest" / "questions.parquet").exists()
    from kgrag.catalogue import BUILTINS

    p = load(ROOT / "params.yaml")
    chosen = {"loader": {"metaqa"}, "retriever": {p.retrieve.method}, "reasoner": {p.reason.method},
              "backend": {p.generate.backend}, "task_runner": {p.cluster.task_runner}, "metric": set(),
              "community_detector": set(), "lego_extractor": set(), "lego_filter": set(), "lego_refiner": set()}
    for kind, picked in chosen.items():
        loaded = {name for name, mod in BUILTINS[kind].items() if mod in mods}
        assert loaded <= picked, (kind, sorted(loaded - picked))
    total = sum(1 for p in (ROOT / "kgrag").rglob("*.py"))
    assert len(mods) < total / 2, (len(mods), total)


def test_the_config_layer_names_no_dataset():
    """No loader's special case in the config layer (issue 56): the keys at the top of ``data`` are the ones the
    default loader's params class lists in ``DATA_KEYS``; the framework and the assembly name no loader, and
    ``kgrag/kg/params.py`` names one only as ``dataset``'s default."""
    import re

    from kgrag.catalogue import BUILTINS
    from kgrag.params import Params

    sections = {f.alias or n for n, f in Params.model_fields.items()}  # "gretriever" is a section's name too
    names = "|".join(re.escape(n) for n in BUILTINS["loader"] if n not in sections)
    files = [*sorted((ROOT / "kgrag" / "config").glob("*.py")), ROOT / "kgrag" / "params.py"]
    for f in files:
        code = "\n".join(line for line in f.read_text().splitlines() if not line.lstrip().startswith("#"))
        assert not re.search(rf"[\"'](?:{names})[\"']", code), f
    data = (ROOT / "kgrag" / "kg" / "params.py").read_text()
    assert re.findall(rf"[\"'](?:{names})[\"']", data) == ['"metaqa"']  # dataset: str = Field("metaqa", ...)


def test_top_level_data_keys_come_from_the_default_loaders_params_class():
    """Which keys sit at the top of ``data`` is read from the default loader's params class (``DATA_KEYS``): with
    another default loader whose class lists none, MetaQA's keys are unknown there and its section is an
    ordinary one."""
    from pydantic import Field, ValidationError

    from kgrag.kg.loaders.metaqa import MetaQAParams
    from kgrag.params import DataParams

    assert DataParams.top_loader() == ("metaqa", MetaQAParams.DATA_KEYS)
    d = DataParams.model_validate({"hops": 3, "split": "dev"})
    assert (d.loader_params().hops, d.loader_params().split, d.key("split")) == (3, "dev", "data.split")

    class OtherDefault(DataParams):
        dataset: str = Field("explagraphs")

    assert OtherDefault.top_loader() == ("explagraphs", ())
    assert OtherDefault.model_validate({}).key("split") == "data.explagraphs.split"
    with pytest.raises(ValidationError, match="unknown key 'hops'"):
        OtherDefault.model_validate({"hops": 3})
    m = OtherDefault.model_validate({"dataset": "metaqa", "metaqa": {"hops": 3}})
    assert m.loader_params().hops == 3 and m.key("hops") == "data.metaqa.hops"


def test_params_yaml_comments_are_the_models_descriptions():
    """One source for every param's documentation: params.yaml's comments are written from the params models'
    descriptions (`kgrag params --write`), so a description edited without rewriting the file, or a comment edited
    by hand, fails here naming the first differing key. Lines of the file are at most 120 characters."""
    from kgrag.config.yaml_doc import first_difference, render
    from kgrag.params import Params

    text = (ROOT / "params.yaml").read_text()
    diff = first_difference(text, render(text, Params))
    assert diff is None, f"params.yaml differs from its models (run `kgrag params --write`): {diff}"
    assert [n for n, line in enumerate(text.splitlines(), 1) if len(line) > 120] == []


def test_a_hand_edited_comment_or_description_is_named(tmp_path, monkeypatch):
    """The check names the key whose comment differs: a comment edited by hand, or a description edited without
    `kgrag params --write` (the CLI exits 1 and --write puts the description back)."""
    from kgrag.cli import main
    from kgrag.config.yaml_doc import first_difference, render
    from kgrag.kg.params import DataParams
    from kgrag.params import Params

    text = (ROOT / "params.yaml").read_text()
    edited = text.replace("  seed: 0                  # seed of the question sample\n",
                          "  seed: 0                  # seed of the sample, edited by hand\n", 1)
    assert edited != text
    diff = first_difference(edited, render(edited, Params))
    assert diff is not None and "at key 'seed'" in diff and "edited by hand" in diff
    f = tmp_path / "params.yaml"
    f.write_text(edited)
    assert main(["params", "--params", str(f)]) == 1
    assert main(["params", "--write", "--params", str(f)]) == 0 and f.read_text() == text
    field = DataParams.model_fields["sample"]
    monkeypatch.setattr(field, "description", "questions drawn")
    diff = first_difference(text, render(text, Params))
    assert diff is not None and "at key 'sample'" in diff and "questions drawn" in diff


def test_the_header_and_the_notes_are_generated_too(tmp_path):
    """params.yaml's comment lines of no key are written as well: the header (``yaml_doc.HEADER``), the note above
    the unselected loaders' sections (DataParams') and the commented-out LEGO extractor example (LegoParams', its
    values ppr's defaults). A hand edit of any of them is named and undone by `kgrag params --write`; a comment line
    of the user's own elsewhere is kept."""
    import yaml

    from kgrag.cli import main
    from kgrag.config.yaml_doc import first_difference, render
    from kgrag.params import Params
    from kgrag.retrieval.lego.extract_ppr import PPRParams

    text = (ROOT / "params.yaml").read_text()
    for old, new, where in (
            ("# DVC re-runs only the stages that read the changed key.", "# DVC re-runs what it likes.", "(top)"),
            ("  #   dvc exp run -S data.dataset=jsonl", "  #   dvc exp run -S data.dataset=triples", "input"),
            ("max_ent: 2000, damping: 0.8,", "max_ent: 2000, damping: 0.85,", "extract")):
        edited = text.replace(old, new, 1)
        assert edited != text, old
        diff = first_difference(edited, render(edited, Params))
        assert diff is not None and f"at key {where!r}" in diff and new.strip("# ") in diff, diff  # the key above
        assert render(edited, Params) == text
        f = tmp_path / "params.yaml"
        f.write_text(edited)
        assert main(["params", "--params", str(f)]) == 1
        assert main(["params", "--write", "--params", str(f)]) == 0 and f.read_text() == text
    mine = text.replace("retrieve:", "# my own note on retrieval\nretrieve:", 1)
    assert render(mine, Params) == mine
    # the example, uncommented, is ppr's defaults
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("    # extract: {name: ppr"))
    example = "\n".join(line.lstrip()[2:].split("  # ")[0] for line in lines[i:i + 2])  # "# " and the comment off
    assert yaml.safe_load(example)["extract"] == {"name": "ppr", "params": PPRParams().model_dump()}


def test_a_typo_in_the_gretriever_section_lists_its_keys():
    """G-Retriever's section is reached by name (typed Any in Params), yet a typo there is named with its key path
    and the valid keys, as in any section."""
    with pytest.raises(ParamsError) as e:
        parse({"gretriever": {"train": {"lrr": 1e-5}}})
    assert "gretriever.train.lrr" in str(e.value) and "valid keys here: lr, min_lr" in str(e.value)
