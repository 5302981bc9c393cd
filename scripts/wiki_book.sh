#!/usr/bin/env bash
# Issue 32 over the 2015 Wikipedia book (../shared/data/wikipedia-2015-core, about 650k passages), every
# measurement one after another: two heavy jobs at once on a 2-core, 24 GB machine get killed or time each
# other. Each step logs to $LOGS/<step>.log (and its /usr/bin/time -v to <step>.time); a step whose log ends
# with its JSON line is skipped, so re-running the script after an interruption goes on where it stopped
# (the build and bench/open_domain.py also resume inside their step).
#
#   scripts/wiki_book.sh            # every step below, in order
#   scripts/wiki_book.sh recall     # or only the steps named
#
# Steps: build (`openbook kb build` with the defaults, hours on 2 AVX2 cores), index (bench/index_scale.py:
# recall@10 and search time of each index kind on the book's vectors, NQ questions), recall (answer
# recall@1/5/20/100, dense/BM25/hybrid), latency (bench/ask_latency.py --kb), shards (bench/shard_plan.py),
# quality (exact match and FEVER with the shipped default), train (scripts/train_default.sh open-book: fresh
# adapters), train-init (scripts/train_default.sh open-book-init: the shipped default's adapters trained further),
# train-learned (scripts/train_default.sh open-book-learned: the same with q(x) trained too), candidates (scripts/open_book_candidates.py: each against the shipped default over the book and the demo book).
# KB (default $OPENBOOK_CACHE/kb/wiki2015), DATA (../shared/data), LOGS ($OPENBOOK_CACHE/wiki-book).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${OPENBOOK_CACHE:-$HOME/.cache/openbook}
KB=${KB:-$CACHE/kb/wiki2015}
DATA=${DATA:-../shared/data}
LOGS=${LOGS:-$CACHE/wiki-book}
PY=${PY:-.venv/bin/python}
OB=${OB:-.venv/bin/openbook}
mkdir -p "$LOGS"
export PYTHONPATH=.

step() {  # step NAME COMMAND...: run unless its log already ends with a JSON line
  local name=$1; shift
  if [ -f "$LOGS/$name.log" ] && tail -n 1 "$LOGS/$name.log" | grep -q '^{'; then
    echo "== $name: done ($LOGS/$name.log)"; return
  fi
  echo "== $name: $*"
  local timed=()
  [ -x /usr/bin/time ] && timed=(/usr/bin/time -v -o "$LOGS/$name.time")  # peak RSS and times, where installed
  "${timed[@]}" "$@" > "$LOGS/$name.log" 2> >(tee -a "$LOGS/$name.err" >&2)
  tail -n 1 "$LOGS/$name.log" | grep '^{' || { echo "$name did not end with its JSON line: see $LOGS/$name.log" >&2; exit 1; }
}

run() {
  case $1 in
    # kb build/info --json print an indented object: json.tool --compact makes it the log's last line
    build) if [ -f "$KB/manifest.json" ]; then step build bash -c "$OB kb info '$KB' --json | $PY -m json.tool --compact"
           else step build bash -c "set -o pipefail; $OB kb build '$DATA/wikipedia-2015-core' --out '$KB' --json \
               | $PY -m json.tool --compact"; fi ;;
    index) step index env OMP_NUM_THREADS=2 $PY bench/index_scale.py --kb "$KB" --data-dir "$DATA" \
        --kinds flat,hnsw --hnsw-ef-construction 200 ;;
    recall) step recall env OMP_NUM_THREADS=2 $PY bench/open_domain.py --kb "$KB" --data-dir "$DATA" --only recall ;;
    latency) step latency $PY bench/ask_latency.py --kb "$KB" ;;
    shards) step shards $PY bench/shard_plan.py --kb "$KB" --data "$DATA" ;;
    quality) step quality env OMP_NUM_THREADS=2 $PY bench/open_domain.py --kb "$KB" --data-dir "$DATA" ;;
    train) step train env KB="$KB" DATA="$DATA" scripts/train_default.sh open-book ;;
    train-init) step train-init env KB="$KB" DATA="$DATA" scripts/train_default.sh open-book-init ;;
    train-learned) step train-learned env KB="$KB" DATA="$DATA" scripts/train_default.sh open-book-learned ;;
    candidates) step candidates $PY scripts/open_book_candidates.py --kb "$KB" ;;
    *) echo "unknown step $1 (build, index, recall, latency, shards, quality, train, train-init, train-learned," \
            "candidates)" >&2; exit 2 ;;
  esac
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build index recall latency shards quality train train-init train-learned candidates)
for s in "${steps[@]}"; do run "$s"; done
