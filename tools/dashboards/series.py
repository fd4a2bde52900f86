"""What fsdptrain's metrics records become on a dashboard, and which points
a restarted process replaces.

A run's --metrics file (src/trainer/metrics.h) holds one JSON object a line:

  * a run record, the first line of each process: run_start_unix_s (the wall
    clock its steps' elapsed_s count from), start_step, resumed_from, ranks
    and config (every option, typed);
  * a step record per step: step, loss, lr, grad_norm, tokens_seen,
    tokens_per_s, mfu, the peak memories, the waits, elapsed_s, train_s;
  * an evaluation record: step, val_loss (--eval-only's also eval_only);
  * under --on-divergence rollback, the diverged step: step, diverged,
    rollback_to_step, rollbacks;
  * others (checkpoints, samples, budget plans), which no dashboard shows.

Later processes win, by tools/plot_metrics.py's rule. A resumed run appends
to the file and repeats the steps after its checkpoint that the process
before it had done; a rollback repeats steps within one process. When a
step record's step is not greater than the last one kept, a new process has
started there: every point at or after that step is dropped. An evaluation
at a step before the last step kept (or at or before the last evaluation)
drops the evaluations from its step on and the step records after it, and
keeps that step's own step record. A rollback is dropped with the steps
after it when a later process starts before the checkpoint it went back to
(that process repeats it), and kept otherwise: the rollback a process just
made, or one a checkpoint it resumed from already holds.

Series turns records into actions for a dashboard, in file order:

  ("run", RunStart)            a process started (its options, for hparams)
  ("restart", step)            points at steps >= step are replaced
  ("point", Point)             scalars at one step

After ("restart", s) come again the points at steps >= s that remain, so
that a dashboard which forgets everything from s on (TensorBoard's
SessionLog.START) shows them still; s may lie before the first step
replaced (Series._restart says why).
"""

import bisect
import math
from array import array
from dataclasses import dataclass, field

from plot_metrics import number  # tools/, on the path: the metrics' own reading of a value

GIB = float(1 << 30)

# (record key, dashboard tag, factor): a step record's scalars. MFU is a
# fraction in the file and a percentage on the dashboard, as in the
# progress line; memory in GiB.
STEP_SCALARS = (
    ("loss", "train/loss", 1.0),
    ("lr", "train/lr", 1.0),
    ("grad_norm", "train/grad_norm", 1.0),
    ("tokens_seen", "train/tokens_seen", 1.0),
    ("tokens_per_s", "perf/tokens_per_s", 1.0),
    ("mfu", "perf/mfu_percent", 100.0),
    ("data_wait_s", "perf/data_wait_s", 1.0),
    ("comm_wait_s", "perf/comm_wait_s", 1.0),
    ("peak_rss_bytes_max_rank", "memory/peak_rss_gib", 1.0 / GIB),
    ("peak_device_bytes_max_rank", "memory/peak_device_gib", 1.0 / GIB),
    ("train_s", "time/train_s", 1.0),
)
VAL_TAG = "val/loss"
EVAL_ONLY_TAG = "eval_only/val_loss"
ROLLBACKS_TAG = "train/rollbacks"
# Every tag this module writes, for a dashboard's list of metrics.
TAGS = tuple(t for _, t, _ in STEP_SCALARS) + (VAL_TAG, EVAL_ONLY_TAG, ROLLBACKS_TAG)


@dataclass
class RunStart:
    start_unix_s: float | None
    start_step: int
    resumed_from: str | None
    ranks: int | None
    config: dict
    eval_only: bool


@dataclass
class Point:
    step: int
    wall: float | None  # seconds since the epoch; None: unknown (use now)
    kind: str  # "train", "val", "eval_only" or "rollback"
    scalars: dict = field(default_factory=dict)  # tag -> value


def classify(r):
    """The kind of a record (a dict), or None for one no dashboard shows."""
    if "run_start_unix_s" in r and "config" in r:
        return "run"
    step = r.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    if r.get("diverged"):
        return "rollback" if "rollbacks" in r else None
    if "loss" in r:
        return "step"
    if "val_loss" in r:
        return "eval_only" if r.get("eval_only") else "eval"
    return None


class Series:
    """One run's records in, dashboard actions out (see the module's text)."""

    def __init__(self):
        self.run = None  # the newest RunStart
        self.last_wall = None  # the newest step record's wall time
        # The kept step records, columnar (a long run's million points stay
        # small): their steps ascending, walls and values (NaN: none).
        self.steps = array("q")
        self.walls = array("d")
        self.values = {key: array("d") for key, _, _ in STEP_SCALARS}
        self.vals = []  # kept evaluations: Point, ascending steps
        # Kept rollbacks: [Point, the step gone back to, written since the
        # last step record].
        self.rollbacks = []

    @property
    def last_step(self):
        """The greatest step of a kept point, or -1."""
        ends = [self.steps[-1] if self.steps else -1, self.vals[-1].step if self.vals else -1]
        return max(ends + [r[0].step for r in self.rollbacks])

    def add(self, r):
        kind = classify(r)
        if kind == "run":
            return self._run(r)
        if kind == "step":
            return self._step(r)
        if kind == "eval":
            return self._eval(r)
        if kind == "eval_only":
            v = number(r.get("val_loss"))
            p = Point(r["step"], self.last_wall, "eval_only", {EVAL_ONLY_TAG: v})
            return [("point", p)] if v is not None else []
        if kind == "rollback":
            n, back = number(r.get("rollbacks")), r.get("rollback_to_step")
            if n is None or isinstance(back, bool) or not isinstance(back, int):
                return []
            p = Point(r["step"], self.last_wall, "rollback", {ROLLBACKS_TAG: n})
            self.rollbacks.append([p, back, True])
            return [("point", p)]
        return []

    def _run(self, r):
        config = r.get("config") if isinstance(r.get("config"), dict) else {}
        start = number(r.get("run_start_unix_s"))
        step = r.get("start_step") if isinstance(r.get("start_step"), int) else 0
        ranks = r.get("ranks") if isinstance(r.get("ranks"), int) else None
        resumed = r.get("resumed_from") if isinstance(r.get("resumed_from"), str) else None
        self.run = RunStart(start, step, resumed, ranks, config, bool(config.get("eval-only")))
        self.last_wall = start
        return [("run", self.run)]

    def _step(self, r):
        s = r["step"]
        out = []
        if self.steps and s <= self.steps[-1]:
            # A resumed process repeats the rollbacks after its checkpoint;
            # those just written are the one this restart comes from.
            keep = [x for x in self.rollbacks if x[2] or x[1] < s - 1]
            out += self._restart(s, keep_step_record=False, rollbacks=keep)
        for x in self.rollbacks:
            x[2] = False
        elapsed = number(r.get("elapsed_s"))
        start = self.run.start_unix_s if self.run else None
        wall = start + elapsed if start is not None and elapsed is not None else None
        self.last_wall = wall if wall is not None else self.last_wall
        self.steps.append(s)
        self.walls.append(wall if wall is not None else math.nan)
        for key, _, _ in STEP_SCALARS:
            v = number(r.get(key))
            self.values[key].append(v if v is not None else math.nan)
        out.append(("point", self._point_at(len(self.steps) - 1)))
        return out

    def _eval(self, r):
        e = r["step"]
        out = []
        if (self.steps and e < self.steps[-1]) or (self.vals and e <= self.vals[-1].step):
            out += self._restart(e, keep_step_record=True, rollbacks=self.rollbacks)
        v = number(r.get("val_loss"))
        if v is not None:
            self.vals.append(Point(e, self.last_wall, "val", {VAL_TAG: v}))
            out.append(("point", self.vals[-1]))
        return out

    def _restart(self, s, keep_step_record, rollbacks):
        """Drops the step records at steps >= s (but for the one at s when
        keep_step_record), the evaluations at steps >= s and the rollbacks
        not in `rollbacks`; returns the restart and the points kept from the
        restart's step on.

        The restart's step is s, or earlier where an evaluation or rollback
        was dropped: TensorBoard's data server forgets a tag's points only
        when that tag is written again at or before their step, so the last
        one of that tag kept before s is written again, and with it (the
        Python loader forgets every tag from a START's step on) all that is
        kept from its step on."""
        find = bisect.bisect_right if keep_step_record else bisect.bisect_left
        cut = find(self.steps, s)
        del self.steps[cut:]
        del self.walls[cut:]
        for a in self.values.values():
            del a[cut:]
        vals = [p for p in self.vals if p.step < s]
        at = s
        for old, new in ((self.vals, vals), (self.rollbacks, rollbacks)):
            if len(new) < len(old):  # some dropped: back to the last one kept before s
                before = [x for x in (p.step if isinstance(p, Point) else p[0].step for p in new) if x < s]
                if before:
                    at = min(at, max(before))
        self.vals = vals
        self.rollbacks = list(rollbacks)
        out = [("restart", at)]
        first = bisect.bisect_left(self.steps, at)
        out += [("point", self._point_at(i)) for i in range(first, len(self.steps))]
        out += [("point", p) for p in self.vals if p.step >= at]
        out += [("point", x[0]) for x in self.rollbacks if x[0].step >= at]
        return out

    def _point_at(self, i):
        scalars = {}
        for key, tag, factor in STEP_SCALARS:
            v = self.values[key][i]
            if not math.isnan(v):
                scalars[tag] = v * factor
        wall = self.walls[i]
        return Point(self.steps[i], None if math.isnan(wall) else wall, "train", scalars)


def flat_config(run):
    """The run's options and facts as flat name -> bool/int/float/str, what
    both dashboards accept as hyperparameters (a list becomes one text)."""
    out = {}
    for k, v in run.config.items():
        if isinstance(v, list):
            v = " | ".join(str(x) for x in v)
        elif v is None:
            v = ""
        out[k] = v
    if run.ranks is not None:
        out["ranks"] = run.ranks
    return out
