#!/usr/bin/env python3
"""Reference data for scripts/gpu/check.sh, made on the GPU machine with PyTorch and transformers.

--out DIR     writes a seeded random Qwen3-0.6B-shaped checkpoint (bf16 safetensors, config.json,
              generation_config.json) and expected.json in the fixtures' format
              (testdata/models/*/expected.json): transformers' float32 logits of the first and last
              prompt position, its greedy continuation and the smallest top-2 gap along it, plus
              bf16 logits of the last position (last_logits_bf16) for comparison.
--gemm-rate   prints the torch bf16 GEMM rate (8192^3) for the benchmark's roofline ratios.
"""
import argparse
import json
import os
import time

import torch


def gemm_rate():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    iters = 20
    t = time.perf_counter()
    for _ in range(iters):
        a @ b
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / iters
    print(json.dumps({"gemm_bf16_tflops": 2 * n**3 / dt / 1e12, "shape": [n, n, n], "ms": dt * 1e3}))


def checkpoint(out, seed, layers):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=layers,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, torch_dtype="bfloat16",
        bos_token_id=151643, eos_token_id=151645,
    )
    model = Qwen3ForCausalLM(cfg)
    # larger than the default init (std 0.02) so logits spread and greedy gaps are clear
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.8, 1.2)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
    model = model.to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    gen = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist() for n in (1, 37, 300)]
    f32 = model.to("cuda", torch.float32).eval()
    res = {"model": "qwen3-0.6b-shape-random", "dtype": "bfloat16", "prompts": []}
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids], device="cuda")
            logits = f32(x).logits[0].float()
            out_ids, gaps, cur = [], [], x
            for _ in range(8):
                last = f32(cur).logits[0, -1].float()
                top2 = torch.topk(last, 2).values
                gaps.append(float(top2[0] - top2[1]))
                nxt = int(last.argmax())
                out_ids.append(nxt)
                cur = torch.cat([cur, torch.tensor([[nxt]], device="cuda")], dim=1)
            res["prompts"].append({
                "input_ids": ids, "first_logits": logits[0].tolist(), "last_logits": logits[-1].tolist(),
                "greedy_new_ids": out_ids, "min_top2_gap": min(gaps),
            })
    bf = f32.to(torch.bfloat16)
    with torch.no_grad():
        for p, ids in zip(res["prompts"], prompts):
            p["last_logits_bf16"] = bf(torch.tensor([ids], device="cuda")).logits[0, -1].float().tolist()
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(res, f)
    print(f"hf_ref: wrote {out} ({layers} layers, prompts of {[len(p) for p in prompts]} tokens)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--gemm-rate", action="store_true")
    a = ap.parse_args()
    if a.gemm_rate:
        gemm_rate()
    if a.out:
        checkpoint(a.out, a.seed, a.layers)


if __name__ == "__main__":
    main()
