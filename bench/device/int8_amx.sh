#!/bin/bash
# Issue 19: the int8 AMX kernel's activation layout (rows / A tiles, SLUICE_CPU_AMX_INT8_A),
# tile schedules (1x4, 2x2) and tileloaddt1 for the once-used operand (SLUICE_CPU_AMX_TILES=...:t1)
# on real tiles: the hardware tests, the BERT-base GEMMs in
# linear_paths_bench (twice, the path order reversed), then BERT-base end to end against ORT
# int8 dynamic and HF bf16 autocast in interleaved rounds (bench/device/README.md prepares it).
source scripts/device-unpack
R=$OUT/int8_amx; mkdir -p $R
CPUS=${CPU_PEERS_CPUS:-$(lscpu -p=CPU,CORE | grep -v '^#' | awk -F, '!seen[$2]++ {print $1}' | head -2 | paste -sd,)}
{ lscpu | grep -iE "model name|^cpu\(s\)|thread"; lscpu | grep -o 'amx[a-z0-9_]*' | sort -u | paste -sd' '; echo "pinned to CPUs $CPUS"; date -u; } > $R/host.txt
cat $R/host.txt
# SKIP_DIAG=1: straight to the peers (a second call on the same machine).
if [ "${SKIP_DIAG:-0}" != 1 ]; then
timeout ${HW_TIMEOUT:-150} taskset -c $CPUS backend_test --gtest_filter=${HW_FILTER:-'AmxGemm.*:Int8Linear.*:CpuAttention*'} > $R/hwtests.log 2>&1
echo "hw tests rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" $R/hwtests.log | head -20
# The tile loop against operands in L1, L2, L3 or memory (isa_peak_bench's footprint rows),
# where the packed binaries include isa_peak_bench.
if command -v isa_peak_bench > /dev/null; then
  timeout 120 taskset -c $CPUS isa_peak_bench --threads 1,2 --seconds ${ISA_SECONDS:-0.5} > $R/isa_peak.md 2>&1
  cat $R/isa_peak.md
fi
P=${LP_PATHS:-amx-int8,amx-int8-rows,amx-int8-1x4,amx-int8-1x4-rows}
PR=$(echo $P | tr ',' '\n' | tac | paste -sd,)
[ "${LP_PASSES:-2}" = 1 ] && PR=
for paths in $P $PR; do
  timeout ${LP_TIMEOUT:-100} taskset -c $CPUS linear_paths_bench --threads 2 --reps 5 --m ${LP_M:-1024,4096} \
    --only ${LP_ONLY:-BERT} --paths $paths \
    --amx-tunes ${LP_TUNES:-128:4:1024,128:4:1024:noepi} >> $R/linear_paths.md 2>&1
  echo "linear_paths rc $?" >> $R/linear_paths.md
done
cat $R/linear_paths.md
# Where a forward's time goes (forward_bench packed; FWD_ENVS: one profile per setting, e.g.
# "- SLUICE_CPU_LINEAR=amx", "-" for none).
if command -v forward_bench > /dev/null && [ "${FWD_ENVS:-}" != none ]; then
  for e in ${FWD_ENVS:--}; do
    echo "## env $e" >> $R/forward.md
    env $( [ "$e" = - ] || echo "$e" | tr '+' ' ') timeout 120 taskset -c $CPUS forward_bench \
      --models ${FWD_MODELS:-minilm-l6,bert-base} --dtypes ${FWD_DTYPES:-bf16,int8} --threads 2 \
      --reps 2 --profile >> $R/forward.md 2>&1
    echo "forward rc $?" >> $R/forward.md
  done
  cat $R/forward.md
fi
fi
[ "${SKIP_PEERS:-0}" = 1 ] && exit 0
R8=SLUICE_CPU_AMX_INT8_A=rows; K4=SLUICE_CPU_AMX_KERNEL=1x4
V=${PEER_VARIANTS:-int8,int8:$R8,int8:$K4,int8:$R8+$K4}
timeout ${PEERS_TIMEOUT:-360} taskset -c $CPUS python3 bench/peers/hf_cpu_crossencoder.py --sluice sluice \
  --workload .carry/rerank_1200.jsonl --out /tmp/int8_amx --shapes ${PEER_SHAPES:-bert-base} \
  --pairs bert-base=64,minilm-l6=256 --reps ${PEER_REPS:-5} --fp32-once \
  --peers hf-bf16,ort-int8 --sluice-dtypes bfloat16,$V > $R/peers.log 2>&1
echo "peers rc $?"
cp /tmp/int8_amx/results.json $R/ 2>/dev/null
python3 - <<'PY' $R/results.json | tee $R/ratios.txt
import json,sys,statistics as st
try: rows=json.load(open(sys.argv[1]))
except Exception as e: print("no results", e); sys.exit()
for r in rows:
  for c in r["columns"]:
    b = "hf-bf16" if "bfloat16" in c else "ort-int8" if "int8" in c else None
    if b and c.startswith("sluice"):
      xs=[x[c]/x[b] for x in r["rounds"] if c in x and b in x]
      print(r["model"],c,"/",b,["%.2f"%x for x in xs],"median %.2f"%st.median(xs), "rounds>=%s: %d of %d" % ("1.5" if b=="hf-bf16" else "2", sum(x >= (1.5 if b=="hf-bf16" else 2) for x in xs), len(xs)))
  for c in r["columns"]: print(r["model"],c,["%.1f"%x for x in r[c]["pairs_per_s"]],"median %.1f"%r[c]["median"],"maxdiff %.1e"%r[c]["max_abs_score_diff"])
  print(r["model"],"hf-fp32 %.1f"%r["hf_median"])
PY
tail -3 $R/peers.log
