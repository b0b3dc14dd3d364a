#!/usr/bin/env bash
# reload-evicted.sh replays workloads under fifo's reload_evicted: at_once and
# after_swap side by side (policy tune, one binary), for foresight and ollama
# (LRU), and prints cold loads, load seconds, p95 and p99 queueing delay and
# the worst model's p95: the table in docs/BENCHMARKS.md ("A victim is free
# once stopped"). Run it from the repository root after `make build` and
# policies/foresight/eval.sh (whose generated traces it reuses).
d=${EVAL_DIR:-/tmp/foresight-eval}
out=$(mktemp -d)
set -euo pipefail
run() { # name config trace rate
  for r in foresight ollama; do
    nice ./bin/loadout policy tune -c "$2" -t "$3" --rate "$4" --router $r --set scheduler.reload_evicted=at_once,after_swap --json $out/re-$1-$r.json >/dev/null 2>&1
    jq -r --arg n "$1" --arg r "$r" '.points[] | "\($n)\t\($r)\t\(.settings["scheduler.reload_evicted"])\t\(.run.cold_loads)\t\(.load_s|round)\t\(.run.queue_wait_s.p95)\t\(.run.queue_wait_s.p99)\t\([.run.models[].queue_wait_s.p95] | max)"' $out/re-$1-$r.json
  done
}
run prod-3w $d/prod-3w.yaml $d/prod-3w.csv 1
run prod-3w-s8 $d/prod-3w-s8.yaml $d/prod-3w-s8.csv 1
run prod-sample testdata/simulate/prod-sample.yaml testdata/traces/prod-sample.csv 1
run prod-mixed-1w $d/prod-mixed-1w.yaml $d/prod-mixed-1w.csv 1
run conv-zipf8@0.02 testdata/simulate/eight-models.yaml testdata/traces/conv-zipf8-5m.csv 0.02
run conv-zipf8@1 testdata/simulate/eight-models.yaml testdata/traces/conv-zipf8-5m.csv 1
run code-zipf8-s7@0.02 testdata/simulate/eight-models.yaml "$d/code-zipf8-s7@0.02.csv" 0.02
run conv-zipf20-s5@0.02 testdata/simulate/twenty-models.yaml "$d/conv-zipf20-s5@0.02.csv" 0.02
run conv-agent8-s5@0.02 testdata/simulate/eight-models.yaml "$d/conv-agent8-s5@0.02.csv" 0.02
