"""Pieces of tools/prepare_data.py: input readers (inputs), tokenizers and
their decode tables (encoders), output files and the validation split
(shards), the parallel pipeline (pipeline).

Every token file of the `text` command holds /tokens and the decode table
/token_offsets (int64, vocab_size + 1) and /token_bytes (uint8): token id i
is the raw bytes token_bytes[token_offsets[i]:token_offsets[i + 1]]."""


class UsageError(Exception):
    """A problem the user can fix; printed as one `prepare_data: error:` line."""


def fail(msg):
    raise UsageError(msg)


# Where a missing package comes from: tools/setup.sh keeps them in the
# project's virtual environment, not in the system's Python.
VENV_HINT = "(tools/setup.sh installs it into .venv: run the tools with .venv/bin/python)"
