#!/bin/bash
# Issue 16: what a default switch adds to p99 right after it, with enough requests near the
# switches for the 0-50 ms bin's p99 to be more than its few slowest requests: a switch every
# 0.5 s for 50 s (~100 switches, ~3,500 requests within 50 ms of one per run), the placement
# hold on (the default) twice and off once. bench/device/README.md says how to prepare it.
source scripts/device-unpack
R=$OUT/switch_hold; mkdir -p $R
T0=$(date +%s)
{ nproc; lscpu | grep "Model name"; date -u; } > $R/host.txt; cat $R/host.txt
i=0
for E in ${SWITCH_SETTINGS:-150 0 150}; do i=$((i+1))
  [ $(( $(date +%s) - T0 )) -gt ${SWITCH_BUDGET_S:-420} ] && break
  timeout 150 python3 bench/modelops_bench.py --sluice /tmp/sluice-dev/bin/sluice --only switch --policies all \
    --duration 50 --every 0.5 --reps 1 --concurrency 4 --window 0.05 --server-arg=--switch-placement-ms=$E > $R/mo_${E}_$i.txt 2>&1
  echo "== placement $E run $i"; grep -B2 -A4 "by start" $R/mo_${E}_$i.txt | grep -v "^all: switching runs"
done
tar -C $R -czf $OUT/switch_hold.tgz . 2>/dev/null
echo "elapsed $(( $(date +%s) - T0 ))"
