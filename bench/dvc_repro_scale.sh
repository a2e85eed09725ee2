#!/usr/bin/env bash
# The default DAG on a synthetic KG through `dvc repro` as one command (issue 55; docs/scale.md, "The default DAG at
# 100M through dvc repro"): a clone of this checkout's HEAD whose params.yaml differs only in `data` (the triples
# loader on SYNTH/triples.tsv and SYNTH/questions.jsonl, all questions), then `python -m flows.with_api dvc repro`
# (what `make repro` runs after set-up) under /usr/bin/time -v, every output line timestamped.
#
#   python -m bench.ingest_scale --sizes 100M --questions 1000 --work /tmp/kis   # writes /tmp/kis/100M/synth
#   bash bench/dvc_repro_scale.sh /tmp/kis/100M/synth /tmp/kis/100M/repo > repro.log 2>&1
#
# VECTORS=DIR: the entity-vector cache (an empty folder: a cold run); unset: the user's (~/.cache/kgrag/vectors).
# Run it again to resume an interrupted run: DVC re-runs only what did not finish.
set -euo pipefail
SYNTH=$(realpath "$1"); REPO=$2; HERE=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -d "$REPO/.git" ]; then
  git clone -q "$HERE" "$REPO"
  (cd "$REPO" && "$HERE/.venv/bin/python" - "$SYNTH" <<'P'
import sys, yaml
kg = sys.argv[1]
p = yaml.safe_load(open("params.yaml"))
p["data"].update({"dataset": "triples", "sample": 0, "seed": 0, "input": kg,
                  "triples": {**p["data"]["triples"], "path": f"{kg}/triples.tsv", "questions": f"{kg}/questions.jsonl"}})
open("params.yaml", "w").write(yaml.safe_dump(p, sort_keys=False))
P
  git -C "$REPO" -c user.email=bench@kgrag -c user.name=bench commit -qam "params: the synthetic KG $SYNTH")
fi
cd "$REPO"
export PATH="$HERE/.venv/bin:$PATH" DO_NOT_TRACK=1 DVC_NO_ANALYTICS=1 GX_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 PREFECT_SERVER_ANALYTICS_ENABLED=false OMP_WAIT_POLICY=PASSIVE
unset PYTHONDONTWRITEBYTECODE
if [ -n "${VECTORS:-}" ]; then mkdir -p "$VECTORS"; export KGRAG_VECTOR_CACHE=$VECTORS; fi
echo "start $(date +%T) code $(git -C "$HERE" rev-parse HEAD) project $(git rev-parse HEAD)"
/usr/bin/time -v python -m flows.with_api dvc repro 2>&1 | while IFS= read -r l; do echo "$(date +%T) $l"; done
echo "end $(date +%T)"
du -sh data .dvc/cache .kgrag_cache "$SYNTH"
