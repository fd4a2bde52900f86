#!/usr/bin/env python3
"""Fuzz test of the program's untrusted inputs (issue 9): mutated copies of a
real checkpoint and of a real token file.

A short run on the built-in example's validation file writes a checkpoint.
Seeded mutants of it (bytes flipped where HDF5 keeps its metadata or
anywhere, truncated, extended, zeroed ranges, attributes changed, retyped or
deleted, datasets retyped, reshaped, deleted, added or edited, checksums
edited or removed) are resumed with --resume MUT; mutants of the token file
(the same byte damage, vocab_size/eos_id/tokenizer attributes, dtypes,
shapes, filters, links, tokens out of range) are trained on as --train-data
or validated on as --val-data. Every run must either
- exit 0, and then an independent reading of the mutant with h5py must show
  that what was accepted is sound: a checkpoint's tensors bitwise equal to
  the original's, its step, counters and sampler state in range and
  consistent, its /model attributes those of the running model; a token
  file 1-D, uint16/uint32, every token below its vocab_size, that vocab_size
  within the model's (and equal to the training data's for --val-data); or
- exit with a code in 1..127 (not a signal) and write exactly one line
  `fsdptrain: error: ...` naming the file (plus any `fsdptrain: warning:`
  lines) on stderr: no crash, no HDF5 error stack, no `internal check
  failed`, no second error line;
and never outlive its per-run time limit.

usage: fuzz_test.py FSDPTRAIN EXAMPLE_DIR WORK_DIR
env:   FSDP_FUZZ_SEED (default 9), FSDP_FUZZ_CHECKPOINTS (150), FSDP_FUZZ_DATA
       (150), FSDP_FUZZ_JOBS (parallel runs, 4), FSDP_FUZZ_RUN_TIMEOUT_S (60).
Failing mutants stay in WORK_DIR with a .txt naming their mutations and the
command that reproduces the failure."""
import concurrent.futures
import os
import random
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

exe, example, work = sys.argv[1:4]
SEED = int(os.environ.get("FSDP_FUZZ_SEED", "9"))
N_CKPT = int(os.environ.get("FSDP_FUZZ_CHECKPOINTS", "150"))
N_DATA = int(os.environ.get("FSDP_FUZZ_DATA", "150"))
JOBS = int(os.environ.get("FSDP_FUZZ_JOBS", "4"))
RUN_TIMEOUT_S = float(os.environ.get("FSDP_FUZZ_RUN_TIMEOUT_S", "60"))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

DATA = os.path.join(example, "kjv_val.h5")  # a real token file, small enough to copy 150 times
SEQ_LEN = 16
MODEL = ["--device", "cpu", "--model", "tiny", "--n-layer", "1", "--d-model", "32", "--n-head",
         "2", "--n-kv-head", "1", "--d-ff", "64", "--seq-len", str(SEQ_LEN), "--batch-size", "2",
         "--log-every", "1"]
BASE_STEP, RESUME_STEPS = 2, 3
# /model attributes that define the weights' meaning: a checkpoint that says
# otherwise than the running model must not load into it. name, init_std and
# max_seq_len do not change what the saved weights compute.
MUST_MATCH = ["vocab_size", "n_layer", "d_model", "n_head", "n_kv_head", "d_ff", "rope_theta",
              "norm_eps", "tie_embeddings"]
INT_ATTRS = ["format_version", "step", "tokens_seen", "optimizer_steps", "seed", "world_size",
             "shard_group_size"]


def interesting_int(rng, base):
    return rng.choice([-1, 0, 1, 2, 3, base - 1, base + 1, 2 * base + 7, 255, 256, 257, 65535,
                       2**31 - 1, 2**31, 2**40, 2**63 - 1, -2**63, rng.randrange(-10**6, 10**6)])


def interesting_float(rng, base):
    return rng.choice([float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1e-30, 1e30,
                       base * 2, base / 2, np.nextafter(np.float32(base), np.float32(np.inf))])


# ---- byte-level damage, shared by both file kinds ----

def data_ranges(path):
    """(offset, size) of every dataset's raw data: the rest of the file is
    HDF5's own metadata (superblock, headers, B-trees, heaps, attributes)."""
    ranges = []
    with h5py.File(path, "r") as f:
        def visit(_, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            off = obj.id.get_offset()
            if off is not None:
                ranges.append((off, obj.id.get_storage_size()))
                return
            for i in range(obj.id.get_num_chunks()):
                c = obj.id.get_chunk_info(i)
                ranges.append((c.byte_offset, c.size))
        f.visititems(visit)
    return sorted(ranges)


def pick_offset(rng, size, ranges, where):
    """A random byte offset: in HDF5's metadata, in the raw data, or anywhere."""
    for _ in range(1000):
        off = rng.randrange(size)
        inside = any(a <= off < a + n for a, n in ranges)
        if where == "anywhere" or (where == "data") == inside:
            return off
    return rng.randrange(size)


def flip_bytes(rng, path, ranges, where):
    raw = bytearray(open(path, "rb").read())
    done = []
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        off = pick_offset(rng, len(raw), ranges, where)
        mask = rng.randrange(1, 256)
        raw[off] ^= mask
        done.append(f"{off:#x}^={mask:#04x}")
    open(path, "wb").write(raw)
    return f"flip {where} bytes " + ",".join(done)


def zero_range(rng, path, ranges):
    raw = bytearray(open(path, "rb").read())
    off = pick_offset(rng, len(raw), ranges, "meta")
    n = min(rng.choice([8, 64, 512, 4096]), len(raw) - off)
    raw[off:off + n] = bytes(n)
    open(path, "wb").write(raw)
    return f"zero bytes [{off:#x}, {off + n:#x})"


def truncate(rng, path):
    n = rng.randrange(os.path.getsize(path))
    os.truncate(path, n)
    return f"truncate to {n} bytes"


def extend(rng, path):
    n = rng.choice([1, 17, 4096])
    with open(path, "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(n)))
    return f"append {n} random bytes"


def byte_damage(rng, path, ranges):
    kind = rng.choices(["meta", "anywhere", "data", "zero", "truncate", "extend"],
                       [5, 2, 2, 2, 2, 1])[0]
    if kind == "zero":
        return zero_range(rng, path, ranges)
    if kind == "truncate":
        return truncate(rng, path)
    if kind == "extend":
        return extend(rng, path)
    return flip_bytes(rng, path, ranges, kind)


def set_attr(obj, name, value, kind):
    """Writes `value` as the attribute `name`: `same` keeps its stored type."""
    if kind == "same" and name in obj.attrs:
        obj.attrs.modify(name, value)
    elif kind == "f64":
        obj.attrs.create(name, np.float64(value))
    elif kind == "str":
        obj.attrs.create(name, str(value))
    elif kind == "array":
        obj.attrs.create(name, np.full(random.Random(value).choice([2, 64]), value, np.int64))
    elif kind == "u64":
        obj.attrs.create(name, np.uint64(value % 2**64))
    else:
        obj.attrs.create(name, value)


def fixed_string(text):
    """`text` as the fixed-length string type the program writes (h5py's
    default for str is variable-length, which a loader may refuse by type)."""
    raw = text.encode("utf-8", "surrogateescape")
    return np.array(raw, dtype=f"S{max(len(raw), 1)}")


def as_int(value):
    """The attribute as an exact integer, or None (arrays, strings, 64.5)."""
    v = np.asarray(value)
    if v.shape != () or v.dtype.kind not in "iuf":
        return None
    if v.dtype.kind == "f" and not (np.isfinite(v) and float(v).is_integer()):
        return None
    return int(v)


def retype_dataset(parent, name, dtype, shape=None, **create):
    old = parent[name]
    values = old[()]
    attrs = dict(old.attrs)
    del parent[name]
    values = values.astype(dtype) if dtype is not None else values
    new = parent.create_dataset(name, data=values.reshape(shape) if shape else values, **create)
    for k, v in attrs.items():
        new.attrs[k] = v


# ---- checkpoint mutations ----

def tensor_names(f):
    out = []
    f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(out)


def mutate_checkpoint_attrs(rng, f):
    target = rng.choice(["root", "root", "model", "sampler", "config", "checksums", "delete"])
    if target == "root":
        name = rng.choice(INT_ATTRS)
        kind = rng.choices(["same", "f64", "str", "array", "u64"], [8, 2, 1, 1, 1])[0]
        base = int(f.attrs[name])
        value = base + rng.choice([0.5, 0]) if kind == "f64" else interesting_int(rng, base)
        set_attr(f, name, value, kind)
        return f"attr /{name} = {value!r} ({kind})"
    if target == "model":
        g = f["model"]
        name = rng.choice(list(g.attrs))
        old = g.attrs[name]
        if isinstance(old, (str, bytes)):
            value = rng.choice(["", "gpt-350m", "x" * 300, "\u00e9\u4e2d"])
            g.attrs.create(name, fixed_string(value))
        elif np.issubdtype(np.asarray(old).dtype, np.floating):
            value = interesting_float(rng, float(old))
            g.attrs.modify(name, value)
        else:
            value = interesting_int(rng, int(old))
            set_attr(g, name, value, rng.choice(["same", "same", "str"]))
        return f"attr /model {name} = {value!r}"
    if target == "sampler":
        g = f["sampler"]
        if rng.random() < 0.2:
            g.attrs["extra"] = np.int64(5)
            return "attr /sampler extra = 5 (added)"
        name = rng.choice(list(g.attrs))
        value = interesting_int(rng, int(g.attrs[name]))
        set_attr(g, name, value, "same")
        return f"attr /sampler {name} = {value!r}"
    if target == "config":
        text = f.attrs["config"]
        text = text.decode() if isinstance(text, bytes) else str(text)
        choice = rng.choice(["empty", "cut", "garbage", "binary"])
        value = {"empty": "", "cut": text[:rng.randrange(len(text) + 1)],
                 "garbage": "steps = banana\n[x\n=\n", "binary": "\x01\xff\x00abc"}[choice]
        f.attrs.create("config", fixed_string(value))
        return f"attr /config = {choice} text"
    if target == "checksums":
        sums = np.array(f.attrs["tensor_checksums"])
        choice = rng.choice(["edit", "drop", "add", "int32", "delete"])
        if choice == "delete":
            del f.attrs["tensor_checksums"]
        elif choice == "edit":
            i = rng.randrange(len(sums))
            sums[i] ^= np.uint64(1 << rng.randrange(64))
            f.attrs.modify("tensor_checksums", sums)
        elif choice == "drop":
            f.attrs.create("tensor_checksums", sums[:-1])
        elif choice == "add":
            f.attrs.create("tensor_checksums", np.append(sums, sums[:1]))
        else:
            f.attrs.create("tensor_checksums", sums.astype(np.int32))
        return f"tensor_checksums {choice}"
    holder = rng.choice([f, f["model"], f["sampler"]])
    name = rng.choice(list(holder.attrs))
    del holder.attrs[name]
    return f"delete attr {holder.name}:{name}"


def mutate_checkpoint_dataset(rng, f):
    names = [n for n in tensor_names(f) if n.startswith(("model/", "optim/"))]
    name = rng.choice(names)
    parent, leaf = f[os.path.dirname(name)], os.path.basename(name)
    d = f[name]
    choice = rng.choice(["value", "value", "nan", "negzero", "float64", "float16", "int32",
                         "reshape", "delete", "extra", "gzip", "no-checksum-value"])
    if choice in ("value", "nan", "negzero", "no-checksum-value"):
        idx = tuple(rng.randrange(n) for n in d.shape)
        v = d[idx]
        d[idx] = {"value": v + np.float32(rng.choice([1.0, 1e-3])), "nan": np.nan,
                  "negzero": -v if v == 0 else np.nextafter(v, np.float32(np.inf)),
                  "no-checksum-value": v + np.float32(0.5)}[choice]
        if choice == "no-checksum-value":
            # Bit rot plus the loss of the checksum attribute: nothing in
            # the file can show the tensor changed any more.
            del f.attrs["tensor_checksums"]
        return f"{name}{list(idx)} {choice}"
    if choice in ("float64", "float16", "int32"):
        retype_dataset(parent, leaf, np.dtype(choice))
    elif choice == "reshape":
        retype_dataset(parent, leaf, None, shape=(d.size,) if d.ndim > 1 else (1, d.size))
    elif choice == "delete":
        del parent[leaf]
    elif choice == "extra":
        parent.create_dataset("extra_tensor", data=np.zeros(4, np.float32))
        name = parent.name + "/extra_tensor"
    elif choice == "gzip":
        # Same values, other storage: a valid file a loader may read or refuse.
        retype_dataset(parent, leaf, None, chunks=True, compression="gzip")
    return f"{name} {choice}"


def mutate(rng, path, ranges, counts, weights, attrs, dataset):
    """1 to max(counts) mutations, each of bytes, attributes or a dataset
    (weighted); bytes only after a truncation, which h5py cannot open."""
    done = []
    for _ in range(rng.choice(counts)):
        kind = rng.choices(["bytes", "attrs", "dataset"], weights)[0]
        if kind == "bytes" or done and done[-1].startswith("truncate"):
            done.append(byte_damage(rng, path, ranges))
            continue
        try:
            with h5py.File(path, "r+") as f:
                done.append((attrs if kind == "attrs" else dataset)(rng, f))
        except Exception as e:  # an earlier byte mutation made it unopenable
            done.append(f"(h5py could not apply a {kind} mutation: {type(e).__name__})")
    return done


def mutate_checkpoint(rng, path, ranges):
    return mutate(rng, path, ranges, [1, 1, 1, 2, 3], [4, 5, 3], mutate_checkpoint_attrs,
                  mutate_checkpoint_dataset)


def edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


def array_attr(holder, name, n=64):
    holder.attrs.create(name, np.full(n, np.asarray(holder.attrs[name]).item()))


def forge_without_checksum(f):
    f["model/blocks.0.attn.wq"][0, 0] += np.float32(0.5)
    del f.attrs["tensor_checksums"]


# Fixed cases run on every seed: each is a class of input the random
# mutations reach only now and then.
TARGETED_CHECKPOINT = [
    ("/step as an array of 64", lambda f: array_attr(f, "step")),
    ("/model n_layer as an array of 64", lambda f: array_attr(f["model"], "n_layer")),
    ("/sampler seed as an array of 64", lambda f: array_attr(f["sampler"], "seed")),
    ("/model rope_theta as an array of 64", lambda f: array_attr(f["model"], "rope_theta")),
    ("tensor changed and tensor_checksums deleted", forge_without_checksum),
    ("/model n_head = 4 (same shapes, another model)",
     lambda f: f["model"].attrs.modify("n_head", 4)),
    ("/model rope_theta = 500000", lambda f: f["model"].attrs.modify("rope_theta", 5e5)),
    ("/step = -1", lambda f: f.attrs.modify("step", -1)),
    ("/sampler step = 3 (the file is at step 2)",
     lambda f: f["sampler"].attrs.modify("step", 3)),
    ("/optimizer_steps = 1000", lambda f: f.attrs.modify("optimizer_steps", 1000)),
    ("/tokens_seen = 64.5 as float64", lambda f: f.attrs.create("tokens_seen", 64.5)),
    ("/sampler consumed = -1", lambda f: f["sampler"].attrs.modify("consumed", -1)),
    ("/config as a variable-length string", lambda f: f.attrs.create(
        "config", np.asarray(f.attrs["config"]).item().decode(), dtype=h5py.string_dtype())),
    ("/optimizer = muon (another optimizer's state)",
     lambda f: f.attrs.create("optimizer", fixed_string("muon"))),
    ("/optimizer = garbage", lambda f: f.attrs.create("optimizer", fixed_string("sgd+x"))),
    ("/optimizer deleted", lambda f: f.attrs.__delitem__("optimizer")),
]


def lzf_then(f):
    retype_dataset(f, "tokens", None, compression="lzf")


def fletcher32_flip(path):
    edit(path, lambda f: retype_dataset(f, "tokens", None, fletcher32=True, chunks=(4096,)))
    off, _ = data_ranges(path)[3]
    raw = bytearray(open(path, "rb").read())
    raw[off + 10] ^= 0x01  # a low byte: the token stays < 256, only the checksum can tell
    open(path, "wb").write(raw)


def heap_index_flip(path):
    """Every variable-length string's reference into the global heap names
    an object far past the heap's (0x94 in the index's high byte): HDF5
    1.10 read out of bounds for it inside H5Aread (a segfault), found by
    seed 9's data_0155 in text_encoder."""
    raw = bytearray(open(path, "rb").read())
    heap = raw.find(b"GCOL")
    assert heap > 0, "the token file has no global heap to damage"
    at, flipped = 0, 0
    while (at := raw.find(heap.to_bytes(8, "little"), at + 1)) > 0:
        if 0 < int.from_bytes(raw[at + 8:at + 12], "little") < 256:  # a reference: length, address, index
            raw[at + 11] = 0x94
            flipped += 1
    assert flipped, "no heap reference found"
    open(path, "wb").write(raw)


TARGETED_DATA = [
    ("every string's heap index past the heap's objects", heap_index_flip),
    ("vocab_size as an array of 64", lambda p: edit(p, lambda f: array_attr(f["tokens"],
                                                                        "vocab_size"))),
    ("tokens compressed with h5py's lzf filter", lambda p: edit(p, lzf_then)),
    ("fletcher32 chunks, one data byte flipped", fletcher32_flip),
    ("vocab_size = 300 (the model has 256)",
     lambda p: edit(p, lambda f: f["tokens"].attrs.modify("vocab_size", 300))),
    ("vocab_size = 200 (the training data has 256)",
     lambda p: edit(p, lambda f: f["tokens"].attrs.modify("vocab_size", 200))),
]


def h5_open(path, original):
    """h5py.File(path) for judging a mutant of `original`. HDF5 1.10, which
    fsdptrain reads with, ignores the superblock's file-consistency flags;
    h5py's HDF5 (1.14 on) refuses a file with unknown bits in them. A mutant
    whose flags were flipped is judged on its other bytes: a copy with the
    original's flags (bytes 20-23 of a version 0/1 superblock, byte 11 of a
    version 2/3 one)."""
    try:
        return h5py.File(path, "r")
    except OSError as e:
        if "superblock status flags" not in str(e):
            raise
    data, orig = bytearray(open(path, "rb").read()), open(original, "rb").read()
    flags = slice(20, 24) if orig[8] < 2 else slice(11, 12)
    data[flags] = orig[flags]
    copy = path + ".flags_restored.h5"
    open(copy, "wb").write(data)
    return h5py.File(copy, "r")


def read_all(path, names=None, original=None):
    """The tensors `names` (default: every one) and the names listed in the
    tensor groups. Only what a loader must read is read: an object no loader
    needs (a damaged modification-time message, say) may be broken."""
    with (h5_open(path, original) if original else h5py.File(path, "r")) as f:
        if names is None:
            names = [n for n in tensor_names(f) if n.startswith(("model/", "optim/"))]
        listed = {f"{g}/{k}" for g in ("model", "optim/exp_avg", "optim/exp_avg_sq")
                  for k in f[g].keys()}
        tensors = {}
        for n in names:
            try:
                tensors[n] = f[n][()]
            except (KeyError, OSError, RuntimeError) as e:
                tensors[n] = e
        return tensors, listed


def checkpoint_violations(path, original, base, base_tensors, base_sums, resumed_step):
    """What a loader that accepted `path` (a mutant of `original`) must not have accepted."""
    bad = []
    try:
        with h5_open(path, original) as f:
            a = {k: f.attrs[k] for k in f.attrs}
            ints = {}
            for k in INT_ATTRS:
                ints[k] = as_int(a.get(k))
                if ints[k] is None:
                    bad.append(f"/{k} is {a.get(k)!r}, not one integer")
                    del ints[k]
            if ints.get("format_version", 1) not in (1, 2):
                bad.append(f"format_version {ints['format_version']}")
            # Version 2 names what optim/ holds; this AdamW run must load only AdamW's.
            opt = a.get("optimizer")
            opt = opt.decode() if isinstance(opt, bytes) else opt
            if ints.get("format_version") == 2 and opt != "adamw":
                bad.append(f"optimizer {opt!r} loaded into an AdamW run")
            step = ints.get("step")
            if step is not None and step != resumed_step:
                bad.append(f"resumed at step {resumed_step} but the file says {step}")
            if step is not None and step < 0:
                bad.append(f"negative step {step}")
            if ints.get("tokens_seen", 0) < 0:
                bad.append(f"negative tokens_seen {ints['tokens_seen']}")
            if step is not None and not 0 <= ints.get("optimizer_steps", 0) <= step:
                bad.append(f"optimizer_steps {ints['optimizer_steps']} outside [0, step {step}]")
            ws, sg = ints.get("world_size", 1), ints.get("shard_group_size", 1)
            if ws < 1 or not 1 <= sg <= ws:
                bad.append(f"world_size {ws} / shard_group_size {sg} out of range")
            s = {k: as_int(f["sampler"].attrs[k]) for k in f["sampler"].attrs}
            if s.get("step") != step:
                bad.append(f"sampler step {s.get('step')} != step {step}")
            if s.get("consumed") is None or s["consumed"] < 0:
                bad.append(f"sampler consumed {s.get('consumed')} is not a count")
            for k in MUST_MATCH:
                got, want = f["model"].attrs.get(k), base[k]
                if got is None or not np.array_equal(np.asarray(got), np.asarray(want)):
                    bad.append(f"/model {k} = {got!r} but the running model has {want!r}")
            stored = f.attrs.get("tensor_checksums")
            sums_intact = stored is not None and np.array_equal(stored, base_sums)
        tensors, listed = read_all(path, list(base_tensors), original)
    except Exception as e:
        return bad + [f"h5py cannot read it ({type(e).__name__}: {e})"]
    if listed != base_tensors.keys():
        bad.append(f"tensor set differs: {sorted(listed ^ base_tensors.keys())}")
    for n in tensors.keys() & base_tensors.keys():
        t, b = tensors[n], base_tensors[n]
        if isinstance(t, Exception):
            # h5py's newer HDF5 refuses some damage the program's 1.10 reads
            # past; then the program's own check against checksums equal to
            # the original's is what proves the tensor intact.
            if not sums_intact:
                bad.append(f"tensor {n} is unreadable to h5py ({t}) and not covered by the "
                           "original checksums")
            continue
        same = (t.shape == b.shape and t.dtype.kind == "f" and
                np.array_equal(t.astype(np.float32).view(np.uint32), b.view(np.uint32)))
        if not same:
            bad.append(f"tensor {n} differs from the saved one ({t.dtype}{list(t.shape)})")
    return bad


# ---- token-file mutations ----

def mutate_data_attrs(rng, f):
    d = f["tokens"]
    choice = rng.choice(["vocab", "vocab", "vocab", "eos", "tokenizer", "move", "delete", "both"])
    if choice == "vocab":
        value = rng.choice([0, -1, 1, 200, 255, 256, 257, 65536, 2**31, 2**40, 2**63 - 1])
        kind = rng.choices(["same", "f64", "str", "array", "u64"], [6, 2, 1, 1, 1])[0]
        value = value + 0.5 if kind == "f64" and rng.random() < 0.5 else value
        set_attr(d, "vocab_size", value, kind)
        return f"tokens.attrs vocab_size = {value!r} ({kind})"
    if choice == "eos":
        value = rng.choice([-1, 0, 10, 255, 256, 2**40])
        set_attr(d, "eos_id", value, rng.choice(["new", "str"]))
        return f"tokens.attrs eos_id = {value!r}"
    if choice == "tokenizer":
        value = rng.choice(["", "bpe", "\x00\xff", 7])
        d.attrs["tokenizer"] = value
        return f"tokens.attrs tokenizer = {value!r}"
    if choice == "move":
        f.attrs["vocab_size"] = d.attrs["vocab_size"]
        del d.attrs["vocab_size"]
        return "vocab_size moved to the root group"
    if choice == "delete":
        del d.attrs["vocab_size"]
        return "vocab_size deleted"
    f.attrs["vocab_size"] = np.int64(100)
    return "root vocab_size = 100 besides the dataset's 256"


def mutate_data_dataset(rng, f):
    choice = rng.choice(["uint8", "int16", "int32", "int64", "uint32", "uint64", "float32",
                         "2d", "empty", "short", "exact", "gzip", "lzf", "fletcher32",
                         "token", "token", "rename", "group", "dangling", "contiguous"])
    n = f["tokens"].shape[0]
    if choice in ("uint8", "int16", "int32", "int64", "uint32", "uint64", "float32"):
        retype_dataset(f, "tokens", np.dtype(choice))
    elif choice == "2d":
        retype_dataset(f, "tokens", None, shape=(2, n // 2) if n % 2 == 0 else (1, n))
    elif choice in ("empty", "short", "exact"):
        keep = {"empty": 0, "short": SEQ_LEN, "exact": SEQ_LEN + 1}[choice]
        values, attrs = f["tokens"][:keep], dict(f["tokens"].attrs)
        del f["tokens"]
        d = f.create_dataset("tokens", data=values, maxshape=(None,), chunks=(64,))
        d.attrs.update(attrs)
    elif choice in ("gzip", "lzf", "fletcher32", "contiguous"):
        # lzf is h5py's own filter: the program's HDF5 cannot decode it.
        create = {"gzip": dict(compression="gzip"), "lzf": dict(compression="lzf"),
                  "fletcher32": dict(fletcher32=True, chunks=(4096,)),
                  "contiguous": {}}[choice]
        retype_dataset(f, "tokens", None, **create)
    elif choice == "token":
        i = rng.randrange(n)
        value = rng.choice([0, 255, 256, 65535])
        f["tokens"][i] = value
        return f"tokens[{i}] = {value}"
    elif choice == "rename":
        f.move("tokens", "ids")
    elif choice == "group":
        del f["tokens"]
        f.create_group("tokens")
    elif choice == "dangling":
        del f["tokens"]
        f["tokens"] = h5py.SoftLink("/nowhere")
    return f"tokens {choice}"


def mutate_data(rng, path, ranges):
    return mutate(rng, path, ranges, [1, 1, 1, 2], [5, 4, 3], mutate_data_attrs,
                  mutate_data_dataset)


def data_violations(path, as_val):
    bad = []
    try:
        with h5_open(path, DATA) as f:
            d = f.get("tokens")
            if not isinstance(d, h5py.Dataset):
                return [f"/tokens is {d!r}, not a dataset"]
            if d.ndim != 1 or d.dtype not in (np.uint16, np.uint32):
                bad.append(f"/tokens is {d.dtype}{list(d.shape)}, not 1-D uint16/uint32")
            vocab = d.attrs.get("vocab_size", f.attrs.get("vocab_size"))
            if as_int(vocab) is None:
                return bad + [f"vocab_size is {vocab!r}, not one integer"]
            vocab = as_int(vocab)
            if not 1 <= vocab <= 256:
                bad.append(f"vocab_size {vocab} outside [1, the model's 256]")
            if as_val and vocab != 256:
                bad.append(f"--val-data vocab_size {vocab} != the training data's 256")
            eos = as_int(d.attrs.get("eos_id", 0))
            if eos is None or not 0 <= eos < vocab:
                bad.append(f"eos_id {d.attrs['eos_id']} outside [0, {vocab})")
            tokens = d[()]
            if tokens.size < SEQ_LEN + 1:
                bad.append(f"{tokens.size} tokens, fewer than one window of {SEQ_LEN + 1}")
            elif tokens.max() >= vocab:
                bad.append(f"token {tokens.max()} >= vocab_size {vocab}")
    except Exception as e:
        bad.append(f"h5py cannot read it ({type(e).__name__}: {e})")
    return bad


# ---- running and judging ----

def run(cmd):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                           errors="replace")
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        return None, out, err, time.time() - t0


def judge_failure(rc, stderr, path, flag):
    """Why a non-zero exit is not one clear error ("" when it is)."""
    if rc is None:
        return f"hang: still running after {RUN_TIMEOUT_S:.0f} s"
    if rc < 0 or rc >= 128:
        return f"crash: exit code {rc} (a signal)"
    lines = [l for l in stderr.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("fsdptrain: error:")]
    other = [l for l in lines if not l.startswith(("fsdptrain: error:", "fsdptrain: warning:"))]
    if len(errors) != 1:
        return f"{len(errors)} 'fsdptrain: error:' lines on stderr"
    if other:
        return f"other output on stderr: {other[0][:200]!r}"
    if "internal check failed" in errors[0]:
        return "an internal check failed instead of a clear error"
    if os.path.basename(path) not in errors[0] and flag not in errors[0]:
        return f"the error names neither the file nor {flag}"
    return ""


def main():
    rng = random.Random(SEED)
    print(f"fuzz seed {SEED}: {N_CKPT} checkpoint and {N_DATA} token-file mutants, {JOBS} at a time")
    base_dir = os.path.join(work, "base")
    rc, out, err, _ = run([exe, *MODEL, "--train-data", DATA, "--steps", str(RESUME_STEPS + 1),
                           "--stop-at-step", str(BASE_STEP), "--checkpoint-dir", base_dir])
    base_ckpt = os.path.join(base_dir, f"step_{BASE_STEP:08d}.h5")
    if rc != 0 or not os.path.exists(base_ckpt):
        print(f"FAIL the base run did not save {base_ckpt} (exit {rc}): {err.strip()}")
        return 1
    with h5py.File(base_ckpt, "r") as f:
        base_model = {k: f["model"].attrs[k] for k in f["model"].attrs}
        base_sums = np.array(f.attrs["tensor_checksums"])
    base_tensors, _ = read_all(base_ckpt)
    ckpt_ranges, data_ranges_ = data_ranges(base_ckpt), data_ranges(DATA)

    # Controls first: harmless edits made the same way as the mutations (h5py
    # rewriting a value as it was, bytes appended past the end), which must
    # load, or every refusal below could be h5py's doing, not the program's.
    controls = [lambda f: f.attrs.modify("step", f.attrs["step"]),
                lambda f: f["sampler"].attrs.modify("consumed", f["sampler"].attrs["consumed"]),
                lambda f: f["tokens"].attrs.modify("vocab_size", f["tokens"].attrs["vocab_size"])]
    jobs = []  # (kind, path, mutations, cmd, flag, as_val, must_accept)
    n_ckpt_fixed = 2 + len(TARGETED_CHECKPOINT)
    for i in range(N_CKPT + n_ckpt_fixed):
        path = os.path.join(work, f"ckpt_{i:04d}.h5")
        shutil.copyfile(base_ckpt, path)
        if 2 <= i < n_ckpt_fixed:
            what, fn = TARGETED_CHECKPOINT[i - 2]
            edit(path, fn)
            muts = ["targeted: " + what]
        elif i < 2:
            with h5py.File(path, "r+") as f:
                controls[i](f)
            muts = ["control: rewrite " + ("/step" if i == 0 else "/sampler consumed")]
            muts.append(extend(rng, path))
        else:
            muts = mutate_checkpoint(rng, path, ckpt_ranges)
        cmd = [exe, *MODEL, "--train-data", DATA, "--steps", str(RESUME_STEPS), "--resume", path]
        jobs.append(("checkpoint", path, muts, cmd, "--resume", False, i < 2))
    n_data_fixed = 2 + len(TARGETED_DATA)
    for i in range(N_DATA + n_data_fixed):
        path = os.path.join(work, f"data_{i:04d}.h5")
        shutil.copyfile(DATA, path)
        if 2 <= i < n_data_fixed:
            what, fn = TARGETED_DATA[i - 2]
            fn(path)
            muts = ["targeted: " + what]
        elif i < 2:
            with h5py.File(path, "r+") as f:
                controls[2](f)
            muts = ["control: rewrite vocab_size", extend(rng, path)]
        else:
            muts = mutate_data(rng, path, data_ranges_)
        as_val = i % 3 == 1 or "training data has" in muts[0]
        cmd = [exe, *MODEL, "--steps", "1"] + (
            ["--train-data", DATA, "--val-data", path, "--eval-batches", "1"] if as_val else
            ["--train-data", path])
        jobs.append(("data", path, muts, cmd, "--val-data" if as_val else "--train-data", as_val,
                     i < 2))

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        results = list(pool.map(lambda j: run(j[3]), jobs))
    elapsed = time.time() - t0

    failures, accepted, refused = [], {"checkpoint": 0, "data": 0}, {"checkpoint": 0, "data": 0}
    log = open(os.path.join(work, "results.txt"), "w")  # every mutant and its outcome
    for (kind, path, muts, cmd, flag, as_val, control), (rc, out, err, secs) in zip(jobs, results):
        if rc == 0:
            accepted[kind] += 1
            if kind == "checkpoint":
                resumed = None
                for line in out.splitlines():
                    if line.startswith("fsdptrain: resumed from") and " at step " in line:
                        resumed = int(line.split(" at step ")[1].split()[0])
                why = checkpoint_violations(path, base_ckpt, base_model, base_tensors, base_sums,
                                            resumed)
            else:
                why = data_violations(path, as_val)
            why = ("silent wrong load: " + "; ".join(why)) if why else ""
        else:
            refused[kind] += 1
            why = judge_failure(rc, err, path, flag)
            if control:
                why = "a harmless control edit was refused" + (f" ({why})" if why else "")
        error = next((l for l in err.splitlines() if l.startswith("fsdptrain: error:")), "")
        log.write(f"{os.path.basename(path)} exit {rc}: {' | '.join(muts)}\n    {error}\n")
        if os.path.exists(path + ".flags_restored.h5"):  # h5_open's copy
            os.remove(path + ".flags_restored.h5")
        if not why:
            os.remove(path)
            continue
        tail = "\n".join(err.strip().splitlines()[-6:])
        report = (f"{why}\n  mutations: {' | '.join(muts)}\n  command: {' '.join(cmd)}\n"
                  f"  exit {rc} after {secs:.1f} s; stderr tail:\n    " +
                  tail.replace("\n", "\n    "))
        open(path + ".txt", "w").write(report + "\n")
        failures.append(f"{kind} mutant {os.path.basename(path)}: {report}")

    for kind in ("checkpoint", "data"):
        print(f"{kind} mutants: {accepted[kind]} loaded (each checked with h5py), "
              f"{refused[kind]} refused")
    print(f"{len(jobs)} runs in {elapsed:.0f} s")
    for f in failures:
        print("FAIL " + f)
    ok = not failures
    print(f"{'passed' if ok else 'FAILED'}: {len(failures)} of {len(jobs)} mutants mishandled")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
