#!/bin/bash
# Issue 18: the served image path end to end (10 photo URLs per /v1/rerank, fast decode, bf16,
# ViT-L/14-336-shaped random CLIP, 200 distinct 3-4 MB photos from a loopback host), the
# binary in .carry as sluice_old and the current one alternated; cores 2-15 as in the
# earlier runs. bench/device/README.md says how to prepare it.
source scripts/device-unpack
R=$OUT/clip_served; mkdir -p $R
T0=$(date +%s)
{ nproc; lscpu | grep "Model name"; nvidia-smi --query-gpu=name --format=csv,noheader; date -u; } > $R/host.txt
cat $R/host.txt
for i in 1 2; do for b in sluice_old sluice; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break 2
  command -v $b > /dev/null || continue
  echo "== $b round $i"
  timeout 240 taskset -c 2-15 python3 bench/peers/hf_clip.py --sluice $(command -v $b) --out /tmp/clip \
    --photos 200 --requests-c1 10 --requests-c16 60 --decode fast --dtypes bfloat16 \
    --skip hf,model,decode > $R/${b}_$i.log 2>&1
  grep -E "sluice serve|photos:" $R/${b}_$i.log
done; done
echo "elapsed $(( $(date +%s) - T0 ))"
