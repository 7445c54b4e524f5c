#!/bin/bash
# Issue 17: the ModernBERT-large-shaped token classifier side by side with HF, bf16 on both
# sides first (the tensor-core figures next to the fp32 bars), then fp32 while time allows.
# Needs tests/fixtures/tokenizers/modernbert in the tree. bench/device/README.md says how to
# prepare it. MB_VARIANTS="A=1;A=2 B=3": sluice environments A/B'd in the same run (the
# offline batches, the profile and the served single request once per variant).
source scripts/device-unpack
R=$OUT/modernbert; mkdir -p $R
T0=$(date +%s)
{ nproc; lscpu | grep "Model name"; nvidia-smi --query-gpu=name --format=csv,noheader; date -u; } > $R/host.txt
cat $R/host.txt
for D in ${MB_DTYPES:-bfloat16 float32}; do
  [ $(( $(date +%s) - T0 )) -gt ${MB_BUDGET_S:-200} ] && break
  (cd bench/peers && timeout ${MB_TIMEOUT:-240} python3 hf_modernbert_tokcls.py --sluice $(command -v sluice) \
    --tokenizer ../../tests/fixtures/tokenizers/modernbert --out /tmp/mb_$D --dtype $D \
    --pairs 512 --reps 50 --absa-requests 100 --variants "${MB_VARIANTS:-}") > $R/$D.log 2>&1
  echo "== $D rc $?"; grep -E "^\||workload|HF |sluice " $R/$D.log
  grep -E "CUDA graphs" /tmp/mb_$D/serve.log | head -2
  cp /tmp/mb_$D/results.json $R/$D.json 2>/dev/null; cp /tmp/mb_$D/serve.log $R/${D}_serve.log 2>/dev/null
done
echo "elapsed $(( $(date +%s) - T0 ))"
