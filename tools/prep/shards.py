"""Output: HDF5 token files written under .tmp names, the train shards, the
validation tail, and the manifest that makes a sharded run resumable.

Each token file holds /tokens and, beside it, the tokenizer's decode table
(encoders.decode_table): /token_offsets (int64, vocab_size + 1) and
/token_bytes (uint8), written into the same .tmp file before the rename.

A stream of tokens arrives as chunks (tokens, ends, first record): ends[i] is
the end offset in tokens of record first+i. Files and the validation split
are cut only at record ends (except --val-fraction's exact cut), so a resumed
run can start at a record.
"""

import json
import os

import numpy as np

from . import fail

# Elements per HDF5 chunk (and per write): what the trainer's reader expects.
CHUNK = 1 << 20


class H5File:
    """One token file, appended to and renamed into place when complete, so an
    interrupted run never leaves a file that looks finished."""

    def __init__(self, path, dtype, attrs, extra=None):
        """extra: {name: 1-D array}, more datasets beside /tokens (the decode table)."""
        self.path, self.dtype, self.attrs, self.extra = path, dtype, attrs, extra or {}
        self.pending, self.npending, self.f, self.size = [], 0, None, 0

    def append(self, tokens):
        if len(tokens):
            self.pending.append(tokens)
            self.npending += len(tokens)
            self.size += len(tokens)
            if self.npending >= CHUNK:
                self._flush()

    def _flush(self):
        import h5py

        if self.f is None:
            self.f = h5py.File(self.path + ".tmp", "w")
            self.dset = self.f.create_dataset("tokens", shape=(0,), maxshape=(None,),
                                              dtype=self.dtype, chunks=(CHUNK,))
        n = self.dset.shape[0]
        self.dset.resize((n + self.npending,))
        # Small pieces (text batches) joined into one write; a large one (an
        # import's chunk) written as it is, not copied first.
        pieces, small = [], []
        for piece in self.pending:
            if len(piece) >= CHUNK:
                pieces += [np.concatenate(small)] if small else []
                pieces.append(piece)
                small = []
            else:
                small.append(piece)
        pieces += [np.concatenate(small)] if small else []
        for data in pieces:
            self.dset[n:n + len(data)] = data
            n += len(data)
        self.pending, self.npending = [], 0

    def close(self):
        """Writes what is left, the attributes, and renames; returns the token count."""
        import h5py

        if self.f is None:
            # Small files get one chunk of their own size, as before streaming.
            data = (np.concatenate(self.pending) if self.pending
                    else np.empty(0, self.dtype))
            self.f = h5py.File(self.path + ".tmp", "w")
            self.dset = self.f.create_dataset("tokens", data=data.astype(self.dtype),
                                              chunks=(max(1, min(len(data), CHUNK)),))
        elif self.pending:
            self._flush()
        for k, v in self.attrs.items():
            if v is not None:
                self.dset.attrs[k] = np.int64(v) if isinstance(v, int) else v
        for name, data in self.extra.items():
            # Small (about 300 KB for GPT-2's table): contiguous, no filters, so
            # any HDF5 reader takes it in one read.
            self.f.create_dataset(name, data=data)
        self.f.close()
        os.replace(self.path + ".tmp", self.path)
        return self.size

    def abort(self):
        if self.f is not None:
            self.f.close()
        if os.path.exists(self.path + ".tmp"):
            os.remove(self.path + ".tmp")


class ValTail:
    """Holds back the end of the stream for the validation split.

    val_tokens: the smallest run of whole records at the end holding at least
    that many tokens (memory: about that many tokens). val_fraction: exactly
    the last round(fraction * total) tokens (memory: that fraction of all).
    """

    def __init__(self, val_tokens=None, val_fraction=0.0, seen=0):
        self.val_tokens, self.val_fraction = val_tokens, val_fraction
        self.chunks, self.held, self.seen = [], 0, seen

    def _target(self):
        if self.val_tokens is not None:
            return self.val_tokens
        return -(-self.seen * self.val_fraction // 1)  # ceil: never less than at the end

    def push(self, tokens, ends, first):
        """Adds a chunk; returns the chunks now sure to be training data."""
        self.chunks.append((tokens, ends, first))
        self.held += len(tokens)
        self.seen += len(tokens)
        out, target = [], self._target()
        while self.chunks:
            tokens, ends, first = self.chunks[0]
            if self.held - len(tokens) >= target:
                out.append(self.chunks.pop(0))
                self.held -= len(tokens)
                continue
            # Release the records whose end leaves at least target tokens held.
            k = int(np.searchsorted(ends, self.held - target, side="right"))
            if k and ends[k - 1] > 0:
                cut = int(ends[k - 1])
                out.append((tokens[:cut], ends[:k], first))
                self.chunks[0] = (tokens[cut:], ends[k:] - cut, first + k)
                self.held -= cut
            break
        return out

    def finish(self):
        """(training chunk or None, validation tokens)."""
        held = (np.concatenate([c[0] for c in self.chunks]) if self.chunks
                else np.empty(0, np.uint16))
        if self.val_tokens is not None:
            n_val = len(held) if self.val_tokens else 0
        else:
            n_val = int(round(self.seen * self.val_fraction))
        rest = held[:len(held) - n_val]
        # No record ends: the last shard takes all of it rather than close at a
        # place that would not be a record boundary.
        train = (rest, np.empty(0, np.int64), -1) if len(rest) else None
        return train, held[len(held) - n_val:]


class Train:
    """The training files: one PREFIX_train.h5, or shards of about shard_tokens
    tokens, each closed at the first record end at or past that size."""

    def __init__(self, prefix, dtype, attrs, shard_tokens=None, done=(), on_close=None,
                 extra=None):
        self.prefix, self.dtype, self.attrs, self.extra = prefix, dtype, attrs, extra
        self.shard_tokens, self.on_close = shard_tokens, on_close
        self.index, self.file = len(done), None
        self.tokens = sum(s["tokens"] for s in done)

    def name(self, i):
        if self.shard_tokens is None:
            return self.prefix + "_train.h5"
        return f"{self.prefix}_train_{i:06d}.h5"

    def push(self, tokens, ends, first):
        while len(tokens):
            if self.file is None:
                self.file = H5File(self.name(self.index), self.dtype, self.attrs, self.extra)
            if self.shard_tokens is None:
                self.file.append(tokens)
                return
            k = int(np.searchsorted(ends, self.shard_tokens - self.file.size, side="left"))
            if k >= len(ends):
                self.file.append(tokens)
                return
            cut = int(ends[k])
            self.file.append(tokens[:cut])
            self._close(first + k + 1)
            tokens, ends, first = tokens[cut:], ends[k + 1:] - cut, first + k + 1

    def _close(self, records_end):
        n = self.file.close()
        self.tokens += n
        if self.on_close:
            self.on_close({"file": os.path.basename(self.file.path), "tokens": n,
                           "records_end": records_end})
        print(f"prepare_data: wrote {self.file.path}: {n} tokens", flush=True)
        self.file, self.index = None, self.index + 1

    def finish(self, records_end):
        if self.file is not None and self.file.size:
            self._close(records_end)

    def abort(self):
        if self.file is not None:
            self.file.abort()


class Manifest:
    """PREFIX_manifest.json: the settings and the shards known complete.

    It is rewritten (under a .tmp name, then renamed) after each shard is
    renamed into place, so a shard counts as complete exactly when it is listed
    here; a shard file present but not listed is from an interrupted run and
    is written again.
    """

    def __init__(self, prefix, config):
        self.path = prefix + "_manifest.json"
        self.prefix, self.config = prefix, config
        self.data = {"version": 1, "config": config, "shards": [], "val": None, "done": False}

    def shard_files(self):
        d, base = os.path.split(self.prefix)
        stem = base + "_train_"
        names = [n for n in os.listdir(d or ".") if n.startswith(stem)
                 and (n.endswith(".h5") or n.endswith(".h5.tmp"))
                 and n[len(stem):].split(".")[0].isdigit()]
        return sorted(os.path.join(d, n) for n in names)

    def start(self, resume):
        """The shards already complete (when resuming)."""
        existing = self.shard_files()
        if not resume:
            if os.path.exists(self.path) or [p for p in existing if p.endswith(".h5")]:
                fail(f"--out {self.prefix}: {os.path.basename(self.path)} or shards exist from "
                     f"an earlier run; pass --resume to continue it, or remove them")
            for p in existing:
                os.remove(p)
            self.save()
            return []
        if not os.path.exists(self.path):
            if [p for p in existing if p.endswith(".h5")]:
                fail(f"--resume: shards of {self.prefix} exist but no "
                     f"{os.path.basename(self.path)}; remove them and start again")
            self.save()
            return []
        try:
            with open(self.path) as f:
                old = json.load(f)
            old_config, shards = old["config"], old["shards"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail(f"--resume: cannot read {self.path} ({e}); remove the outputs and start again")
        changed = sorted(k for k in set(old_config) | set(self.config)
                         if old_config.get(k) != self.config.get(k))
        if changed:
            fail(f"--resume: {self.path} was written with other settings ({', '.join(changed)} "
                 f"differ); use the same inputs and flags, or remove the outputs")
        self.data = old
        if old.get("done"):
            return shards
        import h5py

        d = os.path.dirname(self.prefix)
        for s in shards:
            p = os.path.join(d, s["file"])
            try:
                with h5py.File(p, "r") as f:
                    n = f["tokens"].shape[0]
            except (OSError, KeyError):
                n = None
            if n != s["tokens"]:
                fail(f"--resume: {p} is listed as complete with {s['tokens']} tokens but "
                     f"{'is missing or unreadable' if n is None else f'has {n}'}; "
                     f"remove the outputs and start again")
        listed = {os.path.join(d, s["file"]) for s in shards}
        for p in existing:
            if p not in listed:
                os.remove(p)
        # A copy: add() appends this run's shards to self.data's list, and the
        # caller counts what was there before from this one.
        return list(shards)

    def add(self, shard):
        self.data["shards"].append(shard)
        self.save()

    def save(self, **fields):
        self.data.update(fields)
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(self.data, f, indent=1)
            os.replace(tmp, self.path)
        except BaseException:  # a Ctrl-C mid-write too: the old manifest stands, no .tmp left
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
