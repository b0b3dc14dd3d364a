#!/usr/bin/env bash
# eval.sh replays workloads through foresight, adaptive and ollama (LRU,
# Ollama's rule) and prints, per workload, each router's cold loads, load
# seconds and p95 queueing delay beside the classical anchors and the
# offline bound: the figures docs/RATIONALE.md ("A router that forecasts
# demand") quotes. Run it from the repository root after `make build`:
#
#	policies/foresight/eval.sh [SET]
#
# SET is tune (the workloads the design was iterated on), heldout (the
# others: seeds and families never looked at while iterating), all (the
# default: both) or mixed (52 traces on boxes of mixed sizes, where the
# question is the p95 wait against LRU's; run it with
# ROUTERS=foresight,adaptive,gdsf,s3fifo,sieve,ollama to compare them
# all). Generated traces go to $EVAL_DIR (default
# /tmp/foresight-eval) and are reused. Replays run under nice; the
# three-week ones take a few minutes on two cores.
#
# SEQUENCE=1 replays each trace's model sequence one request at a time
# (simulate --sequence): the anchors' terms, so the routers' cold loads
# compare with theirs exactly.
set -euo pipefail

set_=${1:-all}
dir=${EVAL_DIR:-/tmp/foresight-eval}
bin=./bin/loadout
routers=${ROUTERS:-foresight,adaptive,ollama}
seq=${SEQUENCE:+--sequence}
mkdir -p "$dir"
go build -o "$dir/gentraces" ./host/sim/gentraces

# prod NAME WORKLOAD SEED: a generated production-like workload and its box.
prod() {
	[ -f "$dir/$1.csv" ] || nice "$dir/gentraces" -workload "$2" -seed "$3" -o "$dir/$1.csv" >/dev/null
	run "$1" "$dir/$1.yaml" "$dir/$1.csv" 1
}

# azure NAME SOURCE MIX MODELS SEED BOX RATE: an Azure window with models
# assigned by a mix, replayed on BOX at RATE.
azure() {
	[ -f "$dir/$1.csv" ] || nice "$dir/gentraces" -source "$2" -mix "$3" -models "$4" -seed "$5" -window 30m \
		-azure ../shared/traces/azure-llm-2023 -o "$dir/$1.csv" >/dev/null
	run "$1" "$6" "$dir/$1.csv" "$7"
}

# hour NAME SOURCE MODELS SEED: a whole Azure hour, models assigned by
# a Zipf mix, on four equal slots (the held-out trace's box) stretched
# to three weeks (rate 0.002).
hour() {
	[ -f "$dir/$1.csv" ] || nice "$dir/gentraces" -source "$2" -mix zipf -models "$3" -seed "$4" \
		-azure ../shared/traces/azure-llm-2023 -o "$dir/$1.csv" >/dev/null
	run "$1" slots:4 "$dir/$1.csv" 0.002
}

# agent NAME SOURCE MODELS SEED SLOTS [FLAGS]: a whole Azure hour, models
# assigned by the agent mix (FLAGS: gentraces' -max-set N, -shuffle; or
# -mix tenants -agents N -chat-share F for chat users and agents), on
# SLOTS equal slots, stretched to three weeks (rate 0.002).
agent() {
	local name=$1 source=$2 models=$3 seed=$4 slots=$5
	shift 5
	[ -f "$dir/$name.csv" ] || nice "$dir/gentraces" -source "$source" -mix agent -models "$models" -seed "$seed" "$@" \
		-azure ../shared/traces/azure-llm-2023 -o "$dir/$name.csv" >/dev/null
	run "$name@$slots" "slots:$slots" "$dir/$name.csv" 0.002
}

# run NAME BOX TRACE RATE: one row per router, then the anchors. BOX is a
# configuration file, or slots:K for simulate --slots K.
run() {
	local json=$dir/$1${seq:+.sequence}.json box=(-c "$2")
	[[ $2 == slots:* ]] && box=(--slots "${2#slots:}")
	nice $bin simulate "${box[@]}" -t "$3" --rate "$4" $seq --compare "router=$routers" --json "$json" >/dev/null 2>&1
	jq -r --arg name "$1" '
	  . as $d
	  | ($d.load_bound.lower_s // null) as $lb
	  | [range(0; $d.runs | length)] | map(
	      $d.runs[.] as $r
	      | "\($name)\t\($r.router | sub("builtin:"; ""))\t\($r.cold_loads)\t\(if $lb then ($d.ratios_to_bound[.] * $lb | round) else "-" end)\t\($r.queue_wait_s.p95)\t\([$r.models[].queue_wait_s.p95] | max)\t\($d.ratios_to_bound[.] * 1000 | round / 1000)")
	  | .[],
	    (if $d.bounds then "\($name)\tanchors\t" + ([$d.bounds.anchors[] | "\(.name) \(.cold_loads)"] | join(", ")) + "\tBelady \($d.bounds.belady)" else empty end),
	    (if $lb then "\($name)\tbound\tload s ≥ \($lb | round), \($d.load_bound.feasible_s | round) achievable (\($d.load_bound.feasible_loads) loads)" else empty end)
	' "$json"
}

printf 'workload\trouter\tcold loads\tload s\twait p95\tworst model p95\t÷ bound\n'
if [ "$set_" = tune ] || [ "$set_" = all ]; then
	run prod-sample testdata/simulate/prod-sample.yaml testdata/traces/prod-sample.csv 1
	prod prod-sample-s2 prod-sample 2
	run conv-zipf8-5m@0.02 testdata/simulate/eight-models.yaml testdata/traces/conv-zipf8-5m.csv 0.02
	run code-agent6-5m@0.02 testdata/simulate/eight-models.yaml testdata/traces/code-agent6-5m.csv 0.02
	# Added 2026-11-28 with the order of reuse (iterated on): agents on
	# boxes smaller than their working sets, and draws within a set.
	agent conv-agent30-s92 conv 30 92 2
	agent code-agent86-s91 code 86 91 2
	agent conv-agent30-set5-s95 conv 30 95 3 -max-set 5
	agent code-agent30-set5-s96 code 30 96 2 -max-set 5
	agent conv-agent30-set5-shuf-s95 conv 30 95 2 -max-set 5 -shuffle
fi
if [ "$set_" = heldout ] || [ "$set_" = all ]; then
	for s in 3 4 5 6; do prod "prod-sample-s$s" prod-sample "$s"; done
	run prod-mixed-sample testdata/simulate/prod-mixed-sample.yaml testdata/traces/prod-mixed-sample.csv 1
	for s in 5 6; do prod "prod-mixed-sample-s$s" prod-mixed-sample "$s"; done
	run conv-zipf8-5m@0.1 testdata/simulate/eight-models.yaml testdata/traces/conv-zipf8-5m.csv 0.1
	run conv-zipf8-5m-mixed@0.02 testdata/simulate/mixed-sizes.yaml testdata/traces/conv-zipf8-5m.csv 0.02
	azure conv-zipf20-s5@0.02 conv zipf 20 5 testdata/simulate/twenty-models.yaml 0.02
	azure conv-agent8-s5@0.02 conv agent 8 5 testdata/simulate/eight-models.yaml 0.02
	azure code-zipf8-s7@0.02 code zipf 8 7 testdata/simulate/eight-models.yaml 0.02
	azure code-agent20-s7@0.02 code agent 20 7 testdata/simulate/twenty-models.yaml 0.02
	prod prod-mixed-1w prod-mixed-1w 4
	prod prod-3w prod-3w 3
	prod prod-3w-s8 prod-3w 8
	# Held out from the duel with LRU (added with it, never iterated on).
	azure conv-zipf8-s11@0.02 conv zipf 8 11 testdata/simulate/eight-models.yaml 0.02
	azure code-agent8-s12@0.02 code agent 8 12 testdata/simulate/eight-models.yaml 0.02
	azure conv-agent20-s13@0.02 conv agent 20 13 testdata/simulate/twenty-models.yaml 0.02
	azure code-zipf20-s14@0.02 code zipf 20 14 testdata/simulate/twenty-models.yaml 0.02
	azure conv-agent8-s15@0.02 conv agent 8 15 testdata/simulate/eight-models.yaml 0.02
	azure code-zipf8-s16-mixed@0.02 code zipf 8 16 testdata/simulate/mixed-sizes.yaml 0.02
	prod prod-sample-s21 prod-sample 21
	prod prod-mixed-sample-s22 prod-mixed-sample 22
	# Added after the Zipf rows on four equal slots (never iterated on).
	hour conv-z30-s21 conv 30 21
	hour code-z30-s22 code 30 22
	hour conv-z86-s23 conv 86 23
	# Added 2026-11-28 (never iterated on): more of the held-out trace's shape.
	hour conv-z86-s31 conv 86 31
	hour conv-z86-s32 conv 86 32
	hour code-z86-s33 code 86 33
	hour code-z86-s34 code 86 34
	hour conv-z50-s35 conv 50 35
	hour code-z50-s36 code 50 36
	# Added 2026-11-28 with the rule that recent traffic follows LRU (held
	# out from it: run once, after it was chosen).
	for s in 41 42 43; do prod "prod-sample-s$s" prod-sample "$s"; prod "prod-mixed-sample-s$s" prod-mixed-sample "$s"; done
	prod prod-3w-s44 prod-3w 44
	prod prod-mixed-1w-s45 prod-mixed-1w 45
	i=50
	for src in conv code; do
		for mix in zipf agent; do
			for n in 8 20; do
				i=$((i + 1))
				box=testdata/simulate/eight-models.yaml
				[ "$n" = 20 ] && box=testdata/simulate/twenty-models.yaml
				azure "$src-$mix$n-s$i@0.02" "$src" "$mix" "$n" "$i" "$box" 0.02
			done
		done
	done
	hour conv-z30-s61 conv 30 61
	hour code-z30-s62 code 30 62
	hour conv-z86-s63 conv 86 63
	hour code-z86-s64 code 86 64
	hour conv-z50-s65 conv 50 65
	# Added 2026-11-28 with the order of reuse (held out from it: run
	# once, after it was chosen).
	agent code-agent30-s107 code 30 107 2
	agent conv-agent86-s104 conv 86 104 2
	agent conv-agent30-set5-s102 conv 30 102 3 -max-set 5
	agent code-agent86-set5-s111 code 86 111 4 -max-set 5
	agent conv-agent30-set4-shuf-s103 conv 30 103 2 -max-set 4 -shuffle
	agent code-agent86-set4-shuf-s112 code 86 112 3 -max-set 4 -shuffle
	# Added 2026-11-28: chat users and agents on one box (where foresight
	# trails LRU-2 and LRU on four and eight slots; BENCHMARKS.md).
	agent conv-tenants1-s301 conv 30 301 4 -mix tenants -agents 1 -chat-share 0.3
	agent code-tenants1-s305 code 30 305 8 -mix tenants -agents 1 -chat-share 0.3
	agent code-tenants3-s307 code 30 307 4 -mix tenants -agents 3 -chat-share 0.3
	agent conv-tenants3-s304 conv 30 304 2 -mix tenants -agents 3 -chat-share 0.6
	# Added 2026-11-29 (never iterated on): popularity that drifts, models
	# released during the trace, and (chat) users in conversations.
	for w in prod-drift-3w prod-mixed-drift-1w prod-chat-3w prod-mixed-chat-1w; do
		for s in 51 52; do prod "$w-s$s" "$w" "$s"; done
	done
fi
if [ "$set_" = mixed ]; then
	# Added 2026-11-29: where a p95 above LRU's comes from on boxes of
	# mixed sizes (docs/BENCHMARKS.md, "The p95 on boxes of mixed sizes").
	for s in $(seq 200 223); do prod "prod-mixed-sample-s$s" prod-mixed-sample "$s"; done
	# Held out from the guards tried there (run once, after they were).
	for s in $(seq 300 315); do prod "prod-mixed-sample-s$s" prod-mixed-sample "$s"; done
	for s in 300 301 302 303; do prod "prod-mixed-1w-s$s" prod-mixed-1w "$s"; done
	for s in $(seq 320 327); do
		src=conv
		[ $((s % 2)) = 1 ] && src=code
		azure "$src-zipf8-s$s-mixed@0.02" "$src" zipf 8 "$s" testdata/simulate/mixed-sizes.yaml 0.02
	done
fi
