#!/usr/bin/env python3
"""Scores query/document pairs in-process through sluice's C API with ctypes (docs/c-api.md).

    SLUICE_LIBRARY=build/release/libsluice.so PYTHONPATH=bindings/python \
        python3 examples/python/score_pairs.py models/demo-reranker "How do salmon swim up the river?" \
        "Salmon swim up the cold river every spring." "Traders sell shares at the busy market."
"""
import sys

import sluice

if len(sys.argv) < 4:
    sys.exit(f"usage: {sys.argv[0]} MODEL_DIR QUERY DOCUMENT...")
with sluice.Model(sys.argv[1], threads=2) as model:
    docs = sys.argv[3:]
    for score, doc in zip(model.score_pairs([sys.argv[2]] * len(docs), docs), docs):
        print(f"{score:.9g}\t{doc}")
