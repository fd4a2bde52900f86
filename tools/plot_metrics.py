#!/usr/bin/env python3
"""Training curves from fsdptrain's --metrics files (JSON lines).

  plot_metrics.py RUN.jsonl [RUN2.jsonl ...] -o curves.png [--labels a,b]
                  [--x steps|tokens] [--tokens-per-step N[,N...]] [--dpi 90]
                  [--title TEXT] [--summary]

The figure (matplotlib, Agg backend: no display needed) has six panels:
training and validation loss against steps, the same against tokens,
tokens/s, MFU (%), gradient norm and learning rate. The last four are drawn
against --x (steps by default). Several runs are overlaid, one colour each:
training loss is a solid line, validation loss a dashed line with markers.
A run's label is its file's stem unless --labels gives one per file.

--summary prints one line per run instead of (or, with -o, besides) the
figure:

  LABEL: steps 1-300 (300 step records, 0 replaced on resume), last loss
  2.1772 at step 300, best val loss 2.1941 at step 300, median tokens/s
  18322.8, median MFU n/a

(one line per run; "n/a" where the run has no such records). The median
tokens/s is taken over every step record kept (see below); the first step
of a process, which pays one-time costs, moves a median little.

What is read. Each line is one JSON object (src/trainer/trainer.cpp writes them):
  * step records: step, loss, lr, grad_norm, tokens_per_s, mfu (null on the
    CPU), elapsed_s and more; a number that was NaN/Inf is written as null
    and is left out of the curves;
  * evaluation records: step, val_loss (step 0 is the evaluation before the
    first step);
  * checkpoint records: step, checkpoint (ignored here);
  * a diverged step: step, loss, grad_norm, diverged: true, reason. The step
    was not applied, so it is left out of the curves; --summary names it.
    Under --on-divergence rollback it also has rollback_to_step,
    skipped_sequences and rollbacks, and the steps after the checkpoint
    follow again (replacing the earlier ones, as a resume's do); --summary
    lists each rollback as "rolled back at step 6 (to 4)".
Objects without an integer "step" and keys not listed are ignored, so later
record kinds do not break the tool. Blank lines are skipped.

Tokens. The records carry no token count today, so loss against tokens needs
either a "tokens_seen" (or "tokens") key in the step records, used as is, or
--tokens-per-step N (the global batch: batch_size x seq_len x grad_accum x
ranks, printed by fsdptrain as "global batch B sequences x T tokens"), one N
for all runs or one per file. Without either, that panel says so; --x tokens
then is an error.

Resumed runs. fsdptrain opens the metrics file in append mode, so a run
resumed from a checkpoint (or started again) writes after the records of the
earlier process, and its steps may repeat ones already written (the steps
done after the checkpoint that the earlier process had not saved). The rule:
the later process wins. When a step record's step is not greater than the
last step record's before it, a new process has started at that step, and
every earlier record (step or evaluation) with a step >= it is dropped. An
evaluation record whose step is lower than the last step record's (a fresh
start writes val_loss at step 0 first) likewise drops the earlier step
records after its step and the evaluations at or after it. The evaluation at
the checkpoint's own step is kept: it was made with the weights the resumed
run starts from. --summary counts the step records so replaced. A resume
that starts right after the last step written replaces nothing and looks
like one process (which, for the curves, it is).

Missing data (no evaluation records, CPU runs whose MFU is null, no token
count) leaves a note in that panel instead of failing; a panel some runs
lack names them in its corner.

Errors (a missing or unreadable file, a line that is not a JSON object, a
file with no step records, bad options) print one line
"plot_metrics: error: ..." naming the file and line, and exit 1.
"""

import argparse
import json
import math
import os
import statistics
import sys

PROG = "plot_metrics"


class InputError(Exception):
    pass


def fail(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(1)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 1, like every other error here
        fail(message + " (see --help)")


def number(v):
    """A finite float, or None (null, NaN, Inf, a string, a bool)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


class Run:
    def __init__(self, path, label):
        self.path = path
        self.label = label
        self.steps = []      # step records kept, in step order: dicts
        self.vals = []       # (step, val_loss) kept
        self.replaced = 0    # step records dropped for a later process's
        self.diverged = []   # steps refused as diverged (last process's view)
        self.rollbacks = []  # (diverged step, step rolled back to)
        self.tokens_per_step = None

    # --- tokens ---------------------------------------------------------
    def token_key(self):
        for key in ("tokens_seen", "tokens"):
            if self.steps and all(number(r.get(key)) is not None for r in self.steps):
                return key
        return None

    def has_tokens(self):
        return self.token_key() is not None or self.tokens_per_step is not None

    def tokens_at(self, step):
        """Tokens seen after `step` steps, or None."""
        key = self.token_key()
        if key is not None:
            if step == 0:
                return 0.0
            for r in self.steps:
                if r["step"] == step:
                    return number(r[key])
            return None
        if self.tokens_per_step is not None:
            return float(step) * self.tokens_per_step
        return None

    def series(self, key, x="steps", scale=1.0):
        """(xs, ys) of a step-record key, leaving out nulls."""
        xs, ys = [], []
        for r in self.steps:
            y = number(r.get(key))
            if y is None:
                continue
            xv = r["step"] if x == "steps" else self.tokens_at(r["step"])
            if xv is None:
                continue
            xs.append(xv)
            ys.append(y * scale)
        return xs, ys

    def val_series(self, x="steps"):
        xs, ys = [], []
        for s, v in self.vals:
            xv = s if x == "steps" else self.tokens_at(s)
            if xv is not None:
                xs.append(xv)
                ys.append(v)
        return xs, ys


def read_run(path, label):
    run = Run(path, label)
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(f"'{path}': no such file")
    except IsADirectoryError:
        raise InputError(f"'{path}': is a directory, not a metrics file")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"'{path}': cannot read: {e}")

    steps = []  # (step, record)
    vals = []   # (step, val_loss or None)
    diverged = []
    rollbacks = []       # rollback records kept
    since_step = []      # those written after the last step record
    last_step = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise InputError(f"'{path}': line {n}: not JSON lines ({e.msg}): {line[:60]!r}")
        if not isinstance(rec, dict):
            raise InputError(f"'{path}': line {n}: not JSON lines (a JSON "
                             f"{type(rec).__name__}, not an object)")
        step = rec.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            continue
        if rec.get("diverged") is True:
            back = rec.get("rollback_to_step")
            if isinstance(back, int) and not isinstance(back, bool):
                rollbacks.append((step, back))
                since_step.append((step, back))
            else:
                diverged.append(step)
            continue
        if "loss" in rec:
            if last_step is not None and step <= last_step:
                run.replaced += sum(1 for s, _ in steps if s >= step)
                steps = [(s, r) for s, r in steps if s < step]
                vals = [(s, v) for s, v in vals if s < step]
                diverged = [s for s in diverged if s < step]
                # A process that starts after a checkpoint a rollback went
                # back to repeats that rollback itself; the rollbacks just
                # written are what this restart continues.
                rollbacks = [r for r in rollbacks if r in since_step or r[1] < step - 1]
            steps.append((step, rec))
            since_step = []
            last_step = step
        elif "val_loss" in rec:
            if last_step is not None and step < last_step:
                run.replaced += sum(1 for s, _ in steps if s > step)
                steps = [(s, r) for s, r in steps if s <= step]
                vals = [(s, v) for s, v in vals if s < step]
                diverged = [s for s in diverged if s <= step]
                last_step = steps[-1][0] if steps else None
            vals.append((step, number(rec["val_loss"])))
    if not steps:
        raise InputError(f"'{path}': no step records (objects with \"step\" and \"loss\")")
    run.steps = [r for _, r in steps]
    run.vals = [(s, v) for s, v in vals if v is not None]
    run.diverged = diverged
    run.rollbacks = rollbacks
    return run


def fmt(v, digits=4):
    return "n/a" if v is None else f"{v:.{digits}f}"


def summary_line(run):
    first, last = run.steps[0], run.steps[-1]
    loss_rec = next((r for r in reversed(run.steps) if number(r.get("loss")) is not None), None)
    parts = [f"steps {first['step']}-{last['step']} ({len(run.steps)} step records, "
             f"{run.replaced} replaced on resume)"]
    if loss_rec is None:
        parts.append("last loss n/a")
    else:
        parts.append(f"last loss {number(loss_rec['loss']):.4f} at step {loss_rec['step']}")
    if run.vals:
        s, v = min(run.vals, key=lambda sv: (sv[1], sv[0]))
        parts.append(f"best val loss {v:.4f} at step {s}")
    else:
        parts.append("best val loss n/a")
    tps = [y for y in (number(r.get("tokens_per_s")) for r in run.steps) if y is not None]
    parts.append("median tokens/s " + (f"{statistics.median(tps):.1f}" if tps else "n/a"))
    mfu = [y for y in (number(r.get("mfu")) for r in run.steps) if y is not None]
    parts.append("median MFU " + (f"{100 * statistics.median(mfu):.2f}%" if mfu else "n/a"))
    for s, back in run.rollbacks:
        parts.append(f"rolled back at step {s} (to {back})")
    if run.diverged:
        parts.append("diverged at step " + ",".join(str(s) for s in run.diverged))
    return f"{run.label}: " + ", ".join(parts)


# --- plotting -------------------------------------------------------------

def empty_panel(ax, text):
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
            fontsize=9, color="0.4")


def plot(runs, out, xaxis, dpi, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {id(r): colors[i % len(colors)] for i, r in enumerate(runs)}
    fig, axes = plt.subplots(3, 2, figsize=(11, 10))
    (ax_ls, ax_lt), (ax_tps, ax_mfu), (ax_gn, ax_lr) = axes

    def legend(ax, handles, notes):
        if not handles:
            return
        leg = ax.legend(handles=handles, fontsize=8, loc="best",
                        title="; ".join(notes) or None, title_fontsize=7)
        leg.get_title().set_color("0.35")

    def loss_panel(ax, x):
        handles, no_val, no_x = [], [], []
        for run in runs:
            if x == "tokens" and not run.has_tokens():
                no_x.append(run.label)
                continue
            c = color[id(run)]
            xs, ys = run.series("loss", x)
            if xs:
                ax.plot(xs, ys, color=c, lw=1.0, alpha=0.85)
            vx, vy = run.val_series(x)
            if vx:
                ax.plot(vx, vy, color=c, lw=1.2, ls="--", marker="o", ms=4)
            else:
                no_val.append(run.label)
            if xs or vx:
                handles.append(Line2D([], [], color=c, lw=1.5, label=run.label))
        ax.set_title("loss against " + x, fontsize=10)
        if not handles:
            empty_panel(ax, "no token count in the records:\npass --tokens-per-step "
                            "(batch x seq_len x grad_accum x ranks)" if x == "tokens"
                        else "no loss values")
            return
        ax.set_xlabel("step" if x == "steps" else "tokens")
        ax.set_ylabel("loss")
        if x == "tokens":
            ax.xaxis.set_major_formatter(EngFormatter())
        ax.grid(alpha=0.3)
        if len(runs) == 1:
            handles = []
        handles.append(Line2D([], [], color="0.3", lw=1.0, label="train"))
        if len(no_val) < len(handles):
            handles.append(Line2D([], [], color="0.3", lw=1.2, ls="--", marker="o", ms=4,
                                  label="validation"))
        notes = ["no validation: " + ", ".join(no_val)] if no_val else []
        if no_x:
            notes.append("no token count: " + ", ".join(no_x))
        legend(ax, handles, notes)

    def key_panel(ax, key, title, ylabel, scale=1.0, empty=None, log=False):
        handles, missing = [], []
        for run in runs:
            xs, ys = run.series(key, xaxis, scale)
            if xs:
                ax.plot(xs, ys, color=color[id(run)], lw=1.0)
                handles.append(Line2D([], [], color=color[id(run)], lw=1.5, label=run.label))
            else:
                missing.append(run.label)
        ax.set_title(title, fontsize=10)
        if not handles:
            empty_panel(ax, empty or f"no {key} in the records")
            return
        ax.set_xlabel("step" if xaxis == "steps" else "tokens")
        ax.set_ylabel(ylabel)
        if xaxis == "tokens":
            ax.xaxis.set_major_formatter(EngFormatter())
        if log:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3, which="both" if log else "major")
        if len(runs) > 1:
            legend(ax, handles, [f"no {key}: " + ", ".join(missing)] if missing else [])
        return True

    loss_panel(ax_ls, "steps")
    loss_panel(ax_lt, "tokens")
    if key_panel(ax_tps, "tokens_per_s", "throughput", "tokens/s"):
        ax_tps.yaxis.set_major_formatter(EngFormatter())
    key_panel(ax_mfu, "mfu", "MFU (of the dense bf16 peak)", "MFU (%)", scale=100.0,
              empty="no MFU in the records\n(CPU runs record null)")
    key_panel(ax_gn, "grad_norm", "gradient norm (before clipping)", "global norm", log=True)
    key_panel(ax_lr, "lr", "learning rate", "lr")
    fig.suptitle(title or ", ".join(os.path.basename(r.path) for r in runs), fontsize=11)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=dpi)
    except OSError as e:
        raise InputError(f"'{out}': cannot write the figure: {e.strerror or e}")
    finally:
        plt.close(fig)


def main(argv=None):
    p = Parser(prog="plot_metrics.py",
               description="Training curves from fsdptrain --metrics files (JSON lines).")
    p.add_argument("runs", nargs="+", metavar="RUN.jsonl", help="metrics files")
    p.add_argument("-o", "--output", help="figure to write (PNG; the suffix picks the format)")
    p.add_argument("--labels", help="comma-separated labels, one per file (default: file stems)")
    p.add_argument("--x", choices=["steps", "tokens"], default="steps",
                   help="x axis of throughput, MFU, norm and lr panels (default steps)")
    p.add_argument("--tokens-per-step", metavar="N[,N...]",
                   help="tokens per optimizer step (global batch x seq_len), one or one per file")
    p.add_argument("--dpi", type=int, default=90, help="resolution of the figure (default 90)")
    p.add_argument("--title", help="figure title (default: the file names)")
    p.add_argument("--summary", action="store_true", help="print one line per run")
    a = p.parse_args(argv)

    if not a.output and not a.summary:
        fail("nothing to do: give -o FILE and/or --summary")
    if a.dpi <= 0:
        fail(f"--dpi {a.dpi}: must be positive")
    if a.labels is not None:
        labels = a.labels.split(",")
        if len(labels) != len(a.runs):
            fail(f"--labels has {len(labels)} label(s) for {len(a.runs)} file(s)")
    else:
        labels = [os.path.splitext(os.path.basename(r))[0] for r in a.runs]
    tps = [None] * len(a.runs)
    if a.tokens_per_step is not None:
        vals = a.tokens_per_step.split(",")
        if len(vals) not in (1, len(a.runs)):
            fail(f"--tokens-per-step has {len(vals)} value(s) for {len(a.runs)} file(s)")
        try:
            nums = [int(v) for v in vals]
        except ValueError:
            fail(f"--tokens-per-step '{a.tokens_per_step}': not integers")
        if any(v <= 0 for v in nums):
            fail(f"--tokens-per-step '{a.tokens_per_step}': must be positive")
        tps = nums * len(a.runs) if len(nums) == 1 else nums

    try:
        runs = []
        for path, label, t in zip(a.runs, labels, tps):
            run = read_run(path, label)
            run.tokens_per_step = t
            runs.append(run)
        if a.x == "tokens":
            for run in runs:
                if not run.has_tokens():
                    raise InputError(f"--x tokens: '{run.path}' has no tokens_seen in its "
                                     "records; pass --tokens-per-step")
        if a.summary:
            for run in runs:
                print(summary_line(run))
        if a.output:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise InputError("matplotlib is not installed (tools/setup.sh installs it "
                                 "into .venv: run the tools with .venv/bin/python)")
            plot(runs, a.output, a.x, a.dpi, a.title)
    except InputError as e:
        fail(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
