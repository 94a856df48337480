"""Engine overhead: images/s of `pipeline.training.engine.train_one_epoch` against a minimal hand-written PyTorch loop.

Same model (the CPU default ViT unless --model says otherwise), same batch, same AdamW, no augmentation, data
already in memory; both measured in this process, interleaved, best of --repeats. Prints both and their ratio
(the engine should reach >= 0.9 of the bare loop on CPU).

    .venv/bin/python bench/bench_train.py                       # CPU default ViT, 2 threads
    .venv/bin/python bench/bench_train.py --model simple_vit    # [CI]'s grid model as cpu-claims builds it
    .venv/bin/python bench/bench_train.py --device cuda --model vit_base_patch16_224 --img 224 --amp bf16 --compile
"""

from __future__ import annotations

import argparse
import time

import timm
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from pipeline.config import Resources, TrainConfig
from pipeline.method.simple_vit import SimpleViT
from pipeline.training.engine import Dist, build_parts, train_one_epoch


def make_model(args):
    kw = dict(img_size=args.img, in_chans=args.chans, num_classes=10)
    if args.model == "cpu-default":  # params.yaml's ViT
        return timm.create_model("vit_tiny_patch16_224", patch_size=4, embed_dim=args.embed, depth=6, num_heads=3,
                                 **kw)
    if args.model == "simple_vit":  # [CI]'s grid model at cpu-claims' geometry (7x7 tokens at 28 px, 3 heads)
        return SimpleViT(image_size=args.img, patch_size=4, num_classes=10, dim=args.embed, depth=6, heads=3,
                         head_dim=args.embed // 3, mlp_dim=args.embed, channels=args.chans, alpha=0.1)
    return timm.create_model(args.model, **kw)


def bare_loop(model, batches, device, autocast_dtype):
    """The reference: forward, loss, backward, step; nothing else."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    model.train()
    start = time.perf_counter()
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return len(batches) * batches[0][0].shape[0] / (time.perf_counter() - start)


def engine_loop(model, loader, recipe, d, resources):
    parts = build_parts(model, recipe, 10, len(loader), d, resources)
    loader.sampler.set_epoch(0)
    stats = train_one_epoch(parts, loader, recipe, 0, d, lambda n: None, resources)
    if d.device.type == "cuda":
        torch.cuda.synchronize()
    return stats["images_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="cpu-default")
    p.add_argument("--img", type=int, default=28)
    p.add_argument("--embed", type=int, default=72, help="embed_dim of the cpu-default model")
    p.add_argument("--chans", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", default="off", choices=["off", "bf16", "fp16"])
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    x = torch.randn(args.batch * args.steps, args.chans, args.img, args.img)
    y = torch.randint(0, 10, (len(x),))
    data = TensorDataset(x, y)
    loader = DataLoader(data, batch_size=args.batch, drop_last=True,
                        sampler=DistributedSampler(data, num_replicas=1, rank=0, shuffle=False))
    batches = list(loader)
    recipe = TrainConfig(batch_size=args.batch, smoothing=0.0, amp=args.amp, warmup_epochs=0)
    resources = Resources(compile=args.compile, device=args.device, threads=args.threads)
    d = Dist(device=device)
    dtype = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    torch.manual_seed(0)
    ref_model, eng_model = make_model(args).to(device), make_model(args)
    if args.compile:
        ref_model = torch.compile(ref_model)
    bare_loop(ref_model, batches[:2], device, dtype)  # warm-up (and compile) both
    engine_loop(eng_model, loader, recipe, d, resources)
    bare, eng = [], []
    for _ in range(args.repeats):
        bare.append(bare_loop(ref_model, batches, device, dtype))
        eng.append(engine_loop(make_model(args), loader, recipe, d, resources))
    b, e = max(bare), max(eng)
    print(f"model {args.model} img {args.img} batch {args.batch} device {args.device} amp {args.amp} "
          f"compile {args.compile} threads {args.threads}")
    print(f"bare loop : {b:8.1f} images/s")
    print(f"engine    : {e:8.1f} images/s")
    print(f"ratio engine/bare = {e / b:.3f}")


if __name__ == "__main__":
    main()
