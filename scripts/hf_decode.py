#!/usr/bin/env python3
"""hf_decode.py — Hugging Face transformers on the jobs specd's GPU check measures, for a
side-by-side in the same run: greedy decode tokens/s of a model at batch 1 and at a larger
batch, and assisted generation (transformers' speculative decoding) with a draft model.

  scripts/hf_decode.py --model DIR [--draft DIR] [--batch 1 16] [--tokens 128] [--device cuda]
  scripts/hf_decode.py --config CONFIG.json [--batch 1 16] ...     # random weights of a config's shapes

A fixed prompt of 32 token ids (seeded), a warm-up generation, then per batch size the best of
--runs timed generate() calls of exactly --tokens new tokens (min_new_tokens = max_new_tokens,
greedy), CUDA synchronised around each. tokens/s = batch x tokens / seconds (the 32-token
prefill included, as in specd-bench's end-to-end figure). transformers as it comes: its default
(dynamic) KV cache, eager PyTorch, bf16 weights. Prints one line per measurement; exits 77 when
torch or transformers is missing (skipped)."""
import argparse
import sys
import time

try:
    import torch
    import transformers
except ImportError as e:  # not an error: the machine has no PyTorch stack
    print(f"hf_decode: skipped ({e})")
    sys.exit(77)


def with_dtype(fn, *a):
    """fn(*a, dtype=bf16): transformers 5 names it dtype, 4.x torch_dtype."""
    try:
        return fn(*a, dtype=torch.bfloat16)
    except TypeError:
        return fn(*a, torch_dtype=torch.bfloat16)


def load(args, path, is_config):
    auto = transformers.AutoModelForCausalLM
    if is_config:
        cfg = transformers.AutoConfig.from_pretrained(path)
        torch.manual_seed(1)
        with torch.device(args.device):  # initialised where it runs (an 8B model on the host is slow)
            m = with_dtype(auto.from_config, cfg)
    else:
        m = with_dtype(auto.from_pretrained, path)
    return m.to(device=args.device, dtype=torch.bfloat16).eval()  # bf16 whatever the version took


def timed(args, fn):
    best = float("inf")
    for _ in range(args.runs):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="checkpoint directory")
    src.add_argument("--config", help="config.json: random weights of its shapes")
    ap.add_argument("--draft", help="draft model directory: also assisted generation at batch 1")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    name = args.model or args.config
    model = load(args, name, args.config is not None)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    base = torch.randint(0, vocab, (1, 32), generator=g)
    gen = dict(max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False, pad_token_id=0)
    print(f"hf_decode: transformers {transformers.__version__}, torch {torch.__version__}, {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else ""))
    with torch.inference_mode():
        model.generate(base.to(args.device), max_new_tokens=8, do_sample=False, pad_token_id=0)  # warm-up
        for b in args.batch:
            ids = base.repeat(b, 1).to(args.device)
            attn = torch.ones_like(ids)
            s = timed(args, lambda: model.generate(ids, attention_mask=attn, **gen))
            print(f"hf decode {name} batch {b}: {b * args.tokens / s:.1f} tok/s "
                  f"({args.tokens} new tokens each, {s:.2f} s, best of {args.runs})")
        if args.draft:
            draft = load(args, args.draft, False)
            ids = base.to(args.device)
            s = timed(args, lambda: model.generate(ids, assistant_model=draft, **gen))
            print(f"hf assisted {name} + {args.draft} batch 1: {args.tokens / s:.1f} tok/s "
                  f"({args.tokens} new tokens, {s:.2f} s, best of {args.runs})")


if __name__ == "__main__":
    main()
