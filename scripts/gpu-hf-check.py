#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for the cuda backend's HF test.

Loads a (synthesized) checkpoint folder with AutoModelForCausalLM (LlamaForCausalLM or
Qwen2ForCausalLM, as its config.json says) in float32 on the GPU (the bf16 weights upcast, so the
reference has fp32 activations), runs a seeded random prompt plus one decode token, and writes
  {"model_dir", "architecture", "tokens": [n + 1 ids], "n_prefill": n,
   "logits": [row n-1 (prefill's last), row n (the decode step)]}
to OUT. tests/cuda_backend_gpu/hf_match_gpu_test.cpp reads it (SERVELAB_HF_REFERENCE=OUT).

usage: gpu-hf-check.py MODEL_DIR OUT.json [--n 37] [--seed 3]
"""
import argparse
import json

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=37)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    cfg = AutoConfig.from_pretrained(a.model_dir)
    model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32).cuda().eval()
    g = torch.Generator().manual_seed(a.seed)
    tokens = torch.randint(0, cfg.vocab_size, (a.n + 1,), generator=g)
    with torch.no_grad():
        logits = model(tokens[None].cuda()).logits[0].float().cpu()
    rows = [logits[a.n - 1].tolist(), logits[a.n].tolist()]
    with open(a.out, "w") as f:
        json.dump({"model_dir": a.model_dir, "architecture": cfg.architectures[0], "tokens": tokens.tolist(),
                   "n_prefill": a.n, "logits": rows}, f)
    top = logits[a.n - 1].topk(2)
    print(f"{cfg.architectures[0]} {a.model_dir}: prefill {a.n} tokens, top-2 logits {top.values.tolist()}")


if __name__ == "__main__":
    main()
