"""Pieces of tools/prepare_data.py: input readers (inputs), tokenizers
(encoders), output files and the validation split (shards), the parallel
pipeline (pipeline)."""


class UsageError(Exception):
    """A problem the user can fix; printed as one `prepare_data: error:` line."""


def fail(msg):
    raise UsageError(msg)
