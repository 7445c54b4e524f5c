#!/bin/bash
# Issue 16: the switch placement hold on / off, interleaved; then forward_bench old / new.
# bench/device/README.md says how to prepare it.
source scripts/device-unpack
R=$OUT/switch_hold; mkdir -p $R
T0=$(date +%s)
{ nproc; lscpu | grep "Model name"; date -u; } > $R/host.txt; cat $R/host.txt
i=0
for E in 150 0 150 0; do i=$((i+1))
  timeout 90 python3 bench/modelops_bench.py --sluice /tmp/sluice-dev/bin/sluice --only switch --policies all \
    --duration 12 --every 2 --reps 1 --concurrency 4 --window 0.05 --server-arg=--switch-placement-ms=$E > $R/mo_${E}_$i.txt 2>&1
  echo "== placement $E run $i"; grep -B2 -A4 "by start" $R/mo_${E}_$i.txt | grep -v "^all: switching runs"
done
EL=$(( $(date +%s) - T0 )); echo "elapsed $EL"
for i in 1 2; do for b in forward_bench_old forward_bench; do
  [ $(( $(date +%s) - T0 )) -gt 150 ] && break 2
  echo "== $b round $i"; timeout 45 taskset -c 0,1 $b --models minilm-l6,bert-base --dtypes int8,bf16 --threads 2 --reps 2 2>&1 | grep -E "^\| (minilm|bert)"
done; done 2>&1 | tee $R/fwd.log
echo "elapsed $(( $(date +%s) - T0 ))"
