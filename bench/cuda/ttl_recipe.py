"""The time-to-loss recipe's command line, shared by the rival trainers.

bench/cuda/ttl_run.sh gives every system the same recipe flags, named as
fsdptrain's (lr, schedule, AdamW, clipping, data, evaluation cadence);
torch_ttl.py (PyTorch under torch.compile) and titan_ttl.py (torchtitan) take
them from here, so that the two cannot drift apart.
"""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def bench_reference():
    """bench/cuda/torch_reference.py (its preset table and weight initialisation),
    loaded by path: tools/ holds a module of the same name."""
    spec = importlib.util.spec_from_file_location("bench_torch_reference", os.path.join(HERE, "torch_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def add_recipe_args(ap, presets):
    """The flags every system of ttl_run.sh takes, with fsdptrain's defaults."""
    ap.add_argument("--train-data", required=True, metavar="FILE.h5")
    ap.add_argument("--val-data", required=True, metavar="FILE.h5")
    ap.add_argument("--model", default="gpt-350m", choices=sorted(presets))
    ap.add_argument("--vocab-size", type=int, required=True)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--adam-eps", type=float, default=1e-8)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--init-std", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--time-budget", type=float, default=0.0, metavar="S",
                    help="stop at the first evaluation at or past S seconds of training")
    ap.add_argument("--metrics", required=True, metavar="FILE.jsonl")
