"""Column names and Arrow schemas of every table that crosses a stage boundary.

Every module reads and writes columns through these constants, so a rename happens in one place.

The tables a stage writes as DVC outputs (``RETRIEVED``, ``GENERATIONS``) hold only what the inputs and params
determine. What differs from run to run and machine to machine (wall times, which LLM calls the call cache
answered, backend attempts) goes into the run-record tables ``RETRIEVE_TIMINGS`` / ``GENERATE_TIMINGS``,
written beside the outputs under ``data/timings/`` (``kgrag.timings``), so equal results hash equal in
``dvc.lock``. In-memory rows (``kgrag.retrieval.run.retrieve_rows``, ``kgrag.reasoning.reasoners.rows_of``) carry both.
"""

from __future__ import annotations

import pyarrow as pa

# entities / relations / triples
ENTITY_ID = "entity_id"
NAME = "name"
RELATION_ID = "relation_id"
HEAD = "head"
RELATION = "relation"
TAIL = "tail"
# per-question graphs: the graph a triple belongs to (null = the global KG) and the graph a question is
# asked over (null = the global KG)
GRAPH_ID = "graph_id"
# an entity's other names (a label table's, ``kgrag.kg.linking``): an optional list column of the entities table
# (ENTITIES_ALIASES), written by a loader given a label table; entity linking matches the name and every alias
ALIASES = "aliases"
# a relation's id as its source names it (e.g. Wikidata's P26): a string column of the relations table
# (RELATIONS_LABELLED), written by a loader given a relation label table, whose label is then the relation's
# ``name`` (what the relation-path planner reads) and its other names its ``aliases``
KEY = "key"
# the name look-up table of a KG's DuckDB file (``kgrag.kg.duckdb_io.NAME_LOOKUP``): every name and alias under
# its ``kgrag.kg.linking.name_key``, with an index, so that linking a question reads its candidate spans' rows only
NAME_KEY = "name_key"

# questions
QUESTION_ID = "question_id"
SPLIT = "split"
HOPS = "hops"
TEXT = "text"
QTYPE = "qtype"
TOPIC_IDS = "topic_ids"
ANSWER_IDS = "answer_ids"
ANSWERS = "answers"
# the labels a question is answered with (e.g. ExplaGraphs' support / counter); null or empty = the answers
# are entity names. A question with choices is scored by accuracy (``kgrag.evaluation.evaluate``).
CHOICES = "choices"
# set by validate: the question's gold answers are in the KG (in its own graph, for per-question graphs) and it
# has a topic entity, or it is a label task. A question that is not answerable is kept and scored as a miss
# (the benchmark protocol counts every question); null or absent = not checked, taken as answerable.
ANSWERABLE = "answerable"

# retrieved
MODULE = "module"
TRIPLE_HEADS = "triple_heads"
TRIPLE_RELATIONS = "triple_relations"
TRIPLE_TAILS = "triple_tails"
NODE_IDS = "node_ids"
CONTEXT_TRIPLES = "context_triples"
CONTEXT_CSV = "context_csv"
NEIGHBOURHOOD_NODES = "neighbourhood_nodes"
NEIGHBOURHOOD_EDGES = "neighbourhood_edges"
RETRIEVE_MS = "retrieve_ms"
STAGE_MS = "stage_ms"  # run record: wall time (ms) of each entry of a multi-stage retriever's trace["stages"]
TRACE = "trace"
REASONER = "reasoner"
DEPTH = "depth"
UNPARSEABLE = "unparseable"
REQUESTS = "requests"

# generations
PROMPT_HASH = "prompt_hash"
PREDICTION = "prediction"
PREDICTED_ANSWERS = "predicted_answers"
LLM_CALLS = "llm_calls"
TOKENS_IN = "tokens_in"
TOKENS_OUT = "tokens_out"
GENERATE_MS = "generate_ms"
CACHED = "cached"
# per LLM call of a question (aligned with its trace's ``calls``): served from the call cache, backend attempts
CALL_CACHED = "call_cached"
CALL_ATTEMPTS = "call_attempts"
FAILED = "failed"
BASELINE_FIRST = "baseline_first"  # no-LLM baselines of a generations row: the first candidate answer ...
BASELINE_RANDOM = "baseline_random"  # ... and a seeded random one (kgrag.reasoning.generate.baselines)
ERROR = "error"
SEED = "seed"

# quarantine
TABLE = "table"
ROW = "row"
REASON = "reason"
RECORD = "record"

ENTITIES = pa.schema([(ENTITY_ID, pa.int64()), (NAME, pa.string())])
ENTITIES_ALIASES = ENTITIES.append(pa.field(ALIASES, pa.list_(pa.string())))
NAME_LOOKUP = pa.schema([(NAME_KEY, pa.string()), (ENTITY_ID, pa.int64()), (NAME, pa.string())])
RELATIONS = pa.schema([(RELATION_ID, pa.int64()), (NAME, pa.string())])
RELATIONS_LABELLED = RELATIONS.append(pa.field(KEY, pa.string())).append(pa.field(ALIASES, pa.list_(pa.string())))
TRIPLES = pa.schema([(HEAD, pa.int64()), (RELATION, pa.int64()), (TAIL, pa.int64())])
QUESTIONS = pa.schema(
    [
        (QUESTION_ID, pa.string()),
        (SPLIT, pa.string()),
        (HOPS, pa.int32()),
        (TEXT, pa.string()),
        (QTYPE, pa.string()),
        (TOPIC_IDS, pa.list_(pa.int64())),
        (ANSWER_IDS, pa.list_(pa.int64())),
        (ANSWERS, pa.list_(pa.string())),
        (GRAPH_ID, pa.string()),
        (CHOICES, pa.list_(pa.string())),
    ]
)
# the questions table validate writes (data/validated/questions.parquet): QUESTIONS plus ``answerable``
VALIDATED_QUESTIONS = QUESTIONS.append(pa.field(ANSWERABLE, pa.bool_()))
# Triples of a KG with per-question graphs: TRIPLES plus the graph of each triple. Loaders whose tables have
# no per-question graph write TRIPLES; readers of head/relation/tail work on both.
GRAPH_TRIPLES = TRIPLES.append(pa.field(GRAPH_ID, pa.string()))
RETRIEVED = pa.schema(
    [
        (QUESTION_ID, pa.string()),
        (MODULE, pa.string()),
        (TRIPLE_HEADS, pa.list_(pa.int64())),
        (TRIPLE_RELATIONS, pa.list_(pa.int64())),
        (TRIPLE_TAILS, pa.list_(pa.int64())),
        (NODE_IDS, pa.list_(pa.int64())),
        (CONTEXT_TRIPLES, pa.string()),
        (CONTEXT_CSV, pa.string()),
        (NEIGHBOURHOOD_NODES, pa.int64()),
        (NEIGHBOURHOOD_EDGES, pa.int64()),
        (TRACE, pa.string()),
    ]
)
GENERATIONS = pa.schema(
    [
        (QUESTION_ID, pa.string()),
        (PROMPT_HASH, pa.string()),
        (PREDICTION, pa.string()),
        (PREDICTED_ANSWERS, pa.list_(pa.string())),
        (TOKENS_IN, pa.int64()),
        (TOKENS_OUT, pa.int64()),
        (FAILED, pa.bool_()),
        (ERROR, pa.string()),
        (SEED, pa.int64()),
        (REASONER, pa.string()),
        (REQUESTS, pa.int64()),
        (DEPTH, pa.int64()),
        (UNPARSEABLE, pa.int64()),
        (TRACE, pa.string()),
        (BASELINE_FIRST, pa.string()),
        (BASELINE_RANDOM, pa.string()),
    ]
)
# run records (data/timings/<stage>/questions.parquet): per question, what this run took
RETRIEVE_TIMINGS = pa.schema(
    [(QUESTION_ID, pa.string()), (RETRIEVE_MS, pa.float64()),
     (STAGE_MS, pa.list_(pa.float64()))]  # aligned with the trace's "stages"; null for single-shot retrievers
)
GENERATE_TIMINGS = pa.schema(
    [
        (QUESTION_ID, pa.string()),
        (GENERATE_MS, pa.float64()),
        (LLM_CALLS, pa.int64()),  # backend attempts, retries included (0 when every call came from the cache)
        (CACHED, pa.int64()),  # 1 when every call came from the call cache
        (CALL_CACHED, pa.list_(pa.bool_())),
        (CALL_ATTEMPTS, pa.list_(pa.int64())),
    ]
)
# relation-path plans (kgrag.index.relplan): a training question's masked text, hop count and relation sequence
PLAN_RELATIONS = "plan_relations"
PLAN_FORWARD = "plan_forward"
RELPLAN = pa.schema([(TEXT, pa.string()), (HOPS, pa.int64()), (PLAN_RELATIONS, pa.list_(pa.string())),
                     (PLAN_FORWARD, pa.list_(pa.bool_()))])
# the plan's lexicon (kgrag.index.zeroshot.Lexicon): how often labelled questions used a word for a unit (one step
# of a relation, or a co-step: walked there and back) of their relation sequence
UNIT_KIND = "unit_kind"
FORWARD = "forward"
WORD = "word"
COUNT = "count"
LEXICON = pa.schema([(UNIT_KIND, pa.string()), (RELATION, pa.string()), (FORWARD, pa.bool_()), (WORD, pa.string()),
                     (COUNT, pa.float64())])
QUARANTINE = pa.schema(
    [(TABLE, pa.string()), (ROW, pa.int64()), (REASON, pa.string()), (RECORD, pa.string())]
)
# a flow's shard result (.kgrag_cache/shards/<task>/<key>.arrow): the DVC output's columns and the run record's,
# split apart when the stage streams the shards into its output and its run records
RETRIEVE_SHARD = pa.schema([*RETRIEVED, *(f for f in RETRIEVE_TIMINGS if f.name != QUESTION_ID)])
GENERATE_SHARD = pa.schema([*GENERATIONS, *(f for f in GENERATE_TIMINGS if f.name != QUESTION_ID)])
