#!/bin/bash
# Issue 19: AMX bf16 / int8 against HF bf16 autocast and ORT int8 dynamic, interleaved rounds;
# then forward_bench's op profile. bench/device/README.md says how to prepare it.
source scripts/device-unpack
R=$OUT/cpu_peers; mkdir -p $R
# Two CPUs of different physical cores (vCPUs 0 and 1 may be one core's two hyperthreads,
# sharing its AMX unit): the first CPU of each of the first two cores lscpu lists.
CPUS=${CPU_PEERS_CPUS:-$(lscpu -p=CPU,CORE | grep -v '^#' | awk -F, '!seen[$2]++ {print $1}' | head -2 | paste -sd,)}
{ lscpu | grep -iE "model name|^cpu\(s\)|thread|flags" | sed 's/flags.*\(amx[a-z0-9_ ]*\).*/amx: \1/'; nproc; lscpu -e=CPU,CORE,SOCKET,NODE; echo "pinned to CPUs $CPUS"; date -u; } > $R/host.txt
cat $R/host.txt
timeout 480 taskset -c $CPUS python3 bench/peers/hf_cpu_crossencoder.py --sluice sluice \
  --workload .carry/rerank_1200.jsonl --out /tmp/cpu_peers --pairs bert-base=64,minilm-l6=256 --reps 5 \
  --peers hf-bf16,ort-int8 --sluice-dtypes bfloat16,bfloat16:SLUICE_CPU_LINEAR=amx,int8,int8:SLUICE_CPU_AMX_KERNEL=1x4+SLUICE_CPU_AMX_INT8_A=rows > $R/peers.log 2>&1
echo peers rc $?
cp /tmp/cpu_peers/results.json $R/ 2>/dev/null
python3 - <<'PY' $R/results.json | tee $R/ratios.txt
import json,sys,statistics as st
try: rows=json.load(open(sys.argv[1]))
except Exception as e: print("no results", e); sys.exit()
for r in rows:
  for a,b in (("sluice-bfloat16","hf-bf16"),("sluice-bfloat16:SLUICE_CPU_LINEAR=amx","hf-bf16"),("sluice-int8","ort-int8"),("sluice-int8:SLUICE_CPU_AMX_KERNEL=1x4+SLUICE_CPU_AMX_INT8_A=rows","ort-int8"),("sluice-float32","hf-fp32")):
    xs=[x[a]/x[b] for x in r["rounds"] if a in x and b in x]
    if xs: print(r["model"],a,"/",b,["%.2f"%x for x in xs],"median %.2f"%st.median(xs))
  for c in r["columns"]: print(r["model"],c,"%.1f"%r[c]["median"],"maxdiff %.1e"%r[c]["max_abs_score_diff"])
  print(r["model"],"hf-fp32 %.1f"%r["hf_median"])
PY
tail -5 $R/peers.log
echo "== profile int8 default" >> $R/prof.log
timeout 60 taskset -c $CPUS forward_bench --models minilm-l6,bert-base --dtypes int8,bf16 --threads 2 --reps 1 --profile >> $R/prof.log 2>&1
tail -150 $R/prof.log
