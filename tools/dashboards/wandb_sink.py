"""Weights & Biases, through the wandb package.

One fsdptrain run is one W&B run, whatever the number of processes (a
resumed run, a requeued job): the run's id is kept in this dashboard's state
file (<wandb dir>/wandb/follow_metrics_<metrics file name>.json), and a
follower started again resumes it (wandb.init(id=..., resume="allow")),
going on from the place it saved. A fresh run over the same metrics file is
a new W&B run.

Offline (--wandb-mode offline, or WANDB_MODE=offline) nothing goes over the
network: wandb writes the run under <wandb dir>/wandb/offline-run-*, and
`wandb sync` uploads it later. wandb cannot resume an offline run: each
process writes a folder of its own, and `wandb sync` does not join folders
that share a run id into one run (wandb/wandb issues 3841, 5865). So a
follower started again offline writes the whole run so far into its new
folder, and once it has finished the run, moves the run's older folders to
<wandb dir>/wandb/superseded/: `wandb sync <wandb dir>/wandb/offline-run-*`
then uploads one complete folder per run.

Steps. W&B keeps a run's points in step order and refuses a step lower than
one already logged, and only the W&B server can rewind a run (its
resume_from, not available offline). So when a resumed process repeats
steps, the values W&B keeps are the first ones: a resume from a checkpoint
repeats the same computation, so these are the same numbers on the same
machine. The TensorBoard files keep the later values (tensorboard_sink).
Each point is logged once: a metric's step must be greater than the last one
logged for it.
"""

import os
import secrets
import string

from . import VENV_HINT, UsageError
from .metrics_tail import FollowState
from .series import VAL_TAG, Series, flat_config


def new_run_id():
    """A W&B run id as wandb makes them (8 of [a-z0-9]), made here: its
    helper has moved between wandb versions."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _import():
    try:
        import wandb
    except ImportError as e:
        raise UsageError(f"--wandb needs the wandb package ({e}) {VENV_HINT}") from e
    return wandb


class WandbSink:
    name = "wandb"

    def __init__(self, project, metrics_path, *, entity=None, name=None, directory=None, mode=None,
                 group=None, tags=None):
        self.wandb = _import()
        self.project = project
        self.entity = entity
        base = os.path.basename(metrics_path)
        stem = os.path.splitext(base)[0]
        folder = os.path.dirname(os.path.abspath(metrics_path))
        # A batch script's metrics.jsonl lies in the run's checkpoint folder:
        # that folder's name names the run.
        self.run_name = name or (os.path.basename(folder) if stem == "metrics" else stem)
        self.directory = directory or folder
        self.mode = mode
        # Resolved here, before anything is replayed (see the module's text).
        self.offline = (mode or os.environ.get("WANDB_MODE", "")).lower() in ("offline", "dryrun")
        self.group = group
        self.tags = tags
        state_dir = os.path.join(self.directory, "wandb")
        try:
            os.makedirs(state_dir, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--wandb-dir: cannot create '{state_dir}' ({e.strerror})") from e
        self.state = FollowState(os.path.join(state_dir, f"follow_metrics_{base}.json"), metrics_path)
        self.run = None
        self.run_id = None
        self._begin(replay_to=0)

    def _begin(self, replay_to):
        self.series = Series()
        self.offset = 0
        self.replay_to = replay_to
        self.last = {}  # metric kind -> last step logged
        self.config = None

    def open(self, tail):
        saved = self.state.load(tail)
        if saved is not None and not saved[1].get("stale") and saved[1].get("run_id"):
            self.run_id = saved[1]["run_id"]
            self._begin(replay_to=0 if self.offline else saved[0])
        else:
            self.run_id = new_run_id()
            self._begin(replay_to=0)

    def new_file(self, tail):
        """A fresh run over the metrics file: a new W&B run."""
        self.close(tail)
        self.run_id = new_run_id()
        self._begin(replay_to=0)

    def feed(self, end, record):
        if end <= self.offset:
            return
        replay = end <= self.replay_to
        for kind, a in self.series.add(record):
            if kind == "run":
                if not a.eval_only:
                    self._config(flat_config(a), replay)
            elif kind == "point":
                self._point(a, replay)
        self.offset = end  # done: a record that failed is not saved as done

    def _start(self):
        if self.run is not None:
            return
        settings = self.wandb.Settings(console="off", x_disable_stats=True, save_code=False,
                                       x_save_requirements=False, quiet=True)
        try:
            self.run = self.wandb.init(project=self.project, entity=self.entity, name=self.run_name,
                                       id=self.run_id, resume="allow", dir=self.directory,
                                       mode=self.mode, group=self.group, tags=self.tags,
                                       config=self.config or {}, settings=settings)
        except Exception as e:  # wandb raises its own kinds; each is one line here
            text = " ".join(str(e).split())
            raise UsageError(f"--wandb: W&B could not start the run ({type(e).__name__}: {text}); "
                             "log in with `wandb login`, or use --wandb-mode offline") from e
        self.run.define_metric(VAL_TAG, summary="min")

    def _config(self, config, replay):
        if config == self.config:
            return
        self.config = config
        if replay:
            return
        if self.run is None:
            self._start()  # with the config
        else:
            self.run.config.update(config, allow_val_change=True)

    def _point(self, p, replay):
        # W&B drops a step below its newest; each metric kind's step rises.
        newest = max(self.last.values(), default=-1)
        if p.step < newest or p.step <= self.last.get(p.kind, -1):
            return
        self.last[p.kind] = p.step
        if replay:
            return
        self._start()
        self.run.log(p.scalars, step=p.step)

    def flush(self, tail):
        if self.offset > self.replay_to:
            self.state.save(tail, self.offset, {"run_id": self.run_id})

    def close(self, tail):
        self.flush(tail)
        if self.run is not None:
            folder = os.path.dirname(self.run.dir)  # run.dir is the run folder's files/
            self.run.finish()
            self.run = None
            if self.offline:
                self._supersede(folder)

    def _supersede(self, complete):
        """Moves this run's offline folders other than `complete`, which
        holds all they hold, to wandb/superseded/ (kept, not deleted)."""
        parent = os.path.dirname(complete)
        older = [e for e in os.listdir(parent)
                 if e.startswith("offline-run-") and e.endswith("-" + self.run_id)
                 and os.path.join(parent, e) != complete]
        if older:
            os.makedirs(os.path.join(parent, "superseded"), exist_ok=True)
        for e in older:
            os.replace(os.path.join(parent, e), os.path.join(parent, "superseded", e))
