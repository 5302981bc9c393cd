#!/usr/bin/env bash
# The real results of issue 4 on the offline default models (MiniLM retriever, SmolLM2-135M-Instruct
# generator) and the demo knowledge base: fine-tune on the NQ-open dev split minus a held-out fifth, then
# run every experiment on the held-out part. Writes runs/ (checkpoints, not committed) and
# docs/experiments/ (reports and plots, committed).
#
#   scripts/real_runs.sh train        # the five training runs, one after another (~50 min on 2 CPU cores)
#   scripts/real_runs.sh experiments  # the experiments on the trained runs (~60 min)
#   scripts/real_runs.sh ablation ...  # or any one step of `experiments` by its name
#
# Issue 10 item 5 (the paper's Jeopardy, Figure 2 and FEVER experiments on trained runs), one step at a time:
#   scripts/real_runs.sh split-data                       # runs/data/{jeopardy,fever}-{train,heldout}.jsonl (seconds)
#   scripts/real_runs.sh jeopardy-train                   # closed-book, RAG-Token, RAG-Sequence (~1 + 12 + 12 min)
#   scripts/real_runs.sh diversity                        # Table 2 Q-BLEU-1 / BLEU-1 and Table 5 on JN clues (~30 min)
#   scripts/real_runs.sh posterior                        # Figure 2: the largest hand-over among HN inputs (~10 min)
#   scripts/real_runs.sh fever-train                      # RAG and closed-book on FEVER 3-way (~12 + 1 min)
#   scripts/real_runs.sh fever                            # Table 2 FEVER accuracies + gold-title overlap (~15 min)
# STEPS (default 30) is the number of Adam steps of 4 examples of each item-5 training run.
#
# NQ_DATA points at nq-open-oracle.dev-split.jsonl.gz (default: ../shared/data), LEADERS at
# wikidata-leaders-history.csv, JEOPARDY at jeopardy.dev-split.jsonl.gz. N is the number of held-out questions scored (default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
OB=${OB:-.venv/bin/openbook}
NQ_DATA=${NQ_DATA:-../shared/data/nq-open-oracle.dev-split.jsonl.gz}
LEADERS=${LEADERS:-../shared/data/wikidata-leaders-history.csv}
JEOPARDY=${JEOPARDY:-../shared/data/jeopardy.dev-split.jsonl.gz}
N=${N:-100}
JN=${JN:-60}      # held-out Jeopardy clues generated per model (of 253; RAG decodes ~10-15 s per clue)
HN=${HN:-40}      # held-out Jeopardy inputs searched for a hand-over
FN=${FN:-400}     # held-out FEVER claims scored (of 1,200: FN=1200 scores all, about three times as long)
STEPS=${STEPS:-30}
PY=${PY:-.venv/bin/python}
DOCS=docs/experiments

# Every run: 50 Adam steps of 4 questions (200 training questions), k=5, bfloat16 autocast, seed 0.
T="--train runs/data/nq-train.jsonl --k 5 --batch-size 4 --lr-generator 1e-4 --lr-query-encoder 1e-5 --max-steps 50 --mixed-precision --seed 0"

timed() { name=$1; shift; echo "== $*"; /usr/bin/time -f "$name: %e s wall, %U s user, %S s sys" "$@"; }

train() {
    $PY scripts/split_qa_data.py --data-dir "$(dirname "$NQ_DATA")" --out runs/data
    timed seq $OB train --model rag-sequence --learn-scale $T --out runs/seq        # learned retriever
    timed cb $OB train --model closed-book $T --out runs/cb                         # the generator alone
    timed tok $OB train --model rag-token --learn-scale $T --out runs/tok
    timed frozen $OB train --model rag-sequence --freeze-retriever $T --out runs/frozen  # q(x), scale fixed
    timed bm25 $OB train --model rag-sequence --retriever bm25 $T --out runs/bm25   # BM25 scores as logits
}

E="--data runs/data/nq-dev.jsonl --beams 1 --max-new-tokens 12 --json"
closed-book-vs-rag() {
    timed closed-book-vs-rag $OB experiments closed-book-vs-rag $E --limit "$N" \
        --closed-book runs/cb --rag-sequence runs/seq --rag-token runs/tok --out $DOCS/closed-book-vs-rag
}
ablation() {
    timed ablation $OB experiments ablation $E --limit "$N" \
        --bm25 runs/bm25 --frozen runs/frozen --learned runs/seq --out $DOCS/ablation
}
hot-swap() {
    timed hot-swap $OB experiments hot-swap --leaders "$LEADERS" --run runs/seq --k 5 --beams 1 --max-new-tokens 16 \
        --out $DOCS/hot-swap --json
}
posterior() {
    # Figure 2: decode HN held-out Jeopardy answers with the Jeopardy-trained RAG-Token run and plot the
    # generation whose most probable document changes with the most posterior mass moved (--min-moved 0.1)
    timed posterior $OB experiments posterior --run runs/jeopardy-tok --inputs runs/data/jeopardy-heldout.jsonl \
        --task jeopardy --limit "$HN" --k 5 --beams 1 --max-new-tokens 40 --batch-size 8 --out $DOCS/posterior --json
}
k-sweep() {
    timed k-sweep $OB experiments k-sweep $E --limit 40 --run runs/seq --run runs/tok --ks 1,2,5,10 \
        --out $DOCS/k-sweep
}
diversity() {
    # Tables 2 (Q-BLEU-1, BLEU-1) and 5 (distinct trigrams): the three Jeopardy-trained runs on held-out clues
    timed diversity $OB experiments diversity --task jeopardy --data runs/data/jeopardy-heldout.jsonl --limit "$JN" \
        --beams 1 --max-new-tokens 40 --batch-size 8 --closed-book runs/jeopardy-cb --rag-sequence runs/jeopardy-seq \
        --rag-token runs/jeopardy-tok --out $DOCS/diversity --json
}

# ---- issue 10 item 5: Jeopardy question generation, Figure 2, FEVER on runs trained for them
# One recipe for every item-5 run (the shipped default's, scripts/train_default.sh): LoRA rank 16 on the
# generator, retriever frozen, k=5, STEPS Adam steps of 4 examples, float32 (bfloat16 autocast is emulated, so slower,
# on CPUs without AVX-512 BF16 or AMX: add --mixed-precision where the CPU has them), seed 0.
L="--lora 16 --lr-generator 3e-4 --freeze-retriever --k 5 --batch-size 4 --max-steps $STEPS --seed 0
   --checkpoint-every 10"
split-data() { $PY scripts/split_qa_data.py --data-dir "$(dirname "$JEOPARDY")" --out runs/data; }
train-run() {  # NAME MODEL TASK TRAIN-FILE [options]: one run in runs/NAME, resumed from its checkpoint if there is one
    name=$1 model=$2 task=$3 data=$4; shift 4
    resume=$([ -f "runs/$name/checkpoint/state.json" ] && echo --resume || true)
    timed "$name" $OB train --model "$model" --task "$task" --train "$data" $L "$@" --out "runs/$name" $resume
}
jeopardy-train() {  # clues are ~15 words (at most 26): 40 target tokens hold nearly all of them
    for run in cb:closed-book tok:rag-token seq:rag-sequence; do
        train-run "jeopardy-${run%%:*}" "${run#*:}" jeopardy runs/data/jeopardy-train.jsonl --max-target-length 40
    done
}
fever-train() {  # 3-way labels as one-token targets (true / false / unknown); the 2-way scores read the same runs
    train-run fever-rag rag-sequence fever3 runs/data/fever-train.jsonl
    train-run fever-cb closed-book fever3 runs/data/fever-train.jsonl
}
fever() {
    timed fever $OB experiments fever --data runs/data/fever-heldout.jsonl --train runs/data/fever-train.jsonl \
        --limit "$FN" --rag runs/fever-rag --closed-book runs/fever-cb --overlap-k 10 --out $DOCS/fever --json
}
experiments() { closed-book-vs-rag; ablation; hot-swap; posterior; k-sweep; diversity; }

for step in "${@:?usage: scripts/real_runs.sh train|experiments|STEP...}"; do "$step"; done
