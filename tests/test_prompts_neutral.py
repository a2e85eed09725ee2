"""Domain-neutral prompts: no prompt holds one domain's (or one dataset's) worked example.

kgrag answers over any KG, so a worked example teaches the *format* only, with placeholders no KG holds
(``kgrag.llm.prompts.DEMO_NAMES``, relations ``relation_1`` / ``relation_2``). Checked two ways: every prompt
constant of ``kgrag.llm`` and ``kgrag.reasoning`` (module-level upper-case strings), and every request every
registered reasoner sends on a KG whose names carry no domain words (so a domain word in a request can only
come from kgrag's own prompt text), worked examples on, generated and scored decisions alike.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import kgrag.llm
import kgrag.reasoning
from kgrag.evaluation.evaluate import echoes_demo, normalize
from kgrag.kg.duckdb_io import write_duckdb
from kgrag.kg.store import KGStore
from kgrag.llm.calls import LLMClient, LLMReply, score_reply_text
from kgrag.llm.prompts import DEMO, DEMO_NAMES, DEMO_RELATIONS
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.types import Question
from tests.conftest import tiny_tables

# the words of the film domain (MetaQA / WikiMovies) a worked example used to hold, and a few more
DOMAIN_WORDS = re.compile(
    r"\b(films?|movies?|actors?|actress(es)?|directors?|directed|starred|starring|genres?|screenwriters?|"
    r"writers?|written|cinema|imdb|people|example film|example actor|example director)\b", re.IGNORECASE)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (tuple, list, set, frozenset)):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)


def prompt_constants() -> list[tuple[str, str]]:
    """(module.NAME, text) of every module-level upper-case string (or tuple of strings) of kgrag.llm and
    kgrag.reasoning: the system prompts, templates and worked examples."""
    out = []
    for pkg in (kgrag.llm, kgrag.reasoning):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            mod = importlib.import_module(info.name)
            for name, value in vars(mod).items():
                if re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
                    out += [(f"{info.name}.{name}", s) for s in _strings(value)]
    return out


def test_prompt_constants_hold_no_domain_words():
    consts = prompt_constants()
    names = {n for n, _ in consts}
    # the scan sees the worked examples of every reasoner that has one
    for n in ("kgrag.llm.prompts.DEMO", "kgrag.reasoning.reasoners.tog.REASON_DEMO",
              "kgrag.reasoning.reasoners.fasttog.REASON_DEMO", "kgrag.reasoning.reasoners.agent.DEMO",
              "kgrag.reasoning.reasoners.baselines.COT_DEMO"):
        assert n in names
    bad = [(n, DOMAIN_WORDS.search(s).group(0), s[:80]) for n, s in consts if DOMAIN_WORDS.search(s)]
    assert not bad, bad


def test_worked_examples_use_only_the_placeholders():
    """Every worked example names only DEMO_NAMES and the placeholder relations; the names survive the answer
    normalization whole (an article-like letter, 'Entity A', would shrink to 'entity'), so demo_echoes counts a
    copied example and nothing else."""
    from kgrag.reasoning.reasoners import agent, baselines, fasttog, tog

    assert DEMO_NAMES == ("Entity One", "Entity Two", "Entity Three", "Entity Four", "Entity Five")
    assert DEMO_RELATIONS == ("relation_1", "relation_2")
    assert all(len(normalize(n).split()) == 2 for n in DEMO_NAMES)
    demos = {"answer": DEMO, "tog": tog.REASON_DEMO, "fasttog": fasttog.REASON_DEMO, "agent": agent.DEMO,
             "cot": baselines.COT_DEMO}
    for name, demo in demos.items():
        text = "\n".join(_strings(demo))
        used = set(re.findall(r"Entity \w+", text))
        assert used and used <= set(DEMO_NAMES), (name, used)
        rels = set(re.findall(r"\(Entity \w+, (\w+), ", text))  # the relations of the (head, relation, tail) lines
        assert rels <= set(DEMO_RELATIONS), (name, rels)
    # the answer's example answers with two placeholders, which demo_echoes catches; a real name does not echo
    assert echoes_demo(DEMO[1]) and echoes_demo("Entity Four")
    assert not echoes_demo("the entity") and not echoes_demo("an entity of the graph")
    assert not echoes_demo("Michael Mann")


# ---------------------------------------------------------------------------- every reasoner's requests

EDGES = [("Node 1", "link_a", "Node 2"), ("Node 2", "link_b", "Node 3"), ("Node 1", "link_a", "Node 4"),
         ("Node 4", "link_b", "Node 5"), ("Node 3", "link_c", "Node 6")]
QUESTION = "what is the link_b of the link_a of [Node 1]"


@pytest.fixture(scope="module")
def nkg(tmp_path_factory) -> KGStore:
    path = tmp_path_factory.mktemp("neutral") / "kg.duckdb"
    write_duckdb(path, tiny_tables(EDGES))
    return KGStore(path)


class Recorder:
    """Answers every request (a generation with a reply the parsers read as "not yet", a scoring request with
    equal scores) and keeps the requests."""

    model_id = "recorder"

    def __init__(self):
        self.requests = []

    def generate(self, requests):
        self.requests += list(requests)
        return [LLMReply(text=score_reply_text([(-1.0, 1)] * len(r.continuations))) if r.scoring
                else LLMReply(text="Answer: Unknown", tokens_in=1, tokens_out=1) for r in requests]


# the reasoners whose default requests show a worked example (explore has none of its own)
SHOW_DEMO = ("answer", "io", "cot", "cot-sc", "tog", "fasttog", "agent", "rank")
# each registered reasoner with its defaults, and the scored decisions where a reasoner has them
VARIANTS = [(name, {}) for name in REASONERS.names()] + [
    ("tog", {"decide": "score"}), ("fasttog", {"decide": "score"}), ("agent", {"decide": "score"}),
    ("explore", {"decide": "score"}), ("agent", {"strategy": "got"}), ("explore", {"strategy": "tot"}),
]


def _recorded(nkg, name: str, params: dict, sampling: Sampling) -> Recorder:
    """The requests reasoner ``name`` (with ``params``) makes on the tiny KG's question; skips a variant its params
    do not have."""
    entry = REASONERS.get(name)
    try:
        p = entry.params(**params)
    except Exception as e:  # a variant this reasoner's params do not have
        pytest.skip(f"{name} {params}: {e}")
    rec = Recorder()
    context = "\n".join(f"({h}, {r}, {t})" for h, r, t in EDGES)
    q = Question("n1", QUESTION, tuple(nkg.ids_of(["Node 1"])))
    job = entry.impl(inp=ReasonInput(question=q, context=context, kg=nkg, sampling=sampling), params=p)
    run_batched(jobs=[job], client=LLMClient(rec, cache=None))
    return rec


@pytest.mark.parametrize("name,params", VARIANTS, ids=[f"{n}{'-' + '-'.join(map(str, p.values())) if p else ''}"
                                                      for n, p in VARIANTS])
def test_every_reasoners_requests_hold_no_domain_words(nkg, name, params):
    rec = _recorded(nkg, name, params, Sampling(few_shot=True))
    assert rec.requests, name
    for r in rec.requests:
        for role, text in r.messages:
            m = DOMAIN_WORDS.search(text)
            assert m is None, (name, role, m.group(0), text[:200])
        for c in r.continuations:
            assert DOMAIN_WORDS.search(c) is None, (name, c)
    if name in SHOW_DEMO and not params:  # the check covers the worked examples: they were shown
        assert any("Entity Four" in text for r in rec.requests for _, text in r.messages), name


@pytest.mark.parametrize("name,params", VARIANTS, ids=[f"{n}{'-' + '-'.join(map(str, p.values())) if p else ''}"
                                                      for n, p in VARIANTS])
def test_every_reasoners_prompts_ask_for_the_answer_separator(nkg, name, params):
    """evaluate.answer_separator (``Sampling.separator``) reaches every prompt: with ";" no request of any
    reasoner asks for (or shows) answers joined by " | " (this KG's names and facts hold none), and the ones that
    show an answer list show it joined by " ; "."""
    rec = _recorded(nkg, name, params, Sampling(few_shot=True, separator=";"))
    texts = [text for r in rec.requests for _, text in r.messages]
    assert not [t for t in texts if " | " in t], name
    if name in SHOW_DEMO and not params:
        assert any("Entity Four ; Entity Five" in t or "name ; name" in t or "' ; '" in t for t in texts), name


def test_explore_extraction_asks_for_entities_not_a_domains_kinds(nkg):
    """The entity extraction asks for the named things (entities) of the thought, whatever the KG holds."""
    from kgrag.reasoning.reasoners.explore import ExploreDomain, ExploreParams

    q = Question("n1", QUESTION, tuple(nkg.ids_of(["Node 1"])))
    dom = ExploreDomain(ReasonInput(question=q, context="", kg=nkg), ExploreParams())
    (_, system), (_, user) = dom.extract_request("Node 2 has link_b Node 3.").messages
    assert "List the named things (entities) in the text" in user
    assert DOMAIN_WORDS.search(system + user) is None
