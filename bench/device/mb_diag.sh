#!/bin/bash
# Issue 17 diagnosis: where the ModernBERT-large token classifier's time goes on the GPU.
# Offline rates by pairs count, batch size, CUDA graphs and GEMM tuning; nsys kernel sums
# when nsys exists. Needs tests/fixtures/tokenizers/modernbert (bench/device/README.md).
source scripts/device-unpack
R=$OUT/mb_diag; mkdir -p $R; W=/tmp/mb_diag; mkdir -p $W
(cd bench/peers && python3 - <<'PY' $W
import json, os, sys
sys.argv = [sys.argv[0]] + sys.argv[1:]
out = sys.argv[1]
import hf_modernbert_tokcls as h
from transformers import PreTrainedTokenizerFast
md = h.build_model(out, "../../tests/fixtures/tokenizers/modernbert", 17)
tok = PreTrainedTokenizerFast.from_pretrained(md)
pairs = h.workload(tok, 512, 7)
for name, ps in (("p512", pairs), ("p2048", pairs * 4), ("p64", pairs[:64])):
    with open(os.path.join(out, name + ".jsonl"), "w") as f:
        for a, r in ps:
            f.write(json.dumps({"text": a, "text_pair": r}) + "\n")
print("model", md)
PY
) > $R/build.log 2>&1
M=$W/model
cls() { # ENV=VALUE args...
  local e=$1; shift
  env $e sluice classify --model $M --device cuda --dtype bfloat16 --task token-classify --output /dev/null "$@" 2>&1 | grep -E "^done|CUDA graphs: rec|warmed" | tr '\n' ' '; echo; }
for rep in 1 2; do
for n in 1 8 64; do
  for inp in p512 p2048; do
    echo "rep $rep seqs $n $inp default: $(cls X=1 --input $W/$inp.jsonl --max-num-seqs $n)"
    echo "rep $rep seqs $n $inp tune:    $(cls SLUICE_CUDA_GEMM_SMALL=tune --input $W/$inp.jsonl --max-num-seqs $n)"
  done
  echo "rep $rep seqs $n p512 graphs off: $(cls X=1 --input $W/p512.jsonl --max-num-seqs $n --cuda-graphs off)"
done
done 2>&1 | tee $R/rates.txt
# The timed GEMM choices (default: only M >= 1024; tune: every M bucket, split-K included).
for e in SLUICE_CUDA_GEMM_LOG=1 "SLUICE_CUDA_GEMM_LOG=1 SLUICE_CUDA_GEMM_SMALL=tune"; do
  echo "== $e"; env $e sluice classify --model $M --device cuda --dtype bfloat16 --task token-classify \
    --output /dev/null --input $W/p512.jsonl --max-num-seqs 64 2>&1 | grep -E "GEMM|^done" | sort | uniq -c | sort -rn | head -60
done 2>&1 | tee $R/gemm.txt
which nsys ncu 2>&1 | tee $R/nsys.txt; ls /usr/local/cuda/bin 2>/dev/null | head -50 >> $R/nsys.txt
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  for n in 1 64; do
    timeout 120 $NSYS profile -o $W/prof$n --force-overwrite true --cuda-graph-trace=node \
      sluice classify --model $M --device cuda --dtype bfloat16 --task token-classify --output /dev/null \
      --input $W/p512.jsonl --max-num-seqs $n > $W/nsys$n.log 2>&1
    timeout 120 $NSYS stats --report cuda_gpu_kern_sum --format csv $W/prof$n.nsys-rep > $R/kern$n.csv 2>&1
    head -30 $R/kern$n.csv
  done
fi
