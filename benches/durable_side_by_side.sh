#!/usr/bin/env bash
# Persistent messages with confirms, dwellmq beside RabbitMQ, in one run (issue 11's target):
# 1 publisher (confirms, window 256) -> 1 durable queue -> 1 consumer (acks), 16 B and 1 KiB
# bodies, `dwellmq-load durable` run alternately against each broker so that both see the
# same machine load. Prints msg/s per run, the median per broker and size, dwellmq/RabbitMQ,
# and each broker's CPU µs per message (from /proc, `--pid`).
#
# Builds nothing: build first with `cargo build --release --bin dwellmq --bin dwellmq-load`.
# RabbitMQ must already be running at RABBIT_ADDR (its pid is found as `beam.smp`); dwellmq
# is started here on a fresh temporary data directory at DWELLMQ_ADDR and stopped at the end.
#
#   benches/durable_side_by_side.sh 127.0.0.1:5680 127.0.0.1:5673
#
# Environment: BIN (directory of the binaries, default target/release), MESSAGES (per run,
# default 200000), ROUNDS (default 3), SIZES (default "16 1024"), WINDOW (default 256).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 DWELLMQ_ADDR RABBIT_ADDR" >&2
    exit 2
fi
DWELLMQ_ADDR=$1
RABBIT_ADDR=$2
BIN=${BIN:-target/release}
MESSAGES=${MESSAGES:-200000}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-16 1024}
WINDOW=${WINDOW:-256}

for b in dwellmq dwellmq-load; do
    [ -x "$BIN/$b" ] || { echo "$BIN/$b not found: build it first" >&2; exit 2; }
done
RABBIT_PID=$(pgrep -o beam.smp || true)
[ -n "$RABBIT_PID" ] || echo "warning: no beam.smp process: RabbitMQ's CPU is not measured" >&2

host=${DWELLMQ_ADDR%:*}
port=${DWELLMQ_ADDR##*:}
if (echo > "/dev/tcp/$host/$port") 2> /dev/null; then
    # Another broker there would be measured in place of ours.
    echo "$DWELLMQ_ADDR is already in use: choose a free address for dwellmq" >&2
    exit 2
fi

DATA=$(mktemp -d)
OUT=$(mktemp)
"$BIN/dwellmq" --listen "$DWELLMQ_ADDR" --data-dir "$DATA/data" --http off --log-level warn \
    > "$DATA/stdout" 2> "$DATA/stderr" &
DWELLMQ_PID=$!
cleanup() {
    kill "$DWELLMQ_PID" 2> /dev/null || true
    wait "$DWELLMQ_PID" 2> /dev/null || true
    rm -rf "$DATA" "$OUT"
}
trap cleanup EXIT
for _ in $(seq 100); do
    (echo > "/dev/tcp/$host/$port") 2> /dev/null && break
    sleep 0.1
done
if ! kill -0 "$DWELLMQ_PID" 2> /dev/null; then
    echo "dwellmq did not start:" >&2
    cat "$DATA/stderr" >&2
    exit 1
fi

# run BROKER ADDR PID SIZE: one `durable` run, its figures appended to $OUT as
# "broker size msg/s cpu_us_per_msg".
run() {
    local broker=$1 addr=$2 pid=$3 size=$4 text rate cpu
    text=$("$BIN/dwellmq-load" durable --addr "$addr" --messages "$MESSAGES" --size "$size" \
        --window "$WINDOW" --pid "${pid:-0}")
    rate=$(sed -n 's/.* = \([0-9]*\) msg\/s.*/\1/p' <<< "$text")
    cpu=$(sed -n 's/.* = \([0-9.]*\) µs\/msg.*/\1/p' <<< "$text")
    printf '%-8s %5s B  round %s: %8s msg/s  broker CPU %6s µs/msg\n' \
        "$broker" "$size" "$round" "$rate" "${cpu:--}"
    echo "$broker $size $rate ${cpu:--}" >> "$OUT"
}

echo "durable side by side: $MESSAGES messages per run, window $WINDOW, $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
    for size in $SIZES; do
        run dwellmq "$DWELLMQ_ADDR" "$DWELLMQ_PID" "$size"
        run rabbitmq "$RABBIT_ADDR" "$RABBIT_PID" "$size"
    done
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
echo
echo "medians over $ROUNDS rounds:"
for size in $SIZES; do
    d=$(awk -v s="$size" '$1 == "dwellmq" && $2 == s { print $3 }' "$OUT" | median)
    r=$(awk -v s="$size" '$1 == "rabbitmq" && $2 == s { print $3 }' "$OUT" | median)
    dc=$(awk -v s="$size" '$1 == "dwellmq" && $2 == s { print $4 }' "$OUT" | median)
    rc=$(awk -v s="$size" '$1 == "rabbitmq" && $2 == s && $4 != "-" { print $4 }' "$OUT" | median)
    ratio=$(awk -v d="$d" -v r="$r" 'BEGIN { if (r > 0) printf "%.2f", d / r; else print "-" }')
    printf '%5s B: dwellmq %8s msg/s (%s µs/msg CPU), RabbitMQ %8s msg/s (%s µs/msg CPU): %sx\n' \
        "$size" "$d" "$dc" "$r" "${rc:--}" "$ratio"
done
