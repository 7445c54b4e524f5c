#!/bin/bash
# A/B of the captured tensor-core attention (SLUICE_CUDA_GRAPH_ATTENTION=0 leaves it eager)
# on the ModernBERT-large-shaped token classifier: the engine's single-request latency
# (latency_bench: packing, upload, forward, head, results back) at 64/143/256 tokens, the
# two settings alternated twice. Needs tests/fixtures/tokenizers/modernbert.
source scripts/device-unpack
R=$OUT/graph_attention; mkdir -p $R; W=/tmp/mb_ab; mkdir -p $W
(cd bench/peers && python3 -c "
import hf_modernbert_tokcls as h
print(h.build_model('$W', '../../tests/fixtures/tokenizers/modernbert', 17))") > $R/build.log 2>&1
for rep in 1 2; do
  for g in 1 0; do
    echo "== rep $rep SLUICE_CUDA_GRAPH_ATTENTION=$g"
    SLUICE_CUDA_GRAPH_ATTENTION=$g timeout 60 latency_bench --model $W/model --dtype bfloat16 \
      --task token-classify --tokens 64,143,256 --seq-len 140 --reps 100 2>&1 | grep -E '^\| 1 seq'
  done
done 2>&1 | tee $R/ab.txt
