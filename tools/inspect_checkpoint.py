#!/usr/bin/env python3
"""Shows what an fsdptrain checkpoint holds (docs/ARCHITECTURE.md, "Checkpoint").

  inspect_checkpoint.py CKPT.h5 [--stats] [--config]

Prints the metadata (format version, step, tokens seen, optimizer steps,
world and shard-group size at save time, seed, the model's shape and the data
sampler's state), then one line per tensor dataset: name, shape, dtype and,
with --stats, mean, std and L2 norm (computed in float64). --config also
prints the run's full configuration text. Reads with h5py; needs no MPI.
"""

import argparse
import sys

import h5py
import numpy as np

TENSOR_GROUPS = ("model", "optim/exp_avg", "optim/exp_avg_sq")


def text(value):
    """Fixed-length string attributes come back from h5py as bytes."""
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8", errors="replace")
    return str(value)


def scalar(value):
    if isinstance(value, (bytes, np.bytes_)):
        return text(value)
    if isinstance(value, np.floating):
        # float32 attributes print as the value they were written as.
        return float(str(value))
    if isinstance(value, np.integer):
        return int(value)
    return value


def read_meta(f):
    """The checkpoint's metadata as plain Python values."""
    meta = {k: scalar(v) for k, v in f.attrs.items()}
    meta["model"] = {k: scalar(v) for k, v in f["model"].attrs.items()}
    if "tie_embeddings" in meta["model"]:
        meta["model"]["tie_embeddings"] = bool(meta["model"]["tie_embeddings"])
    meta["sampler"] = {k: scalar(v) for k, v in f["sampler"].attrs.items()} if "sampler" in f else {}
    # Seeds are uint64 stored as int64 bits.
    for d in (meta, meta["sampler"]):
        if isinstance(d.get("seed"), int):
            d["seed"] &= (1 << 64) - 1
    return meta


def tensors(f):
    """(full name, dataset) of every tensor, group by group, in file order."""
    out = []
    for group in TENSOR_GROUPS:
        if group not in f:
            continue
        for name, obj in f[group].items():
            if isinstance(obj, h5py.Dataset):
                out.append((group + "/" + name, obj))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--stats", action="store_true", help="mean, std and norm of every tensor")
    ap.add_argument("--config", action="store_true", help="print the full configuration text")
    args = ap.parse_args(argv)
    try:
        f = h5py.File(args.checkpoint, "r")
    except OSError as e:
        sys.exit(f"inspect_checkpoint: error: cannot open '{args.checkpoint}': {e}")
    with f:
        meta = read_meta(f)
        config = meta.pop("config", "")
        model = meta.pop("model")
        sampler = meta.pop("sampler")
        print(f"checkpoint {args.checkpoint}")
        for k in sorted(meta):
            print(f"  {k}: {meta[k]}")
        print("  model: " + ", ".join(f"{k}={v}" for k, v in model.items()))
        print("  sampler: " + ", ".join(f"{k}={v}" for k, v in sampler.items()))
        if args.config:
            print("  config:")
            for line in config.splitlines():
                print("    " + line)
        total = 0
        items = tensors(f)
        width = max((len(n) for n, _ in items), default=0)
        print(f"tensors ({len(items)}):")
        for name, d in items:
            total += d.size
            line = f"  {name:<{width}}  {str(list(d.shape)):<14} {d.dtype}"
            if args.stats:
                x = d[()].astype(np.float64)
                line += f"  mean {x.mean():+.4e}  std {x.std():.4e}  norm {np.linalg.norm(x):.4e}"
            print(line)
        n_model = sum(d.size for n, d in items if n.startswith("model/"))
        print(f"parameters: {n_model:,}  (all tensors: {total:,} elements)")


if __name__ == "__main__":
    main()
