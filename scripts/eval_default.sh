#!/usr/bin/env bash
# The scores of the shipped default model (docs/models/default.md), every one on data it was never trained
# on (the held-out fifths written by scripts/split_qa_data.py), with `openbook ask`'s decoding settings (greedy,
# 16 new tokens) but Fast decoding instead of Lazy, which settles on Fast's answers (step nq-lazy), so that every
# passage gets its posterior, unless a step says otherwise. Reports go to docs/models/default/.
#
#   scripts/eval_default.sh             # every step below, one after another
#   scripts/eval_default.sh nq-fp32 ... # or some steps by name
set -euo pipefail
cd "$(dirname "$0")/.."
OB=${OB:-.venv/bin/openbook}
PY=${PY:-.venv/bin/python}
OUT=docs/models/default
LEADERS=${LEADERS:-../shared/data/wikidata-leaders-history.csv}
ASK=${ASK:-"--beams 1 --decoding fast --max-new-tokens 16"}  # ASK="... --decoding lazy ...": the same answers, sooner
DTYPE=${DTYPE:-float32}  # of the steps below that do not name theirs (bfloat16 only where the CPU has it natively)
timed() { name=$1; shift; echo "== $*" >&2; /usr/bin/time -f "$name: %e s wall, %U s user" "$@"; }

latency()     { timed latency env PYTHONPATH=. $PY bench/ask_latency.py --questions 15 --cold-runs 3 | tee $OUT/ask_latency.txt; }
nq-bf16()     { timed nq-bf16 $OB eval --task nq --data runs/data/nq-dev.jsonl $ASK --dtype bfloat16 --out $OUT/nq-bf16 --json; }
nq-fp32()     { timed nq-fp32 $OB eval --task nq --data runs/data/nq-dev.jsonl $ASK --dtype float32 --out $OUT/nq-fp32 --json; }
nq-qmark()    { $PY -c 'import json,sys; [print(json.dumps({**r, "question": r["question"].rstrip() + "?"}, ensure_ascii=False))
                    for r in map(json.loads, open(sys.argv[1]))]' runs/data/nq-dev.jsonl > runs/data/nq-dev-qmark.jsonl
                timed nq-qmark $OB eval --task nq --data runs/data/nq-dev-qmark.jsonl $ASK --dtype float32 \
                    --out $OUT/nq-qmark --json; }  # the NQ fifth with a question mark after every question
nq-lazy()     { timed nq-lazy $OB eval --task nq --data runs/data/nq-dev.jsonl ${ASK/fast/lazy} --dtype float32 \
                    --out $OUT/nq-lazy --json  # Lazy decoding (openbook ask's default): Fast's answers, fewer passages
                $PY scripts/compare_reports.py $OUT/nq-fp32/report.json $OUT/nq-lazy/report.json | tee $OUT/nq-lazy/compare.txt; }
nq-int8()     { timed nq-int8 $OB eval --task nq --data runs/data/nq-dev.jsonl $ASK --dtype int8 --out $OUT/nq-int8 --json; }
hot-swap()    { timed hot-swap $OB experiments hot-swap --leaders "$LEADERS" --k 5 --beams 1 --max-new-tokens 16 \
                    --out $OUT/hot-swap --json; }
closed-book() { scripts/train_default.sh closed-book
                timed closed-book $OB eval --task nq --run runs/default-cb --data runs/data/nq-dev.jsonl $ASK \
                    --dtype $DTYPE --out $OUT/nq-closed-book --json; }
webquestions() { timed webquestions $OB eval --task webquestions --data runs/data/webquestions-heldout.json $ASK \
                    --dtype $DTYPE --out $OUT/webquestions --json; }
curatedtrec() { timed curatedtrec $OB eval --task curatedtrec --data runs/data/curatedtrec-heldout.tsv $ASK \
                    --dtype $DTYPE --out $OUT/curatedtrec --json; }
full-ft()     { scripts/train_default.sh full  # all the generator's weights, same data, steps and schedule
                timed full-ft $OB eval --task nq --run runs/default-full --data runs/data/nq-dev.jsonl $ASK \
                    --dtype $DTYPE --out $OUT/nq-full-ft --json  # against the shipped LoRA in the same type:
                lora=$OUT/nq-$([ $DTYPE = bfloat16 ] && echo bf16 || echo fp32)/report.json  # step nq-bf16 or nq-fp32
                $PY scripts/compare_reports.py $lora $OUT/nq-full-ft/report.json | tee $OUT/nq-full-ft/compare.txt; }
lora-vs-full() { timed lora-vs-full env PYTHONPATH=. $PY bench/lora_vs_full.py | tee $OUT/lora_vs_full.txt; }
recall()      { for set in nq-dev webquestions-heldout curatedtrec-heldout; do
                    match=$([ $set = curatedtrec-heldout ] && echo regex || echo dpr)
                    timed recall-$set $OB eval retrieval --questions runs/data/$set.jsonl --k 1,5,20 \
                        --retrievers dense,bm25 --match $match --json | tee $OUT/recall-$set.json; done; }
ablation()    { scripts/train_default.sh learned  # the default's recipe with q(x) trained too (resumes; ~60-80 min)
                timed ablation $OB experiments ablation --data runs/data/nq-dev.jsonl --bm25 default --frozen default \
                    --learned runs/default-learned $ASK --out $OUT/ablation --json; }
k-sweep()     { timed k-sweep $OB experiments k-sweep --data runs/data/nq-dev.jsonl --ks 1,2,5,10 $ASK \
                    --out $OUT/k-sweep --json; }

mkdir -p $OUT
steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(nq-bf16 nq-int8 latency nq-fp32 recall hot-swap closed-book lora-vs-full webquestions curatedtrec ablation k-sweep)
for step in "${steps[@]}"; do "$step"; done
