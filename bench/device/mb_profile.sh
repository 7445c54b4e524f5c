#!/bin/bash
# Issue 17: per-operation GPU time of the ModernBERT-large-shaped token classifier (bf16),
# from `sluice classify --profile` (each backend call synchronised and timed; graphs off),
# at batches of 1, 8 and 64 sequences, then the offline rates with graphs on, for each
# variant of MB_PROFILE_VARIANTS (';'-separated sluice flags and NAME=VALUE environment
# words, a flag and its value joined by =; default: as is, and --residual-dtype=activation).
# Needs tests/fixtures/tokenizers/modernbert (bench/device/README.md).
source scripts/device-unpack
R=$OUT/mb_profile; mkdir -p $R; W=/tmp/mb_profile; mkdir -p $W
(cd bench/peers && python3 - <<'PY' $W
import json, os, sys
out = sys.argv[1]
import hf_modernbert_tokcls as h
from transformers import PreTrainedTokenizerFast
md = h.build_model(out, "../../tests/fixtures/tokenizers/modernbert", 17)
tok = PreTrainedTokenizerFast.from_pretrained(md)
pairs = h.workload(tok, 512, 7)
for name, ps in (("p512", pairs), ("p64", pairs[:64])):
    with open(os.path.join(out, name + ".jsonl"), "w") as f:
        for a, r in ps:
            f.write(json.dumps({"text": a, "text_pair": r}) + "\n")
PY
) > $R/build.log 2>&1
M=$W/model
{ nvidia-smi --query-gpu=name --format=csv,noheader; date -u; } | tee $R/host.txt
IFS=';' read -ra VARIANTS <<< "${MB_PROFILE_VARIANTS-;--residual-dtype=activation}"
[ ${#VARIANTS[@]} -eq 0 ] && VARIANTS=("")
cls() { # variant, then sluice classify flags
  local v=$1; shift; local envs=(X=1) flags=()
  for w in $v; do case $w in --*) flags+=($w) ;; *) envs+=($w) ;; esac; done
  env "${envs[@]}" sluice classify --model $M --device cuda --dtype bfloat16 --task token-classify \
    --output /dev/null "${flags[@]}" "$@" 2>&1
}
for v in "${VARIANTS[@]}"; do
  for n in ${MB_PROFILE_BATCHES:-1 8 64}; do
    inp=p512; [ $n = 1 ] && inp=p64
    echo "== [$v] --max-num-seqs $n ($inp)"
    cls "$v" --input $W/$inp.jsonl --max-num-seqs $n --profile --cuda-graphs off | grep -E "^\||^done" | head -24
  done
done 2>&1 | tee $R/profile.txt
for rep in 1 2; do for v in "${VARIANTS[@]}"; do for n in 1 64; do
  echo "rate [$v] seqs $n: $(cls "$v" --input $W/p512.jsonl --max-num-seqs $n | grep -E '^done')"
done; done; done 2>&1 | tee $R/rates.txt
