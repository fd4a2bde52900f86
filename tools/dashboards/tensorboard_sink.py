"""TensorBoard event files, written with TensorBoard's own writer.

The folder given holds one TensorBoard run per fsdptrain run, named for
the time the run started (20261129-042531): its resumed processes and
requeues go on in the same run, and a fresh run (which starts the metrics
file anew) is a run of its own, as it is on W&B. `tensorboard --logdir DIR`
shows them side by side. Events are written by the tensorboard package's
EventFileWriter with its scalar and hparams summaries (what
torch.utils.tensorboard writes with too); no TensorFlow is needed.

Replaced points. TensorBoard has two readers, and both drop points that a
restarted program writes again, each by its own rule: the data server
(`tensorboard --logdir`'s default, "rustboard") drops a tag's points at and
after a step written again for that tag; the Python loader (`--load_fast
false`, and EventAccumulator, which the test reads with) drops every tag's
points at and after the step of a SessionLog.START event, except for a run's
first START. So the first event of a new folder is a START at step 0, and
Series' ("restart", s) is a START at s followed by the points at s and after
that remain; the two readers then show the same points. One case differs: a
dropped point of a tag with no point left before the restart (a rollback
that a resumed process, starting before it, does not make again) stays on
the data server until that tag is written at or before its step.

A follower started again (state in DIR/follow_metrics.json: the offset
and run folder saved after its last flush) replays the file up to that
offset without writing, then writes a START just after the last step it had
saved, which drops whatever it wrote after that save and before it stopped:
no point is shown twice.
"""

import os
import time

from . import VENV_HINT, UsageError
from .metrics_tail import FollowState
from .series import TAGS, VAL_TAG, Series, flat_config

STATE = "follow_metrics.json"


def _import():
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
        from tensorboard.plugins.hparams import summary_v2 as hparams
        from tensorboard.plugins.scalar import metadata as scalar_metadata
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as e:
        raise UsageError(f"--tensorboard needs the tensorboard package ({e}) {VENV_HINT}") from e
    return event_pb2, summary_pb2, tensor_pb2, types_pb2, hparams, scalar_metadata, EventFileWriter


class TensorBoardSink:
    name = "tensorboard"

    def __init__(self, logdir, metrics_path):
        (self.event_pb2, self.summary_pb2, self.tensor_pb2, self.types_pb2, self.hparams,
         scalar_metadata, self.Writer) = _import()
        # What the scalar plugin's scalar_pb writes with every value, made
        # once: its numpy path costs more than the rest of a record's work.
        self.scalar_metadata = scalar_metadata.create_summary_metadata(display_name=None, description=None)
        self.logdir = logdir
        try:
            os.makedirs(logdir, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--tensorboard: cannot create the folder '{logdir}' ({e.strerror})") from e
        if not os.access(logdir, os.W_OK | os.X_OK):
            raise UsageError(f"--tensorboard: cannot write in '{logdir}'")
        self.state = FollowState(os.path.join(logdir, STATE), metrics_path)
        self.writer = None
        self.run_dir = None  # this fsdptrain run's folder in logdir
        self._begin(replay_to=0, run_dir=None)

    def open(self, tail):
        """Called before the first record: what an earlier follower left."""
        saved = self.state.load(tail)
        if saved is None or saved[1].get("stale") or not saved[1].get("run_dir"):
            self._begin(replay_to=0, run_dir=None)
        else:  # go on: replay what was written, then drop what came after the save
            self._begin(replay_to=saved[0], run_dir=saved[1]["run_dir"])

    def new_file(self, tail):
        """The metrics file was started anew (a fresh run) while following:
        a new TensorBoard run."""
        self.close(tail)
        self._begin(replay_to=0, run_dir=None)

    def _begin(self, replay_to, run_dir):
        self.series = Series()
        self.offset = 0
        self.replay_to = replay_to
        self.run_dir = run_dir
        # A START to write before the next event: a new folder's first
        # (which readers skip), or one after the replay (feed).
        self.start_at = None if replay_to else 0
        self.hparams_written = None

    def feed(self, end, record):
        if end <= self.offset:
            return
        if end > self.replay_to and self.replay_to and self.start_at is None:
            self.start_at = self.series.last_step + 1  # just after what was saved
            self.replay_to = 0
        actions = self.series.add(record)
        if end <= self.replay_to:
            if actions and actions[0][0] == "run" and not actions[0][1].eval_only:
                self.hparams_written = flat_config(actions[0][1])
            self.offset = end
            return
        if self.start_at is not None:
            self._start(self.start_at)
            self.start_at = None
        for kind, a in actions:
            if kind == "run":
                self._hparams(a)
            elif kind == "restart":
                self._start(a)
            else:
                self._points(a)
        self.offset = end  # done: a record that failed is not saved as done

    def _write(self, event):
        if self.writer is None:
            if self.run_dir is None:
                self.run_dir = self._new_run_dir()
            # A queue deep enough for a late start's backlog (the default 10
            # makes the reader wait on the writing thread).
            self.writer = self.Writer(os.path.join(self.logdir, self.run_dir), max_queue_size=1024)
        self.writer.add_event(event)

    def _new_run_dir(self):
        """A fresh run's folder, named for the time it started (its first
        process's run record), as W&B and torchtitan name theirs."""
        start = self.series.run.start_unix_s if self.series.run else None
        name = time.strftime("%Y%m%d-%H%M%S", time.localtime(start or time.time()))
        taken = set(os.listdir(self.logdir))
        n, unique = 1, name
        while unique in taken:
            n += 1
            unique = f"{name}-{n}"
        return unique

    def _start(self, step):
        self._write(self.event_pb2.Event(
            step=step, wall_time=time.time(),
            session_log=self.event_pb2.SessionLog(status=self.event_pb2.SessionLog.START)))

    def _points(self, p):
        values = [self.summary_pb2.Summary.Value(
            tag=tag, metadata=self.scalar_metadata,
            tensor=self.tensor_pb2.TensorProto(dtype=self.types_pb2.DT_FLOAT, float_val=[v]))
            for tag, v in p.scalars.items()]
        if values:
            self._write(self.event_pb2.Event(step=p.step, wall_time=p.wall or time.time(),
                                             summary=self.summary_pb2.Summary(value=values)))

    def _hparams(self, run):
        """The options as the run's hyperparameters (TensorBoard's HParams
        tab), once a run and again when a resumed process was given others;
        --eval-only's options are not the run's."""
        if run.eval_only:
            return
        config = flat_config(run)
        if config == self.hparams_written:
            return
        hp = self.hparams
        wall = run.start_unix_s or time.time()
        if self.hparams_written is None:
            experiment = hp.hparams_config_pb(
                hparams=[hp.HParam(k) for k in config],
                metrics=[hp.Metric(t) for t in TAGS if t.startswith(("train/", VAL_TAG))])
            self._write(self.event_pb2.Event(step=run.start_step, wall_time=wall, summary=experiment))
        self._write(self.event_pb2.Event(step=run.start_step, wall_time=wall,
                                         summary=hp.hparams_pb(config, start_time_secs=wall)))
        self.hparams_written = config

    def flush(self, tail):
        if self.writer is not None:
            self.writer.flush()
        if self.offset > self.replay_to and self.run_dir is not None:
            self.state.save(tail, self.offset, {"run_dir": self.run_dir})

    def close(self, tail):
        self.flush(tail)
        if self.writer is not None:
            self.writer.close()
            self.writer = None
