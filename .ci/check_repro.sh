#!/usr/bin/env bash
# A fresh clone's `make repro` (environment from requirements.lock, then `dvc repro` from scratch) must leave
# dvc.lock and the committed reports as they are: same versions, same bytes (docs/environment.md).
#
#   bash .ci/check_repro.sh    (or make check-repro)
#
# Clones HEAD into a temporary folder, links ../shared beside it (the llama-cpp-python wheel comes from the
# machine's wheel cache: no 8-minute build), runs `make repro` there, and fails, printing what moved, when `git status`
# shows a change under dvc.lock or reports/ other than the run records (reports/timings.json, report.md,
# report.html: wall times and call-cache use, which differ run to run; docs/pipeline.md "Run records").
# The clone is removed afterwards; KEEP=1 keeps it. Only committed work is checked.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
shared="$(cd "$here/../shared" && pwd)" || { echo "check_repro: no ../shared beside $here" >&2; exit 2; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/kgrag-check-repro.XXXXXX")"
if [ -n "${KEEP:-}" ]; then echo "check_repro: the clone stays in $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
git clone --quiet "$here" "$tmp/kgrag"
ln -s "$shared" "$tmp/shared"
# the llama-cpp-python wheel comes from the machine's wheel cache (Makefile KGRAG_WHEEL_CACHE): nothing to copy or build
cd "$tmp/kgrag"

start=$SECONDS
make repro
echo "check_repro: make repro took $((SECONDS - start)) s"

records=(':!reports/timings.json' ':!reports/report.md' ':!reports/report.html')
moved="$(git status --porcelain -- dvc.lock reports/ "${records[@]}")"
if [ -n "$moved" ]; then
    echo "check_repro: FAILED: a fresh clone's make repro changed what is committed at $(git rev-parse --short HEAD):"
    echo "$moved"
    git --no-pager diff --stat -- dvc.lock reports/ "${records[@]}"
    git --no-pager diff -- dvc.lock | head -n 200 || true  # head closing the pipe early is no failure
    exit 1
fi
echo "check_repro: passed: dvc.lock and reports/ as committed at $(git rev-parse --short HEAD)"
