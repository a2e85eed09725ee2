#!/usr/bin/env bash
# Budgeted G-Retriever preset comparison: every preset named below trained on the same small budget (the first
# TRAIN_ROWS training rows, 1 epoch, lr 1e-4), scored on the full test split. Runs outside the DVC outputs
# (stages.train_gretriever --tag), reports in reports/gretriever/$TAG/, then the table. Usage, from the project root:
#   bash gretriever/budget.sh                          # the default list below
#   bash gretriever/budget.sh explagraphs:lora metaqa:g_retriever
# Environment: TAG (default budget), TRAIN_ROWS (default 400), THREADS (torch threads, default 1).
set -euo pipefail
TAG=${TAG:-budget}
TRAIN_ROWS=${TRAIN_ROWS:-400}
THREADS=${THREADS:-1}
RUNS=("$@")
if [ ${#RUNS[@]} -eq 0 ]; then
  RUNS=(explagraphs:inference_only explagraphs:g_retriever explagraphs:lora explagraphs:g_retriever_lora
        explagraphs:prompt_tuning metaqa:inference_only metaqa:g_retriever)
fi
COMMON=(-S gretriever.train.epochs=1 -S gretriever.train.lr=1.0e-4 -S gretriever.train.min_lr=5.0e-5
        -S gretriever.train.threads="$THREADS" -S gretriever.train.val_generate_rows=50)
for run in "${RUNS[@]}"; do
  dataset=${run%%:*}
  preset=${run#*:}
  if [ "$dataset" = explagraphs ]; then
    data=(-S gretriever.explagraphs.train_rows="$TRAIN_ROWS" -S gretriever.explagraphs.val_rows=100)
  else
    data=(-S gretriever.metaqa.train_questions="$TRAIN_ROWS" -S gretriever.metaqa.val_questions=100)
  fi
  python -m stages.train_gretriever --dataset "$dataset" --preset "$preset" --tag "$TAG" "${COMMON[@]}" "${data[@]}"
done
python -m stages.gretriever_table
