"""Pieces of tools/follow_metrics.py: reading a growing --metrics file
(metrics_tail), what its records become on a dashboard and which earlier
points a restarted process replaces (series), and the two dashboards
(tensorboard_sink, wandb_sink)."""


class UsageError(Exception):
    """A problem the user can fix; printed as one `follow_metrics: error:` line."""


# Where a missing package comes from: tools/setup.sh keeps them in the
# project's virtual environment, not in the system's Python.
VENV_HINT = "(tools/setup.sh installs it into .venv: run the tool with .venv/bin/python)"
