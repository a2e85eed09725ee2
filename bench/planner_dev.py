"""Benchmark (dev only): what each relation-path planner idea does, on the dev parts of four KGs.

The choices of ``kgrag.index.zeroshot`` (its features and :class:`~kgrag.index.zeroshot.Weights`), of
``relpath.plan_weight`` and of the lexicon weight were made here, on dev, never on a test part:

- MetaQA: ``--per-hop`` questions of each dev file (seed 1), topic from the brackets; the pool (unlabelled texts
  for self-training, labelled questions for the lexicon and vote) is other dev questions (seed 2);
- WorldCup2014 ``WC-P2``, PathQuestion-Large 2H and 3H: the ``irn`` loader's dev part (the test part is never
  read), its first ``--eval`` questions evaluated and the rest the pool.

Every candidate relation sequence of 1..3 steps from the topic is walked exhaustively (``relpath``'s walk rules:
revisits allowed, a co-step does not return to the nodes it left and is no candidate where it reaches nothing
else, mirrored relations skipped),
and a planner picks one. The score of a pick is the expected Hit@1 of a random end of it (share of its ends that
are gold answers): a retrieval figure, no LLM. ``oracle`` is the best pick's.

Configurations (``configs`` in the JSON): ``cosine`` (the old zero-shot: cosine of the question and the relation
names), ``ll`` (IBM-1 likelihood alone), ``ll+support+count+cue`` (no answer type), ``lexical`` (every feature,
the default weights), ``lexical (leave-one-KG-out weights)`` (weights searched on the other three KGs: the
honest transfer figure), ``lexical + self-trained vote`` (source kg: pool texts labelled by the planner, vote
weight w), ``lexical + lexicon`` / ``+ vote`` (source labelled), and the compositional check (a seeded fifth of
the pool's relation sequences removed from the labels; the questions whose gold sequence was removed).
With ``--wordnet``: ``lexical + WordNet`` and its leave-one-KG-out row, the same questions with WordNet's links
between question words and relation-name words (``kgrag.index.wordnet``; issue 54); the ``type`` column is the
plain rows' (it reads no word-relation match), so these rows cost a minute, not MetaQA's quarter of an hour.
With ``--wordnet`` and ``--pseudo``: the pseudo-question fits again with WordNet's links in the real and the
pseudo-questions' rows alike (``lexical + WordNet (pseudo-question fit ...)``), as ``relplan.wordnet`` fits and ranks.
With ``--phrase-model M``: the same rows (default weights, leave-one-KG-out, ``--loko-seeds``; with ``--wordnet``
also WordNet's) with question words and relation phrases compared through model ``M``'s vectors (a packaged model,
``kgrag.index.encoder.PACKAGED``, or a sentence-transformers folder: issue 54 tried all-mpnet-base-v2, assembled
from its five PyPI part wheels as docs/benchmarks.md says) instead of all-MiniLM-L6-v2's; the answer type, the
cosine row and the vote keep MiniLM (the entity vectors are MiniLM's). ``--phrase-const NAME=VALUE`` sets a
similarity-scale constant of ``kgrag.index.zeroshot`` (STEM_SIM, BACKGROUND_SIM, SUPPORT, MENTION, TEMPERATURE,
...) for those rows only.

With ``--pseudo N`` (issue 54's per-KG self-supervision): ``N`` pseudo-questions of each KG, walks of 1-3 steps from
the pool's topics (never its answers or gold sequences) worded from the relation names alone ("what is the
nationality of the one whose spouse is X?", :func:`verbalise`), and two rows scored on the real dev questions:
weights fitted by ``fit_smooth`` on that KG's pseudo-questions alone, and on the other KGs' real questions plus that
KG's pseudo-questions (``--pseudo-seed`` draws other walks).

Every score also gives the set's *paraphrase subset* (``paraphrase``, ``paraphrase_questions``): the questions
whose gold sequence reaches an answer and none of whose content words shares a 4-letter stem with a relation name
on it (``kgrag.index.zeroshot.echoes``), where the planner must read the wording rather than match names.
The leave-one-KG-out rows are always made: each set scored with weights fitted on the sets of the other KGs only
(PathQuestion-Large's 2H and 3H share a KG, so each is held out with the other: ``FAMILY``). Two fits:
``search`` (the random coordinate search, from every weight 1) and ``fit_smooth`` (deterministic: the softmax
form of the score, L-BFGS from zero). Until 2026-12-02 the search started from ``Z.Weights()``, which had been
searched on all four KGs, so the held-out KG leaked into its own row (WC2014 0.883 then; 0.37 on a start no KG
chose).

    python -m bench.planner_dev                 # ~15 minutes; writes reports/bench/planner_dev.json
    python -m bench.planner_dev --search        # also the weight search on all four KGs (the defaults' origin)
    python -m bench.planner_dev --wordnet       # also the rows with WordNet's links (kgrag/index/wordnet.py)
    python -m bench.planner_dev --wordnet --zero-shot-only --out /tmp/x.json  # those and the zero-shot rows alone
    python -m bench.planner_dev --phrase-model /tmp/all-mpnet-base-v2 --zero-shot-only --loko-seeds 5 --out /tmp/m.json
    python -m bench.planner_dev --zero-shot-only --pseudo 300 --out /tmp/p.json  # the pseudo-question fits (~3 min)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.common import machine, write_result

from kgrag import schema as S
from kgrag.index import pseudo as P
from kgrag.index import zeroshot as Z
from kgrag.index.embed import encode
from kgrag.index.relplan import co_step_mask, is_co_step
from kgrag.registry import LOADERS

ROOT = Path(__file__).resolve().parents[1]

MODEL = "all-MiniLM-L6-v2"
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "reports" / "bench" / "planner_dev.json"


class ArrayKG:
    """A loader's tables as arrays, with an undirected walk for the exhaustive enumeration."""

    def __init__(self, tabs) -> None:
        t = tabs.triples
        self.h, self.r, self.t = (t[c].to_numpy().astype(np.int64) for c in (S.HEAD, S.RELATION, S.TAIL))
        self.names = tabs.entities[S.NAME].to_pylist()
        self.relation_names = tabs.relations[S.NAME].to_pylist()
        self.n = len(self.names)
        self.out = self._csr(self.h, self.t)
        self.inn = self._csr(self.t, self.h)
        self.skip, self.back = self._mirrors()

    def _csr(self, src, dst):
        o = np.argsort(src, kind="stable")
        ptr = np.zeros(self.n + 1, np.int64)
        np.cumsum(np.bincount(src, minlength=self.n), out=ptr[1:])
        return ptr, dst[o], self.r[o]

    def _mirrors(self) -> tuple[frozenset, frozenset]:
        """Ids of the mirrored relations (skipped, as relplan's plan skips them) and of the relations they mirror
        (a co-step on one keeps its return: ``relplan.co_step_mask``'s ``back``)."""
        from kgrag.index.relplan import mirror_ids, mirror_pairs

        class V:  # the KGView fields mirror_pairs reads
            heads, relations, tails, num_entities, relation_names = self.h, self.r, self.t, self.n, self.relation_names
        return mirror_ids(self.relation_names, mirror_pairs(V))  # one pass: mirrored_relations is its keys

    def expand(self, frontier, cap=20000):
        out = {}
        for fwd, (ptr, dst, rel) in ((True, self.out), (False, self.inn)):
            idx = np.concatenate([np.arange(ptr[x], ptr[x + 1]) for x in frontier]) if len(frontier) else []
            dd, rr = dst[idx], rel[idx]
            for x in np.unique(rr).tolist():
                if x in self.skip:
                    continue
                u = np.unique(dd[rr == x])
                if len(u) <= cap:
                    out[(x, fwd)] = u
        return out

    def sequences(self, topics, max_hops=3):
        res, layer = {}, {(): (np.unique(np.asarray(topics, np.int64)), None)}
        for _ in range(max_hops):
            nxt = {}
            for s, (fr, prev) in layer.items():
                if len(fr) > 2000:
                    continue
                for k, d in self.expand(fr).items():
                    if prev is not None and is_co_step(s + (k,)):  # relpath's walk rule for a co-step
                        keep = co_step_mask(s + (k,), d, prev, self.back)
                        if keep is None:
                            continue
                        d = d[keep]
                    nxt[s + (k,)] = (d, fr)
            res.update({s: v[0] for s, v in nxt.items()})
            layer = nxt
        return res


def questions(tabs, kg: ArrayKG) -> list[dict]:
    out = []
    for q in tabs.questions.to_pylist():
        topics = [x for x in q[S.TOPIC_IDS] if x is not None]
        if not topics:
            continue
        seqs = kg.sequences(topics)
        gold = {x for x in q[S.ANSWER_IDS] if x is not None}
        top = set(topics)

        def p(e):
            ends = [x for x in e.tolist() if x not in top] or e.tolist()
            return len(gold & set(ends)) / max(len(ends), 1)

        row = {"text": q[S.TEXT], "topics": [kg.names[x] for x in topics], "topic_ids": topics, "hops": q[S.HOPS],
               "seqs": seqs, "p": {s: p(e) for s, e in seqs.items()}}
        row["paraphrase"] = paraphrased(row, kg.relation_names)
        out.append(row)
    return out


def load_sets(per_hop: int, n_eval: int, pool: int) -> list[tuple[str, ArrayKG, list, list]]:
    sets = []
    mq = LOADERS.get("metaqa").impl
    ev = mq(path=str(DATA / "metaqa"), hops=[1, 2, 3], split="dev", sample=per_hop, seed=1)
    kg = ArrayKG(ev)
    ev_ids = set(ev.questions[S.QUESTION_ID].to_pylist())
    pl = mq(path=str(DATA / "metaqa"), hops=[1, 2, 3], split="dev", sample=pool // 3, seed=2)
    keep = [i for i, x in enumerate(pl.questions[S.QUESTION_ID].to_pylist()) if x not in ev_ids]
    pl = replace(pl, questions=pl.questions.take(keep))
    sets.append(("metaqa", kg, questions(ev, kg), questions(pl, kg)))
    irn = LOADERS.get("irn").impl
    for name, folder, kb, qf in (("wc2014-p2", "wc2014", "WC2014.txt", "WC-P2.txt"),
                                 ("pql-3h", "pathquestion_large", "PQL3-KB.txt", "PQL-3H.txt"),
                                 ("pql-2h", "pathquestion_large", "PQL2-KB.txt", "PQL-2H.txt")):
        base = DATA / "transfer" / folder
        tabs = irn(kb=str(base / kb), questions=str(base / qf), split="dev")
        kg = ArrayKG(tabs)
        qs = questions(tabs, kg)
        sets.append((name, kg, qs[:n_eval], qs[n_eval:n_eval + pool]))
    return sets


VECS = Z.PhraseVectors(lambda t: encode(list(t), model=MODEL))
_NAMES: dict[int, np.ndarray] = {}


def name_vectors(kg: ArrayKG) -> np.ndarray:
    if id(kg) not in _NAMES:
        _NAMES[id(kg)] = encode([Z.entity_text(n) for n in kg.names], model=MODEL)
    return _NAMES[id(kg)]


def feature_rows(kg, qs, lexicon=None, lw=1.0, wordnet=None, like=None, vecs=None, nouns=None):
    """Feature rows of the questions ``qs``. ``like``: rows of the same questions computed before without
    ``wordnet`` (or with other phrase vectors ``vecs``), whose ``type`` column (the answer type: no word-relation
    match in it, MiniLM's answer phrase against MiniLM's entity vectors) is taken instead of being computed again
    (MetaQA's end entities make it the slow feature). ``vecs``: the word / relation-phrase vectors (``VECS``).
    ``nouns``: the answer-type nouns of ``kg``'s ranges (:func:`type_nouns`), blended into ``type`` as relpath does
    with WordNet on (``zeroshot.noun_type``)."""
    V = name_vectors(kg) if like is None else None
    rows = []
    for q in qs:
        seqs = sorted(q["seqs"])
        if not seqs:
            continue
        f = Z.features(question=q["text"], topic_names=q["topics"], seqs=seqs, ends=[q["seqs"][s] for s in seqs],
                       relation_names=kg.relation_names, vecs=VECS if vecs is None else vecs,
                       entity_vectors=(lambda ids: V[ids]) if like is None else None,
                       lexicon=lexicon, lexicon_weight=lw, wordnet=wordnet)
        rows.append((q, seqs, f, np.asarray([q["p"][s] for s in seqs])))
    if like is not None:
        t = Z.FEATURES.index("type")
        assert [r[0]["text"] for r in like] == [r[0]["text"] for r in rows]
        for (_, _, f, _), (_, _, g, _) in zip(rows, like):
            f[:, t] = g[:, t]
    for q, seqs, f, _ in rows if nouns is not None else ():
        Z.noun_type(f, Z.answer_phrase(Z.mask(q["text"], q["topics"])), seqs, VECS if vecs is None else vecs, nouns)
    return rows


def paraphrased(q, relation_names) -> bool:
    """Whether ``q`` is in its set's paraphrase subset: its gold sequence reaches an answer and no content word
    shares a 4-letter stem with a relation name on it (``zeroshot.echoes``)."""
    g = gold(q)
    return g is not None and q["p"][g] > 0 and not Z.echoes(
        q["text"], q["topics"], [relation_names[r] for r, _ in g if r >= 0])


def score(rows, pick) -> dict:
    ps, by, para = [], {}, []
    for q, seqs, f, p in rows:
        v = float(p[int(np.argmax(pick(q, seqs, f)))])
        ps.append(v)
        by.setdefault(str(q["hops"]), []).append(v)
        if q.get("paraphrase"):
            para.append(v)
    return {"all": round(float(np.mean(ps)), 4), "questions": len(ps),
            "by_hops": {k: round(float(np.mean(v)), 4) for k, v in sorted(by.items())} if len(by) > 1 else None,
            "paraphrase": round(float(np.mean(para)), 4) if para else None, "paraphrase_questions": len(para)}


def linear(w):
    return lambda q, seqs, f: f @ np.asarray(w)


def cosine(kg):
    def pick(q, seqs, f):
        qv = VECS([Z.mask(q["text"], q["topics"])])[0]
        texts = [", ".join(Z.relation_phrase(kg.relation_names[r]) for r, _ in s) for s in seqs]
        return VECS(texts) @ qv - 0.001 * np.asarray([len(s) for s in seqs])
    return pick


# PathQuestion-Large's 2H and 3H sets share one KG's relations: a leave-one-KG-out fit holds out the family
FAMILY = {"pql-2h": "pql", "pql-3h": "pql"}


def family(name: str) -> str:
    return FAMILY.get(name, name)


def others(names: list[str], held: str) -> list[str]:
    """The sets a leave-one-KG-out fit for ``held`` may read: every set of another KG family."""
    return [m for m in names if family(m) != family(held)]


def set_weights(names: list[str]) -> dict[str, float]:
    """Each set's share of a fit's objective: the KG families equally, a family's sets equally within it."""
    fams: dict[str, list[str]] = {}
    for n in names:
        fams.setdefault(family(n), []).append(n)
    return {n: 1.0 / len(fams) / len(fams[family(n)]) for n in names}


def search(feats: dict, names: list[str], iters: int = 400, seed: int = 0, start=None):
    """Random coordinate search of the feature weights maximizing the mean score over ``names``, from ``start``
    (default: every weight 1, which no KG chose; starting from ``Z.Weights()``, themselves searched on all four
    KGs, would leak the held-out KG into a leave-one-KG-out row)."""
    rng = np.random.default_rng(seed)
    best = np.ones(len(Z.FEATURES)) if start is None else np.asarray(start, dtype=np.float64).copy()

    def obj(w):
        return float(np.mean([score(feats[n], linear(w))["all"] for n in names]))
    bo = obj(best)
    for _ in range(iters):
        w = best.copy()
        j = rng.integers(len(w))
        w[j] = w[j] * np.exp(rng.normal(0, 0.7)) if rng.random() < 0.7 else w[j] + rng.normal(0, 2)
        o = obj(w)
        if o >= bo:
            best, bo = w, o
    return best


def fit_smooth(feats: dict, names: list[str], lam: float = 1e-4, fixed: dict[int, float] | None = None,
               prior=None):
    """Deterministic fit of the feature weights on the sets ``names`` (``kgrag.index.pseudo.fit_smooth``: each
    question's expected score under a softmax over its sequences, L2 on the spread-scaled weights, L-BFGS from
    zero), KG families weighing equally (``set_weights``). No seed, no start that a KG chose."""
    share = set_weights(names)
    return P.fit_smooth([(share[n], [(f, p) for _, _, f, p in feats[n]]) for n in names], lam, fixed, prior)


def vote(pool_texts, pool_labels, k=16):
    Q = VECS(pool_texts) if pool_texts else np.zeros((0, 1))

    def share(q, seqs):
        if not len(Q):
            return np.zeros(len(seqs))
        sims = Q @ VECS([Z.mask(q["text"], q["topics"])])[0]
        got: dict = {}
        for i in np.argsort(-sims)[:k]:
            got[pool_labels[i]] = got.get(pool_labels[i], 0.0) + max(float(sims[i]), 0.0)
        tot = sum(got.values()) or 1.0
        return np.asarray([got.get(s, 0.0) / tot for s in seqs])
    return share


def warm(vecs, sets) -> None:
    """Encode in a few large batches every text ``features`` will ask ``vecs`` for (the questions' content words,
    each relation phrase, its ``same`` form and its words): a large model is slow one question at a time."""
    texts = set()
    for _, kg, ev, _ in sets:
        for q in ev:
            texts.update(Z.content_words(Z.mask(q["text"], q["topics"]))[0])
        for name in kg.relation_names:
            ph = Z.relation_phrase(name)
            texts.update([ph, "same " + ph, *ph.split()])
    vecs(sorted(texts))


@contextlib.contextmanager
def constants(pairs: list[str]):
    """``kgrag.index.zeroshot``'s module constants set from ``NAME=VALUE`` pairs while inside (features read them
    when called), restored after."""
    old = {}
    try:
        for p in pairs:
            k, v = p.split("=", 1)
            if not isinstance(getattr(Z, k, None), float):
                raise SystemExit(f"--phrase-const {p}: zeroshot.{k} is not a float constant")
            old[k] = getattr(Z, k)
            setattr(Z, k, float(v))
        yield
    finally:
        for k, v in old.items():
            setattr(Z, k, v)


def reword(phrase: str, wordnet, rng) -> str:
    """``phrase`` with each word of 4 letters or more replaced, with probability 1/2, by one of its WordNet synonyms
    or derivations (drawn by ``rng``; the word kept when it has none): pseudo-questions that do not echo every
    relation word, as people's questions do not."""
    out = []
    for w in phrase.split():
        near = sorted(x for x, k in wordnet.near(w.lower()).items() if k in ("synonym", "derivation")
                      and x != w.lower() and "_" not in x) if len(w) >= 4 else []
        out.append(near[int(rng.integers(len(near)))] if near and rng.random() < 0.5 else w)
    return " ".join(out)


verbalise = P.verbalise  # the relplan stage's wording of a walk (kgrag.index.pseudo)


def range_means(kg: ArrayKG) -> dict:
    """The mean name vector of each relation's range sample in ``kg``, as a store reads them
    (``kgrag.index.answer_types.range_means``)."""
    from kgrag.index import answer_types as A
    from kgrag.kg.kgview import range_sample_arrays

    sample = range_sample_arrays(kg.h, kg.r, kg.t, kg.n, A.RANGE_K, A.RANGE_SEED)
    return A.means_of(sample, name_vectors(kg))


def range_nouns(kg: ArrayKG) -> dict:
    """Names of the answer types of ``kg``'s relations (``kgrag.index.pseudo.type_nouns``: WordNet's class nouns
    against the relations' range samples, as the relplan stage reads them from a store)."""
    return P.wordnet_type_nouns(range_means(kg), kg.relation_names, VECS)


def type_nouns(kg: ArrayKG):
    """``sequence -> its answer-type noun's vector`` for ``kg`` (``kgrag.index.answer_types.noun_types``: WordNet's
    class nouns against the relations' range samples, as relpath reads them from a store with WordNet on)."""
    from kgrag.index import answer_types as A, wordnet as W

    vocab = list(W.class_nouns())
    return A.noun_types(range_means(kg), kg.relation_names, vocab, VECS(vocab))


def pseudo_questions(kg: ArrayKG, pool: list[dict], n: int, seed: int = 0, max_ends: int = 50,
                     wordnet=None, types: float = 0.0) -> list[dict]:
    """``n`` pseudo-questions of ``kg`` with no label read: topics of the pool's questions (their linked topics only,
    never their answers or gold sequences), a walk of 1-3 steps drawn from each (a length first, uniformly among
    those the topic has, then a sequence of it that reaches 1..``max_ends`` entities besides the topic), worded by
    :func:`verbalise`; its gold answers are the entities the walk reaches. Rows as :func:`questions` makes them."""
    rng = np.random.default_rng(seed)
    out = []
    order = rng.permutation(len(pool))
    for i in order.tolist():
        if len(out) >= n:
            break
        q = pool[i]
        top = set(q["topic_ids"])
        by_len: dict[int, list] = {}
        for sq, e in sorted(q["seqs"].items()):
            ends = [x for x in e.tolist() if x not in top]
            if sq and all(r >= 0 for r, _ in sq) and 0 < len(ends) <= max_ends:
                by_len.setdefault(len(sq), []).append(sq)
        if not by_len:
            continue
        k = sorted(by_len)[int(rng.integers(len(by_len)))]
        sq = by_len[k][int(rng.integers(len(by_len[k])))]
        gold_ids = {x for x in q["seqs"][sq].tolist() if x not in top}

        def p(e):
            ends = [x for x in e.tolist() if x not in top] or e.tolist()
            return len(gold_ids & set(ends)) / max(len(ends), 1)
        phrase = Z.relation_phrase if wordnet is None else (
            lambda name: reword(Z.relation_phrase(name), wordnet, rng))
        out.append({"text": verbalise(sq, q["topics"][0], kg.relation_names, phrase), "topics": q["topics"],
                    "topic_ids": q["topic_ids"], "hops": k,
                    "seqs": q["seqs"], "p": {s: p(e) for s, e in q["seqs"].items()}, "paraphrase": False,
                    "pseudo_of": sq})
    if types > 0:  # a share worded by the answer type, as the relplan stage words them (relplan.pseudo_types)
        texts = P.type_wording([(q["pseudo_of"], q["topics"][0], q["text"]) for q in out], kg.relation_names,
                               range_nouns(kg), types, seed)
        out = [{**q, "text": t} for q, t in zip(out, texts)]
    return out


def gold(q):
    return max(sorted(q["seqs"]), key=lambda s: (q["p"][s], -len(s))) if q["seqs"] else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-hop", type=int, default=100)
    ap.add_argument("--eval", type=int, default=300)
    ap.add_argument("--pool", type=int, default=1500)
    ap.add_argument("--search", action="store_true", help="re-run the weight search (all KGs and leave-one-out)")
    ap.add_argument("--wordnet", action="store_true",
                    help="also the rows with WordNet links (zeroshot.wordnet_matcher: kinds, similarity and senses "
                         "from --wordnet-kinds / --wordnet-sim / --wordnet-senses, else zeroshot's WORDNET_*)")
    ap.add_argument("--wordnet-kinds", default=",".join(Z.WORDNET_KINDS))
    ap.add_argument("--wordnet-sim", type=float, default=Z.WORDNET_SIM)
    ap.add_argument("--wordnet-senses", type=int, default=Z.WORDNET_SENSES)
    ap.add_argument("--wordnet-hyper-pos", default="noun", help="parts of speech whose hypernyms link (noun,verb)")
    ap.add_argument("--wordnet-no-heads", action="store_true",
                    help="a compound hypernym's head noun does not link (zeroshot.WORDNET_HEADS off: 'club' -> "
                         "'baseball_team' but not 'team')")
    ap.add_argument("--no-type-nouns", action="store_true",
                    help="with --wordnet, the type feature without its answer-type noun (zeroshot.TYPE_NOUN; the "
                         "ablation of kgrag.index.answer_types.noun_types)")
    ap.add_argument("--wordnet-no-chains", action="store_true",
                    help="a link to a derivation of the other word does not link (zeroshot.WORDNET_CHAINS off: "
                         "'screenwriter' -> 'writer' but not 'written')")
    ap.add_argument("--loko-seeds", type=int, default=1,
                    help="also repeat the leave-one-KG-out search with seeds 0..N-1 and write each KG's mean and "
                         "min (``loko_seeds``): how much of a leave-one-KG-out figure is the search's draw")
    ap.add_argument("--zero-shot-only", action="store_true",
                    help="only the rows with no labelled or pool question (cosine .. lexical, leave-one-KG-out, "
                         "WordNet): no vote, lexicon or compositional rows, so MetaQA's pool is never scored")
    ap.add_argument("--phrase-model", default=None,
                    help="also the rows with question words and relation phrases compared by this model's vectors "
                         "(a packaged model name or a sentence-transformers folder; the type feature keeps MiniLM)")
    ap.add_argument("--phrase-const", action="append", default=[], metavar="NAME=VALUE",
                    help="a zeroshot constant (STEM_SIM, BACKGROUND_SIM, SUPPORT, MENTION, ...) for the "
                         "--phrase-model rows only; repeatable")
    ap.add_argument("--pseudo", type=int, default=0,
                    help="also the rows fitted on N pseudo-questions of each KG (walks from the pool's topics worded "
                         "from the relation names, no label read: issue 54's per-KG self-supervision)")
    ap.add_argument("--pseudo-seed", type=int, default=0, help="seed of the pseudo-questions' draw")
    ap.add_argument("--pseudo-prior-lams", type=float, nargs="*", default=[],
                    help="also the pseudo-question fits penalised towards the other KGs' smooth fit with these lam")
    ap.add_argument("--pseudo-types", type=float, default=0.0,
                    help="share of the pseudo-questions worded by their answer type (relplan.pseudo_types)")
    ap.add_argument("--pseudo-wordnet", action="store_true",
                    help="reword half the pseudo-questions' relation words by WordNet synonyms / derivations")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    sets = load_sets(args.per_hop, args.eval, args.pool)
    names = [n for n, *_ in sets]
    res: dict = {"machine": machine(), "metric": "expected Hit@1 of a random end of the chosen sequence (no LLM)",
                 "weights": dict(zip(Z.FEATURES, Z.Weights().vector().round(3).tolist())), "configs": {}}
    feats = {n: feature_rows(kg, ev) for n, kg, ev, _ in sets}
    res["oracle"] = {n: round(float(np.mean([r[3].max() for r in feats[n]])), 4) for n in names}
    cfg = res["configs"]
    idx = {f: i for i, f in enumerate(Z.FEATURES)}

    def only(keep):
        w = Z.Weights().vector().copy()
        w[[i for f, i in idx.items() if f not in keep]] = 0
        w[idx["length"]] = -0.001 if "length" not in keep else w[idx["length"]]
        return w
    for n, kg, ev, pool in sets:
        cfg.setdefault("cosine", {})[n] = score(feats[n], cosine(kg))
        cfg.setdefault("ll", {})[n] = score(feats[n], linear(only({"ll"})))
        cfg.setdefault("ll+support+count+cue", {})[n] = score(feats[n], linear(only({"ll", "support", "count", "cue"})))
        cfg.setdefault("lexical", {})[n] = score(feats[n], linear(Z.Weights().vector()))
    extra: dict = {}  # label -> feature rows of the same questions, scored as "lexical" is (default weights, LOKO)
    if args.wordnet:  # the same questions with WordNet's links: default weights, and leave-one-KG-out
        wm = Z.wordnet_matcher(args.wordnet_kinds.split(","), args.wordnet_sim, args.wordnet_senses,
                               args.wordnet_hyper_pos.split(","), heads=not args.wordnet_no_heads,
                               chains=not args.wordnet_no_chains)
        res["wordnet"] = {"kinds": sorted(wm.kinds), "sim": wm.sim, "senses": wm.wordnet.senses,
                          "hyper_pos": sorted(wm.wordnet.hyper_pos), "heads": wm.wordnet.heads,
                          "chains": wm.wordnet.chains, "folder": str(wm.wordnet.folder)}
        nouns = {n: None if args.no_type_nouns else type_nouns(kg) for n, kg, _, _ in sets}
        res["wordnet"]["type_nouns"] = not args.no_type_nouns
        extra["lexical + WordNet"] = {n: feature_rows(kg, ev, wordnet=wm, like=feats[n], nouns=nouns[n])
                                      for n, kg, ev, _ in sets}
    if args.phrase_model:  # question words and relation phrases through another encoder; the type column kept
        from kgrag.index.embed import model_path

        path = model_path(args.phrase_model)
        pv = Z.PhraseVectors(lambda t: encode(list(t), model=path))
        t0 = time.perf_counter()
        pv(["warm up"])
        res["phrase_model"] = {"model": args.phrase_model, "folder": path, "const": args.phrase_const,
                               "load_s": round(time.perf_counter() - t0, 1)}
        t0 = time.perf_counter()
        warm(pv, sets)
        res["phrase_model"]["encode_s"] = round(time.perf_counter() - t0, 1)
        tag = f"{Path(args.phrase_model).name} phrases"
        with constants(args.phrase_const):
            t0 = time.perf_counter()
            extra[f"lexical, {tag}"] = {n: feature_rows(kg, ev, like=feats[n], vecs=pv) for n, kg, ev, _ in sets}
            res["phrase_model"]["features_s"] = round(time.perf_counter() - t0, 1)
            if args.wordnet:
                extra[f"lexical + WordNet, {tag}"] = {n: feature_rows(kg, ev, wordnet=wm, like=feats[n], vecs=pv,
                                                                      nouns=nouns[n]) for n, kg, ev, _ in sets}
    for label, fs in extra.items():
        for n in names:
            cfg.setdefault(label, {})[n] = score(fs[n], linear(Z.Weights().vector()))
            w = search(fs, others(names, n), iters=250)
            cfg.setdefault(f"{label} (leave-one-KG-out weights)", {})[n] = {**score(fs[n], linear(w)),
                                                                            "weights": w.round(3).tolist()}
            w = fit_smooth(fs, others(names, n))
            cfg.setdefault(f"{label} (leave-one-KG-out, smooth fit)", {})[n] = {**score(fs[n], linear(w)),
                                                                               "weights": w.round(3).tolist()}
    if args.loko_seeds > 1:
        for label, fs in {"lexical": feats, **extra}.items():
            for n in names:
                v = [score(fs[n], linear(search(fs, others(names, n), iters=250, seed=k)))
                     for k in range(args.loko_seeds)]
                para = [x["paraphrase"] for x in v] if v[0]["paraphrase"] is not None else None
                res.setdefault("loko_seeds", {}).setdefault(label, {})[n] = {
                    "seeds": args.loko_seeds, "all_mean": round(float(np.mean([x["all"] for x in v])), 4),
                    "all_min": min(x["all"] for x in v), "all": [x["all"] for x in v],
                    "paraphrase_mean": round(float(np.mean(para)), 4) if para else None,
                    "paraphrase_min": min(para) if para else None, "paraphrase": para}
    if args.search:
        res["searched_weights"] = dict(zip(Z.FEATURES, search(feats, names).round(3).tolist()))
        w = fit_smooth(feats, names)
        res["smooth_fit_weights"] = dict(zip(Z.FEATURES, w.round(3).tolist()))
        cfg["lexical (smooth fit on all four)"] = {n: score(feats[n], linear(w)) for n in names}
    if len(names) > 1:  # the honest transfer figure: each KG scored with weights searched on the others only
        for n in names:
            w = search(feats, others(names, n), iters=250)
            cfg.setdefault("lexical (leave-one-KG-out weights)", {})[n] = {**score(feats[n], linear(w)),
                                                                           "weights": w.round(3).tolist()}
            w = fit_smooth(feats, others(names, n))
            cfg.setdefault("lexical (leave-one-KG-out, smooth fit)", {})[n] = {**score(feats[n], linear(w)),
                                                                               "weights": w.round(3).tolist()}
    if args.pseudo:  # per-KG self-supervision: weights fitted on the KG's own pseudo-questions (no label read)
        pfeats, pfeats_wn = {}, {}
        for n, kg, ev, pool in sets:
            wn = None
            if args.pseudo_wordnet:
                from kgrag.index import wordnet as W
                wn = W.load()
            pq_ = pseudo_questions(kg, pool, args.pseudo, seed=args.pseudo_seed, wordnet=wn,
                                   types=args.pseudo_types)
            pfeats[n] = feature_rows(kg, pq_)
            if args.wordnet:  # relplan.wordnet: the fit and the ranking both read WordNet's links
                pfeats_wn[n] = feature_rows(kg, pq_, wordnet=wm, nouns=nouns[n])
            res.setdefault("pseudo", {})[n] = {
                "questions": len(pfeats[n]), "seed": args.pseudo_seed, "wordnet": args.pseudo_wordnet,
                "types": args.pseudo_types,
                "examples": [q["text"] for q in pq_[:3]],
                "shipped weights on them": score(pfeats[n], linear(Z.Weights().vector()))}
        for n in names:
            w = fit_smooth(pfeats, [n])
            cfg.setdefault("lexical (smooth fit on this KG's pseudo-questions)", {})[n] = {
                **score(feats[n], linear(w)), "weights": w.round(3).tolist()}
            # the length weight kept as the other KGs' smooth fit has it (to a new KG, the shipped weights are that
            # fit), the rest fitted on the pseudo-questions (kgrag.index.pseudo.fit_weights' keep; tried, not used)
            loko = fit_smooth(feats, others(names, n))
            j = Z.FEATURES.index("length")
            w = fit_smooth(pfeats, [n], fixed={j: float(loko[j])})
            cfg.setdefault("lexical (smooth fit on this KG's pseudo-questions, length kept from the other KGs)",
                           {})[n] = {**score(feats[n], linear(w)), "weights": w.round(3).tolist()}
            # a scale-free prior: the fit starts from the other KGs' weights and is penalised towards them (lam on
            # the spread-scaled difference), so the pseudo-questions move what they can teach
            for lam in args.pseudo_prior_lams:
                w = fit_smooth(pfeats, [n], lam=lam, prior=loko)
                cfg.setdefault(f"lexical (pseudo-question fit towards the other KGs' weights, lam {lam:g})", {})[n] = {
                    **score(feats[n], linear(w)), "weights": w.round(3).tolist()}
            if args.wordnet:  # the same fits with WordNet's links in every feature row (relplan.wordnet)
                real = extra["lexical + WordNet"]
                w = fit_smooth(pfeats_wn, [n])
                cfg.setdefault("lexical + WordNet (smooth fit on this KG's pseudo-questions)", {})[n] = {
                    **score(real[n], linear(w)), "weights": w.round(3).tolist()}
                loko_wn = fit_smooth(real, others(names, n))
                for lam in args.pseudo_prior_lams:
                    w = fit_smooth(pfeats_wn, [n], lam=lam, prior=loko_wn)
                    cfg.setdefault(f"lexical + WordNet (pseudo-question fit towards the other KGs' weights, lam "
                                   f"{lam:g})", {})[n] = {**score(real[n], linear(w)), "weights": w.round(3).tolist()}
            both = {**{m: feats[m] for m in others(names, n)}, f"{n} pseudo": pfeats[n]}
            w = fit_smooth(both, list(both))
            cfg.setdefault("lexical (smooth fit: other KGs + this KG's pseudo-questions)", {})[n] = {
                **score(feats[n], linear(w)), "weights": w.round(3).tolist()}
    base = Z.Weights().vector()
    for n, kg, ev, pool in ([] if args.zero_shot_only else sets):
        # source kg: pool texts labelled by the planner, then the vote
        prow = feature_rows(kg, pool)
        labels = [seqs[int(np.argmax(f @ base))] for q, seqs, f, p in prow]
        share = vote([Z.mask(q["text"], q["topics"]) for q, *_ in prow], labels)
        for w in (3.0, 10.0, 30.0):
            cfg.setdefault(f"lexical + self-trained vote (w {w:g})", {})[n] = score(
                feats[n], lambda q, seqs, f, w=w: f @ base + w * share(q, seqs))
        # source labelled: lexicon from the pool's gold sequences, and the vote
        lab = [(q, gold(q)) for q in pool if gold(q) is not None and q["p"][gold(q)] > 0]
        lex = Z.Lexicon()
        for q, g in lab:
            words, _ = Z.content_words(Z.mask(q["text"], q["topics"]))
            lex.add(words, [(k, kg.relation_names[r], f) for k, r, f in Z.units(g)])
        lrows = feature_rows(kg, ev, lexicon=lex)
        cfg.setdefault("lexical + lexicon", {})[n] = score(lrows, linear(base))
        share = vote([Z.mask(q["text"], q["topics"]) for q, _ in lab], [g for _, g in lab])
        for w in (10.0, 30.0, 100.0):
            cfg.setdefault(f"lexical + lexicon + vote (w {w:g})", {})[n] = score(
                lrows, lambda q, seqs, f, w=w: f @ base + w * share(q, seqs))
        # compositional: a seeded fifth of the pool's label sequences removed; the questions whose gold was removed
        named = sorted({tuple((kg.relation_names[r], f) for r, f in g) for _, g in lab})
        rng = np.random.default_rng(0)
        drop = {named[i] for i in rng.choice(len(named), max(len(named) // 5, 1), replace=False)}

        def dropped(g):
            return tuple((kg.relation_names[r], f) for r, f in g) in drop
        lex2 = Z.Lexicon()
        kept = [(q, g) for q, g in lab if not dropped(g)]
        for q, g in kept:
            words, _ = Z.content_words(Z.mask(q["text"], q["topics"]))
            lex2.add(words, [(k, kg.relation_names[r], f) for k, r, f in Z.units(g)])
        held = [q for q in ev if gold(q) is not None and dropped(gold(q))]
        if held:
            hrows = feature_rows(kg, held, lexicon=lex2)
            share2 = vote([Z.mask(q["text"], q["topics"]) for q, _ in kept], [g for _, g in kept])
            cfg.setdefault("compositional: removed sequences, lexicon + vote (w 30)", {})[n] = score(
                hrows, lambda q, seqs, f: f @ base + 30.0 * share2(q, seqs))
            cfg.setdefault("compositional: removed sequences, lexical alone", {})[n] = score(
                feature_rows(kg, held), linear(base))
        print(f"[planner_dev] {n}: " + ", ".join(f"{c} {v[n]['all']}" for c, v in cfg.items() if n in v),
              file=sys.stderr, flush=True)
    write_result(args.out, res)


if __name__ == "__main__":
    main()
