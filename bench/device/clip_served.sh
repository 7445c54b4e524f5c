#!/bin/bash
# Issue 18: the served image path end to end (10 photo URLs per /v1/rerank, fast decode,
# ViT-L/14-336-shaped random CLIP, 200 distinct 3-4 MB photos from a loopback host), all 16
# cores. Round 1: bf16 and fp32, sluice served next to HF's served path, both model-only rows
# and the decode rates per core; then served-only rounds of bf16 (each binary in CLIP_BINS,
# default `sluice`; add sluice_old for an A/B) while time allows. bench/device/README.md says
# how to prepare it.
source scripts/device-unpack
R=$OUT/clip_served; mkdir -p $R
T0=$(date +%s)
{ nproc; lscpu | grep "Model name"; nvidia-smi --query-gpu=name --format=csv,noheader; date -u; } > $R/host.txt
cat $R/host.txt
timeout 300 python3 bench/peers/hf_clip.py --sluice $(command -v sluice) --out /tmp/clip \
  --photos 200 --requests-c1 10 --requests-c16 60 --decode fast --dtypes bfloat16,float32 \
  > $R/full.log 2>&1
echo "full rc $?"; grep -E "sluice serve|HF |model only|decode|photos:|^\|" $R/full.log
cp /tmp/clip/results.json $R/full.json 2>/dev/null
for i in 1 2; do for b in ${CLIP_BINS:-sluice}; do
  [ $(( $(date +%s) - T0 )) -gt ${CLIP_BUDGET_S:-420} ] && break 2
  command -v $b > /dev/null || continue
  echo "== $b round $i"
  timeout 150 python3 bench/peers/hf_clip.py --sluice $(command -v $b) --out /tmp/clip \
    --photos 200 --requests-c1 10 --requests-c16 60 --decode fast --dtypes bfloat16 \
    --skip hf,model,decode > $R/${b}_$i.log 2>&1
  grep -E "sluice serve|photos:" $R/${b}_$i.log
done; done
echo "elapsed $(( $(date +%s) - T0 ))"
