#!/usr/bin/env python3
"""The leaderboard recipe (docs/PERFORMANCE.md) as commands: the rehearsal's script.

The rehearsal (issue 64) runs the recipe *as the page writes it*, so this
reads the shell block under docs/PERFORMANCE.md's heading "A recipe for the
CS336 leaderboard" and changes only what a rehearsal must: where files live,
the time budget, and (profile cpu) the shapes that make it a seconds-long CPU
run. Every change names a flag that the page's command must hold; an edit
that drops or renames one stops the rehearsal here with the flag and the
command named, instead of rehearsing something else.

  recipe_commands.py STAGE --text DIR --tokens DIR --run DIR [--budget 6m]
                     [--profile gpu|cpu] [--python P] [--fsdptrain F] [--page MD]

STAGE: data (the two prepare_data.py commands), train (the training run), eval
(the final --eval-only). Prints one shell-quoted command a line; the changes
made go to stderr, "# recipe: ..." a line, for the log.
"""
import argparse
import os
import shlex
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGE = os.path.join("docs", "PERFORMANCE.md")
HEADING = "## A recipe for the CS336 leaderboard"

# profile cpu: the recipe's shapes scaled to a CPU run of seconds (tiny model,
# a 512-token BPE, a few shards); every flag must be in the page's command.
CPU_DATA_TRAIN = {"--vocab-size": "512", "--bpe-train-bytes": "1M", "--shard-tokens": "150K"}
CPU_FSDP = {"--model": "tiny", "--vocab-size": "512", "--seq-len": "64", "--batch-size": "4",
            "--eval-seq-len": "32"}
# --checkpoint-every stays the page's: as on the GPU, the last step's save is the
# one save (saves written beside the steps would slow them past the budget's plans)
CPU_TRAIN = {"--grad-accum": "2", "--warmup-steps": "10", "--eval-every": "30", "--eval-batches": "4"}


def fail(msg):
    sys.exit(f"recipe_commands: error: {msg}")


def recipe_commands(path):
    """The commands of the recipe's first ```sh block: continuations joined,
    comments and blank lines dropped, each split as the shell would."""
    lines = open(path, encoding="utf-8").read().split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith(HEADING))
        begin = next(i for i in range(start, len(lines)) if lines[i].strip() == "```sh")
        end = next(i for i in range(begin + 1, len(lines)) if lines[i].strip() == "```")
    except StopIteration:
        fail(f"no '{HEADING}' section with a ```sh block in {path}")
    cmds, cur = [], ""
    for l in lines[begin + 1:end]:
        if not cur and (not l.strip() or l.lstrip().startswith("#")):
            continue
        cur += l[:-1] + " " if l.endswith("\\") else l
        if not l.endswith("\\"):
            cmds.append(shlex.split(cur))
            cur = ""
    return cmds


def stages(cmds):
    data = [c for c in cmds if any(a.endswith("tools/prepare_data.py") for a in c[:2])]
    fsdp = [c for c in cmds if c[0].endswith("fsdptrain")]
    train = [c for c in fsdp if "--eval-only" not in c]
    evals = [c for c in fsdp if "--eval-only" in c]
    if len(data) != 2 or len(train) != 1 or len(evals) != 1:
        fail(f"{PAGE}'s recipe has {len(data)} prepare_data, {len(train)} training and "
             f"{len(evals)} --eval-only commands; this script expects 2, 1 and 1 (update it with "
             "the page)")
    return {"data": data, "train": train, "eval": evals}


class Command:
    """One of the recipe's commands and the changes made to it, each logged."""

    def __init__(self, argv, what):
        self.argv, self.what = list(argv), what

    def set(self, flag, value):
        if flag not in self.argv:
            fail(f"{PAGE}'s {self.what} command has no {flag} (the rehearsal sets it to "
                 f"{value}); update recipe_commands.py with the page")
        i = self.argv.index(flag) + 1
        if self.argv[i] != value:
            print(f"# recipe: {self.what}: {flag} {self.argv[i]} -> {value}", file=sys.stderr)
            self.argv[i] = value

    def add(self, *args):
        print(f"# recipe: {self.what}: added {' '.join(args)}", file=sys.stderr)
        self.argv += args

    def paths(self, mapping):
        """Relative paths (the recipe runs from the repository root) to this run's folders."""
        for i, a in enumerate(self.argv):
            prefix = "hf:" if a.startswith("hf:") else ""
            rel = a[len(prefix):]
            for old, new in mapping:
                if rel == old or rel.startswith(old + "/"):
                    self.argv[i] = prefix + new + rel[len(old):]
                    break


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("stage", choices=("data", "train", "eval"))
    p.add_argument("--text", required=True, help="folder with owt_train.txt and owt_valid.txt")
    p.add_argument("--tokens", required=True, help="folder for the token files (the recipe's tokens/)")
    p.add_argument("--run", required=True, help="folder for the checkpoints and metrics")
    p.add_argument("--budget", help="--time-budget of the training run (the recipe's if absent)")
    p.add_argument("--profile", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--python", default=os.path.join(ROOT, ".venv/bin/python"))
    p.add_argument("--fsdptrain", default="fsdptrain")
    p.add_argument("--page", default=os.path.join(ROOT, PAGE), help="the page holding the recipe")
    a = p.parse_args()

    mapping = [("tokens", a.tokens), ("owt_train.txt", os.path.join(a.text, "owt_train.txt")),
               ("owt_valid.txt", os.path.join(a.text, "owt_valid.txt")),
               ("ckpt_owt", os.path.join(a.run, "ckpt_owt")), ("owt.jsonl", os.path.join(a.run, "owt.jsonl"))]
    out = []
    for n, argv in enumerate(stages(recipe_commands(a.page))[a.stage]):
        c = Command(argv, f"{a.stage}{n + 1 if a.stage == 'data' else ''}")
        c.paths(mapping)
        if a.stage == "data":
            c.argv[0:2] = [a.python, os.path.join(ROOT, "tools/prepare_data.py")]
            if a.profile == "cpu" and "--tokenizer" in c.argv and c.argv[c.argv.index("--tokenizer") + 1] == "bpe":
                for f, v in CPU_DATA_TRAIN.items():
                    c.set(f, v)
        else:
            c.argv[0] = a.fsdptrain
            if a.profile == "cpu":
                for f, v in CPU_FSDP.items():
                    c.set(f, v)
                c.add("--device", "cpu")
            if a.stage == "train":
                if a.budget:
                    c.set("--time-budget", a.budget)
                if a.profile == "cpu":
                    for f, v in CPU_TRAIN.items():
                        c.set(f, v)
            else:
                c.add("--metrics", os.path.join(a.run, "owt_eval.jsonl"))
        out.append(shlex.join(c.argv))
    print("\n".join(out))


if __name__ == "__main__":
    main()
