#!/usr/bin/env python3
"""Reference data for scripts/gpu/check.sh, made on the GPU machine with PyTorch and transformers.

--out DIR     writes a seeded random Qwen3-0.6B-shaped checkpoint (bf16 safetensors, config.json,
              generation_config.json) and expected.json in the fixtures' format
              (testdata/models/*/expected.json): transformers' float32 logits of the first and last
              prompt position, its greedy continuation and the smallest top-2 gap along it, plus
              bf16 logits of the last position (last_logits_bf16) for comparison.
--rates       prints one JSON line: torch's bf16 GEMM rate (8192^3) and device-to-device copy
              rate (1 GiB, read + write counted), for the benchmark's ratios (the Go benchmark
              measures its own copy rate too; the two should agree).
"""
import argparse
import json
import os
import time

import torch


def rates():
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
    del a, b
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(4):
        dst.copy_(src)
    torch.cuda.synchronize()
    ct = (time.perf_counter() - t) / 4
    print(json.dumps({"gemm_bf16_tflops": 2 * n**3 / dt / 1e12, "gemm_shape": [n, n, n], "gemm_ms": dt * 1e3,
                      "copy_tb_s": 2 * (1 << 30) / ct / 1e12, "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "cuda": torch.version.cuda}))


def checkpoint(out, seed, layers):
    import transformers
    from transformers import Qwen3Config, Qwen3ForCausalLM

    print(f"hf_ref: torch {torch.__version__} (cuda {torch.version.cuda}), transformers {transformers.__version__}", flush=True)
    t0 = time.time()

    # it runs beside the kernel tests, whose Go references need the host's cores
    torch.set_num_threads(4)
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=layers,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
    )
    # transformers 4 reads rope_theta, 5 rope_parameters (model.Load takes either; the latter
    # wins when both are written)
    cfg.rope_theta = 1000000.0
    if isinstance(getattr(cfg, "rope_parameters", None), dict):
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": 1000000.0}
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
    model.save_pretrained(out)  # safetensors, the default of transformers >= 4.35
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
    print(f"hf_ref: wrote {out} ({layers} layers, prompts of {[len(p) for p in prompts]} tokens) in {time.time() - t0:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--rates", action="store_true")
    a = ap.parse_args()
    if a.rates:
        rates()
    if a.out:
        checkpoint(a.out, a.seed, a.layers)


if __name__ == "__main__":
    main()
