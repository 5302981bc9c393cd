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
# NQ_DATA points at nq-open-oracle.dev-split.jsonl.gz (default: ../shared/data), LEADERS at
# wikidata-leaders-history.csv, JEOPARDY at jeopardy.dev-split.jsonl.gz. N is the number of held-out questions scored (default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
OB=${OB:-.venv/bin/openbook}
NQ_DATA=${NQ_DATA:-../shared/data/nq-open-oracle.dev-split.jsonl.gz}
LEADERS=${LEADERS:-../shared/data/wikidata-leaders-history.csv}
JEOPARDY=${JEOPARDY:-../shared/data/jeopardy.dev-split.jsonl.gz}
N=${N:-100}
DOCS=docs/experiments

# Every run: 50 Adam steps of 4 questions (200 training questions), k=5, bfloat16 autocast, seed 0.
T="--train runs/data/nq-train.jsonl --k 5 --batch-size 4 --lr-generator 1e-4 --lr-query-encoder 1e-5 --max-steps 50 --mixed-precision --seed 0"

timed() { name=$1; shift; echo "== $*"; /usr/bin/time -f "$name: %e s wall, %U s user, %S s sys" "$@"; }

train() {
    python3 scripts/split_nq_dev.py "$NQ_DATA" runs/data
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
    timed posterior $OB experiments posterior --run runs/tok --question "who wrote the old man and the sea" --beams 1 \
        --out $DOCS/posterior --json
}
k-sweep() {
    timed k-sweep $OB experiments k-sweep $E --limit 40 --run runs/seq --run runs/tok --ks 1,2,5,10 \
        --out $DOCS/k-sweep
}
diversity() {
    # Table 5 analogue, zero-shot: no Jeopardy-trained runs fit this budget, so the untrained defaults
    timed diversity $OB experiments diversity --task jeopardy --data "$JEOPARDY" --limit 40 --beams 1 --max-new-tokens 32 \
        --closed-book default --rag-sequence default --rag-token default --out $DOCS/diversity --json
}
experiments() { closed-book-vs-rag; ablation; hot-swap; posterior; k-sweep; diversity; }

for step in "${@:?usage: scripts/real_runs.sh train|experiments|STEP...}"; do "$step"; done
