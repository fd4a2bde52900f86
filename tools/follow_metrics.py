#!/usr/bin/env python3
"""An fsdptrain run on TensorBoard and Weights & Biases, live.

  follow_metrics.py METRICS.jsonl [--tensorboard DIR]
                    [--wandb PROJECT [--wandb-entity E] [--wandb-name NAME]
                     [--wandb-group G] [--wandb-tags a,b] [--wandb-dir DIR]
                     [--wandb-mode online|offline]]
                    [--once | --pid PID] [--poll SECONDS]

A process of its own that reads the run's --metrics file as fsdptrain
(rank 0) appends to it, and writes what it reads to the dashboards: nothing
in the training process changes, so no step waits for a dashboard, and a
dashboard that fails (a full disk, W&B's servers) stops only this process.

Scalars, at the training step (tools/dashboards/series.py): train/loss,
train/lr, train/grad_norm, train/tokens_seen, perf/tokens_per_s,
perf/mfu_percent, perf/data_wait_s, perf/comm_wait_s, memory/peak_rss_gib,
memory/peak_device_gib (the highest rank's), time/train_s, val/loss,
train/rollbacks, and eval_only/val_loss from --eval-only runs. Each process's
options (the run record's config, and the number of ranks) are the run's
hyperparameters: TensorBoard's HParams tab, W&B's config.

Restarts and requeues. Each dashboard keeps where it is in a small state
file of its own (DIR/follow_metrics.json; for W&B, under --wandb-dir), so a
follower started again (say by a requeued batch script) goes on from there,
in the same TensorBoard folder and the same W&B run (offline, where wandb
cannot resume a run, into a new folder holding the whole run, the older
ones moved to wandb/superseded/). Steps a resumed run repeats replace the
earlier points on TensorBoard and are logged once to W&B (its steps only
rise): no point appears twice. A fresh run, which starts
the metrics file anew, is a new W&B run and replaces the TensorBoard
folder's points.

When it stops: --once reads what the file holds and exits (a finished run);
otherwise it follows until SIGTERM or SIGINT, or, with --pid, until that
process has exited (at once if it already has), then reads what is left,
flushes and exits 0. It may start before fsdptrain has created the file.

Errors (no dashboard named, a missing package, a folder it cannot write,
W&B refusing the run) print one line "follow_metrics: error: ..." and exit 1.
"""

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dashboards import UsageError  # noqa: E402
from dashboards.metrics_tail import MetricsTail  # noqa: E402

PROG = "follow_metrics"


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("metrics", help="the run's --metrics file (JSON lines)")
    p.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard event files into DIR")
    p.add_argument("--wandb", metavar="PROJECT", help="log to this W&B project")
    p.add_argument("--wandb-entity", metavar="E", help="W&B team or user (default: yours)")
    p.add_argument("--wandb-name", metavar="NAME",
                   help="the W&B run's name (default: the metrics file's stem, or its folder's "
                        "name for metrics.jsonl)")
    p.add_argument("--wandb-group", metavar="G")
    p.add_argument("--wandb-tags", metavar="A,B")
    p.add_argument("--wandb-dir", metavar="DIR",
                   help="where wandb keeps its files and this tool its state (default: the "
                        "metrics file's folder)")
    p.add_argument("--wandb-mode", choices=("online", "offline"),
                   help="offline: no network, `wandb sync` later (default: WANDB_MODE, else online)")
    p.add_argument("--once", action="store_true", help="read what the file holds, then exit")
    p.add_argument("--pid", type=int, help="follow until this process has exited")
    p.add_argument("--poll", type=float, default=2.0, metavar="SECONDS",
                   help="how often to look for new lines (default 2)")
    a = p.parse_args(argv)
    if not a.tensorboard and not a.wandb:
        raise UsageError("name a dashboard: --tensorboard DIR and/or --wandb PROJECT")
    if a.once and a.pid is not None:
        raise UsageError("--once and --pid exclude each other")
    if not a.poll > 0:
        raise UsageError(f"--poll {a.poll}: must be > 0 seconds")
    if a.once and not os.path.isfile(a.metrics):
        raise UsageError(f"{a.metrics}: no such file")
    for flag in ("wandb_entity", "wandb_name", "wandb_group", "wandb_tags", "wandb_dir", "wandb_mode"):
        if getattr(a, flag) is not None and not a.wandb:
            raise UsageError(f"--{flag.replace('_', '-')} needs --wandb PROJECT")
    return a


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_sinks(a):
    sinks = []
    if a.tensorboard:
        from dashboards.tensorboard_sink import TensorBoardSink
        sinks.append(TensorBoardSink(a.tensorboard, a.metrics))
    if a.wandb:
        from dashboards.wandb_sink import WandbSink
        tags = [t for t in a.wandb_tags.split(",") if t] if a.wandb_tags else None
        sinks.append(WandbSink(a.wandb, a.metrics, entity=a.wandb_entity, name=a.wandb_name,
                               directory=a.wandb_dir, mode=a.wandb_mode, group=a.wandb_group,
                               tags=tags))
    return sinks


class Follower:
    """Reads new records and hands each to every dashboard; notices a
    metrics file started anew (a fresh run)."""

    def __init__(self, tail, sinks):
        self.tail = tail
        self.sinks = sinks
        self.opened = False
        self.read_to = 0  # bytes of the file handed on
        self.head = None

    def poll(self):
        if not self.tail.exists():
            return
        if not self.opened:
            for s in self.sinks:
                s.open(self.tail)
            self.opened = True
            self.head = self.tail.head()
        elif self.read_to and (self.tail.size() < self.read_to or self.tail.head() != self.head):
            for s in self.sinks:
                s.new_file(self.tail)
            self.read_to = 0
            self.head = self.tail.head()
        start = min(s.offset for s in self.sinks)
        for end, record in self.tail.records(start):
            for s in self.sinks:
                s.feed(end, record)
            self.read_to = end
        if self.head is None:
            self.head = self.tail.head()
        for s in self.sinks:
            s.flush(self.tail)

    def close(self):
        if self.opened:
            for s in self.sinks:
                s.close(self.tail)


def main(argv):
    # First, so that a job that ends at once still gets its points flushed.
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda n, _f: stop.append(n))
    a = parse_args(argv)
    sinks = make_sinks(a)
    follower = Follower(MetricsTail(a.metrics, PROG), sinks)
    failed = True
    try:
        while True:
            last = bool(a.once or stop or (a.pid is not None and not alive(a.pid)))
            follower.poll()
            if last:
                break
            deadline = time.monotonic() + a.poll
            while not stop and time.monotonic() < deadline:
                time.sleep(min(0.2, a.poll))
        failed = False
    finally:
        try:
            follower.close()  # what was written is flushed and saved as done
        except Exception:
            if not failed:
                raise  # else the first error is the one to report
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(1)
