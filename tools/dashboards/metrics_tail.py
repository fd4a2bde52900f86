"""Reading a --metrics file while fsdptrain appends to it.

fsdptrain writes whole lines and flushes each (src/trainer/metrics.cpp), so
a line without its newline is one being written: it is read at the next
poll. A resumed run appends; a fresh run empties the file at its first line
and starts it anew, which a follower must notice even when it was not
running at the time: the file is then shorter than what was read, or its
first line (the run record, with its start time) or the last line read is
not what it was.
"""

import hashlib
import json
import os
import sys


def digest(line):
    return hashlib.sha256(line).hexdigest()[:32]


class MetricsTail:
    def __init__(self, path, prog):
        self.path = path
        self.prog = prog
        self.warned = set()

    def exists(self):
        return os.path.isfile(self.path)

    def size(self):
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def line_ending_at(self, offset):
        """The line (with its newline) that ends at byte offset, or None."""
        if offset <= 0:
            return None
        with open(self.path, "rb") as f:
            start = max(0, offset - (1 << 20))
            f.seek(start)
            chunk = f.read(offset - start)
        if not chunk.endswith(b"\n"):
            return None
        cut = chunk.rfind(b"\n", 0, len(chunk) - 1)
        return chunk[cut + 1:] if cut >= 0 or start == 0 else None

    def head(self):
        """Digest of the first complete line, or None."""
        try:
            with open(self.path, "rb") as f:
                line = f.readline(1 << 20)
        except OSError:
            return None
        return digest(line) if line.endswith(b"\n") else None

    def position(self, offset):
        """What identifies the file read up to offset: (head, last line's digest)."""
        line = self.line_ending_at(offset)
        return self.head(), digest(line) if line is not None else None

    def still_same(self, offset, position):
        """Whether the file is the one that was read up to offset (not
        started anew since)."""
        if offset == 0:
            return True
        if self.size() < offset:
            return False
        return self.position(offset) == tuple(position)

    def records(self, offset):
        """(end offset, record) for each complete line after offset; a line
        that is not a JSON object is skipped with one warning."""
        try:
            f = open(self.path, "rb")
        except OSError:
            return
        with f:
            f.seek(offset)
            data = f.read()
        end = offset
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            end += len(line)
            text = line.strip()
            if not text:
                continue
            try:
                r = json.loads(text)
            except ValueError:
                r = None
            if not isinstance(r, dict):
                if end not in self.warned:
                    self.warned.add(end)
                    print(f"{self.prog}: warning: {self.path}: the line ending at byte {end} is not a "
                          "JSON object; skipped", file=sys.stderr)
                continue
            yield end, r


class FollowState:
    """Where a dashboard is in the metrics file, kept in a small JSON file
    of the dashboard's own (written whole, then renamed over the old one),
    so that a follower started again (a requeued job) goes on from there.

    offset: bytes of the metrics file done; position: MetricsTail.position
    there; extra: what the dashboard keeps besides (W&B's run id)."""

    def __init__(self, path, metrics_path):
        self.path = path
        self.metrics = os.path.abspath(metrics_path)

    def load(self, tail):
        """The saved (offset, extra) when it is this metrics file's and the
        file was not started anew since; otherwise (0, extra) with "stale"
        set, or None when there is no state."""
        try:
            with open(self.path) as f:
                s = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise OSError(f"cannot read {self.path} ({e}); delete it to start this dashboard anew") from e
        extra = s.get("extra", {})
        offset = s.get("offset", 0)
        same = (s.get("metrics") == self.metrics and isinstance(offset, int)
                and tail.still_same(offset, s.get("position") or (None, None)))
        return (offset, extra) if same else (0, dict(extra, stale=True))

    def save(self, tail, offset, extra):
        s = {"metrics": self.metrics, "offset": offset, "position": list(tail.position(offset)),
             "extra": extra}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(s, f)
            f.write("\n")
        os.replace(tmp, self.path)
