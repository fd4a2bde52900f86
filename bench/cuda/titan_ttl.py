#!/usr/bin/env python3
"""Time-to-loss rival: torchtitan trains fsdptrain's model on fsdptrain's batches.

Issue 63's race holds fsdptrain against the trainer a user would pick instead:
torchtitan, PyTorch's own trainer. This runs torchtitan's Trainer itself (its
model, compile, float8 conversion, AdamW, lr schedule, clipping, training
loop) and adds only what the race needs, through torchtitan's own extension
point (a registered TrainSpec):

- model: torchtitan's Qwen3 (RMSNorm, SwiGLU, RoPE, QK-norm, GQA, tied head),
  a flavor at fsdptrain's preset shape (bench/cuda/torch_reference.py's
  PRESETS: gpt-350m is 24 layers, d_model 1024, 16/4 heads, d_ff 2816), with
  fsdptrain's RoPE theta (10000) and RMSNorm epsilon (1e-5);
- data: a torchtitan data loader over the TTL HDF5 token files giving
  fsdptrain's batches in fsdptrain's order (tools/torch_reference.py's
  window_of: windows of --seq-len + 1 tokens in the Feistel order keyed by
  --seed), so torchtitan sees the same tokens step for step;
- validation: every window of the validation file once, the mean over every
  token (fsdptrain's --eval-batches 0). torchtitan's own Validator reads a
  Hugging Face text dataset and averages per-batch means, so a validator of
  the same interface does it here;
- clock: train_s counts seconds in training steps alone, as fsdptrain's and
  bench/cuda/torch_ttl.py's do. One forward and backward before step 1,
  discarded, holds compilation; evaluations are timed apart.

Differences that remain, all torchtitan's own defaults, kept as a user would
run it: initialisation (tied embedding trunc-normal std d^-1/2 = 0.031 for
1024, not 0.02; w1/wq/wk/wv 0.02; wo, w2 and w3 at 0.02 / sqrt(2 (layer+1)),
not wo and w2 at 0.02 / sqrt(2 L)); weight decay on every parameter, the
RMSNorm gains too (fsdptrain decays matrices only); the lr schedule holds the
peak for one step after warm-up and its cosine ends one step short of
--min-lr (torchtitan's linear_warmup_stable_decay; fsdptrain's reaches it at
the last step); the float8 runs keep the tied output projection in bf16
(filter_fqns output). Attention is PyTorch's SDPA.

  python3 bench/cuda/titan_ttl.py --train-data D_train.h5 --val-data D_val.h5 \\
      --vocab-size 8192 --steps 950 --eval-every 100 --compile [--float8 rowwise] \\
      --metrics ttl_torchtitan_bf16.jsonl

Output: fsdptrain's --metrics format, as torch_ttl.py writes it (per logged
step {"step", "loss", "lr"}, per evaluation {"step", "val_loss", "train_s"}),
and one closing line with steps, training seconds, tokens/s, warm-up and
evaluation seconds. --device cpu rehearses the whole path on a CPU at a tiny
shape (gloo, inductor's C++ backend, float8 emulated).
"""
import argparse
import json
import math
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
sys.path.append(HERE)  # after tools/: its torch_reference is the one imported below
from ttl_recipe import add_recipe_args, bench_reference  # noqa: E402

PRESETS = bench_reference().PRESETS  # bench/cuda/torch_reference.py's preset shapes


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe_args(ap, PRESETS)  # --init-std is accepted and unused: torchtitan keeps its initialisation
    ap.add_argument("--log-every", type=int, default=100, help="torchtitan's metrics.log_freq")
    ap.add_argument("--plan-budget", type=float, default=0.0, metavar="S",
                    help="fix the step count (at most --steps) that fills S seconds of training, "
                    "timed over warmup steps 2-11, then again over the rest of the warmup "
                    "(as fsdptrain's --time-budget does, which plans twice for wsd)")
    ap.add_argument("--profile-steps", default="", metavar="A:B",
                    help="kernels of steps A..B under torch.profiler, per category "
                    "(bench/cuda/profile_compare.py), into --profile-out; the (at most 10) steps "
                    "before A give the unprofiled step time")
    ap.add_argument("--profile-out", default="", metavar="JSON", help="where --profile-steps writes")
    ap.add_argument("--compile", action="store_true", help="torchtitan's compile (model and loss)")
    ap.add_argument("--float8", default="none", choices=["none", "tensorwise", "rowwise"],
                    help="torchtitan's float8 linears through torchao")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dump-folder", default="/tmp/titan_ttl", help="torchtitan's job.dump_folder")
    return ap.parse_args()


def fail(msg):
    sys.exit(f"titan_ttl: error: {msg}")


a = parse()
if a.device == "cpu":
    # torchtitan picks its device once, at import, and falls back to "cuda" when
    # no accelerator is found; a CPU rehearsal makes it choose "cpu" (gloo).
    # Its memory monitor asks the device module what torch.cuda answers; the CPU
    # has no such statistics, so a rehearsal reports none (zeros).
    import types
    import torch._utils
    import torch.cpu
    torch._utils._get_available_device_type = lambda: "cpu"
    for name, fn in {"get_device_name": lambda *_: "cpu", "current_device": lambda: 0,
                     "get_device_properties": lambda *_: types.SimpleNamespace(total_memory=1 << 30),
                     "reset_peak_memory_stats": lambda *_: None, "empty_cache": lambda: None,
                     "memory_stats": lambda *_: {}}.items():
        if not hasattr(torch.cpu, name) or name == "current_device":  # torch.cpu's says "cpu", not an index
            setattr(torch.cpu, name, fn)
try:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import IterableDataset
    from torchtitan import train as titan_train
    from torchtitan.components.dataloader import ParallelAwareDataloader
    from torchtitan.components.validate import BaseValidator
    from torchtitan.config import ConfigManager
    from torchtitan.models import qwen3
    from torchtitan.protocols.train_spec import TrainSpec, register_train_spec
    from torchtitan.tools.logging import init_logger
except ImportError as e:
    fail(f"{e} (torchtitan 0.2.2 with torchao and torchdata: bench/cuda/titan_wheels.sh)")
import torch_reference as ref  # tools/: window_of, read_tokens, val_loss (exits with one line without h5py)

_, L, D, H, HKV, FF, _ = PRESETS[a.model]
B, T = a.batch_size, a.seq_len
train_tokens = ref.read_tokens(a.train_data, "--train-data")
val_tokens = ref.read_tokens(a.val_data, "--val-data")
if max(train_tokens.max(), val_tokens.max()) >= a.vocab_size:
    fail(f"a token id is >= --vocab-size {a.vocab_size}")
if (len(train_tokens) - 1) // T < 1 or (len(val_tokens) - 1) // T < 1:
    fail(f"a token file holds less than one window of --seq-len {T} + 1 tokens")
if a.steps < 1 or a.eval_every < 0:
    fail("--steps must be >= 1 and --eval-every >= 0")
if a.plan_budget > 0 and a.warmup_steps < 3:
    fail("--plan-budget times warmup steps (whose lr does not depend on the count): give --warmup-steps >= 3")
PROFILE = None
if a.profile_steps:
    try:
        PROFILE = tuple(int(x) for x in a.profile_steps.split(":"))
        assert len(PROFILE) == 2
    except (ValueError, AssertionError):
        fail(f"--profile-steps '{a.profile_steps}': give A:B, e.g. 6:10")
    if not (4 <= PROFILE[0] <= PROFILE[1] <= a.steps) or not a.profile_out or a.plan_budget > 0:
        fail("--profile-steps A:B needs 4 <= A <= B <= --steps, a --profile-out, and no --plan-budget")
if a.device == "cpu" and a.float8 == "rowwise":
    fail("--float8 rowwise needs a GPU (the CPU's torch._scaled_mm scales per tensor only)")
if a.device == "cpu" and a.float8 != "none" and a.compile:
    # torchtitan emulates float8 off SM89+ GPUs only in eager mode
    print("titan_ttl: a CPU rehearsal emulates float8 eagerly: --compile dropped", flush=True)
    a.compile = False


class Windows(IterableDataset):
    """fsdptrain's sampler: sample i of the run is window window_of(i) (one rank,
    no accumulation: step s holds samples s*B .. s*B+B-1). Stateful, as
    torchtitan's checkpointer expects of a dataset."""

    def __init__(self, tokens, seq_len, seed):
        self.tokens, self.seq_len, self.seed = tokens, seq_len, seed & ref.M64
        self.windows = (len(tokens) - 1) // seq_len
        self.position = 0

    def window(self, i):
        w = ref.window_of(i, self.windows, self.seed)
        return torch.from_numpy(self.tokens[w * self.seq_len: w * self.seq_len + self.seq_len + 1])

    def __iter__(self):
        while True:
            x = self.window(self.position)
            self.position += 1
            yield {"input": x[:-1]}, x[1:]

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def build_dataloader(dp_world_size, dp_rank, tokenizer, job_config, infinite=True):
    if dp_world_size != 1:
        fail("the race runs on one GPU (fsdptrain's sampler is mirrored for one rank)")
    return ParallelAwareDataloader(Windows(train_tokens, T, a.seed), dp_rank=dp_rank, dp_world_size=1,
                                   batch_size=job_config.training.local_batch_size, num_workers=0)


class Race:
    """The race's clock and metrics file, shared by the trainer and the validator."""

    def __init__(self, path):
        self.out = open(path, "w")
        self.train_s = self.eval_s = self.warm_s = 0.0
        self.mark = None
        self.stop = False
        self.last_val_step = 0

    def clock(self):
        """Training seconds so far (the host's view: sync first for the device's)."""
        return self.train_s + (time.perf_counter() - self.mark if self.mark is not None else 0.0)

    def write(self, line):
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()


race = Race(a.metrics)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class TTLValidator(BaseValidator):
    """fsdptrain's evaluation (every window of the file once, the mean over every
    token) at every --eval-every steps and the last; stops the clock around it."""

    def __init__(self, job_config, maybe_enable_amp, **_):
        super().__init__(job_config)
        self.amp = maybe_enable_amp

    def should_validate(self, step):
        return step == self.job_config.training.steps or (a.eval_every > 0 and step % a.eval_every == 0)

    def validate(self, model_parts, step):
        sync()
        if race.mark is not None:
            race.train_s += time.perf_counter() - race.mark
        t = time.perf_counter()
        model = model_parts[0]
        model.eval()
        loss_of = lambda x, y: F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        v = ref.val_loss(loss_of, val_tokens, T, B, 1, 0, next(model.parameters()).device, lambda: self.amp)
        model.train()
        race.eval_s += time.perf_counter() - t
        race.write({"step": step, "val_loss": v, "train_s": race.train_s})
        race.last_val_step = step
        print(f"titan_ttl: step {step:5d}/{self.job_config.training.steps} | val_loss {v:.4f} | train {race.train_s:.1f} s", flush=True)
        if a.time_budget > 0 and race.train_s >= a.time_budget and step < a.steps:
            print(f"titan_ttl: --time-budget {a.time_budget:g} s reached after step {step}", flush=True)
            race.stop = True
        race.mark = time.perf_counter()


def build_validator(job_config, maybe_enable_amp, **kwargs):
    return TTLValidator(job_config, maybe_enable_amp, **kwargs)


class TTLTrainer(titan_train.Trainer):
    """torchtitan's Trainer with a discarded warm-up step, an evaluation at step
    0, per-logged-step metrics lines, a step count fixed by --plan-budget, and
    a stop at --time-budget."""

    def __init__(self, job_config):
        super().__init__(job_config)
        log = self.metrics_processor.log

        def log_and_record(step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=None):
            race.write({"step": step, "loss": float(global_avg_loss), "lr": float(extra_metrics["lr"]),
                        "grad_norm": float(grad_norm)})
            log(step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=extra_metrics)

        self.metrics_processor.log = log_and_record
        n8 = sum(type(m).__name__ == "Float8Linear" for m in self.model_parts[0].modules())
        n = sum(isinstance(m, torch.nn.Linear) for m in self.model_parts[0].modules())
        print(f"titan_ttl: {n8} of {n} linear layers in float8", flush=True)
        if (a.float8 != "none") != (n8 > 0):
            fail(f"--float8 {a.float8} but {n8} float8 linear layers (torchao's conversion?)")

    def warm_up(self):
        """One forward and backward on the first batch, discarded (compilation,
        cuBLAS and SDPA plans), as fsdptrain's warm-up and torch_ttl.py's."""
        t = time.perf_counter()
        data = Windows(train_tokens, T, a.seed)
        rows = [data.window(j) for j in range(B)]
        # inputs and labels laid out as the data loader collates them (contiguous),
        # so that what compiles here is what the steps run
        x = torch.stack([r[:-1] for r in rows]).to(self.device)
        y = torch.stack([r[1:] for r in rows]).to(self.device)
        model = self.model_parts[0]
        with self.train_context(), self.maybe_enable_amp:
            loss = self.loss_fn(model(x), y) / y.numel()
        loss.backward()
        self.optimizers.zero_grad()
        sync()
        race.warm_s = time.perf_counter() - t
        print(f"titan_ttl: warm-up (compile={a.compile}, float8={a.float8}) took {race.warm_s:.1f} s", flush=True)

    def train(self):
        self.warm_up()
        self.validator.validate(self.model_parts, 0)
        super().train()

    def train_step(self, data_iterator):
        if PROFILE and self.step == PROFILE[0]:  # torchtitan counts the step before running it
            self.profile_begin()
        super().train_step(data_iterator)
        # the unprofiled steps timed: the (at most) 10 before the profiled ones,
        # past compilation's slow first steps where there is room
        if PROFILE and self.step in (self.unprofiled_from, PROFILE[0] - 1, PROFILE[1]):
            sync()
            if self.step == self.unprofiled_from:
                self.unprofiled = race.clock()
            elif self.step == PROFILE[0] - 1:
                self.unprofiled = (race.clock() - self.unprofiled) / (PROFILE[0] - 1 - self.unprofiled_from)
            if self.step == PROFILE[1]:
                self.profile_end()
        if a.plan_budget > 0 and self.step in (1, self.probe_end, self.probe2_end):
            sync()
            now = race.clock()  # the race's clock: an evaluation among the timed steps is not counted
            if self.step == 1:
                self.probe_start = now
            elif self.step == self.probe_end:
                self.plan_steps((now - self.probe_start) / (self.probe_end - 1), f"2-{self.probe_end}")
                self.probe_start = race.clock()
            else:
                self.plan_steps((now - self.probe_start) / (self.probe2_end - self.probe_end),
                                f"{self.probe_end + 1}-{self.probe2_end}")

    # The first plan times steps 2-11. On the first H100 race those ran at 118 ms
    # a step against 90 ms for the rest (torch.compile's early steps): a count
    # 25% short, 38 s of a 50 s budget. So the count is planned again at the
    # warmup's last step, from the steps after the first plan's; the warmup's
    # rates and the peak held one step after it do not depend on the count, so
    # the run is still that of --steps N for the final N.
    probe_end = min(a.warmup_steps, 11)
    probe2_end = a.warmup_steps if a.warmup_steps > probe_end else -1

    unprofiled_from = max(1, PROFILE[0] - 11) if PROFILE else 0

    def profile_begin(self):
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
        self.prof = profile(activities=acts)
        self.prof.__enter__()

    def profile_end(self):
        """Each kernel's (on a CPU: each aten op's own) time a step, as
        profile_compare.py reads it."""
        self.prof.__exit__(None, None, None)
        n = PROFILE[1] - PROFILE[0] + 1
        on_gpu = a.device == "cuda"
        rows = []
        for e in self.prof.key_averages():
            if on_gpu:
                us = e.self_device_time_total if e.device_type == torch.autograd.DeviceType.CUDA else 0
            else:
                us = e.self_cpu_time_total if e.key.startswith("aten::") else 0
            if us > 0:
                rows.append({"name": e.key, "calls": e.count / n, "ms_per_step": us / 1e3 / n})
        rows.sort(key=lambda r: -r["ms_per_step"])
        out = {"system": f"torchtitan_{'bf16' if a.float8 == 'none' else 'fp8_' + a.float8}",
               "device": torch.cuda.get_device_name() if on_gpu else "cpu", "steps": f"{PROFILE[0]}-{PROFILE[1]}",
               "step_ms": 1e3 * self.unprofiled, "unprofiled_steps": f"{self.unprofiled_from + 1}-{PROFILE[0] - 1}",
               "compile": a.compile, "kernels": rows}
        with open(a.profile_out, "w") as f:
            json.dump(out, f, indent=1)
        print(f"titan_ttl: profiled steps {PROFILE[0]}-{PROFILE[1]}: {len(rows)} kernels, "
              f"{sum(r['ms_per_step'] for r in rows):.2f} ms a step in them; unprofiled steps "
              f"{self.unprofiled_from + 1}-{PROFILE[0] - 1} {1e3 * self.unprofiled:.2f} ms a step -> {a.profile_out}", flush=True)

    def plan_steps(self, step_s, timed):
        """The count that fills what is left of --plan-budget at step_s a step. The
        warmup's learning rate does not depend on the count, so the steps run so
        far are those of a run given that count; torchtitan's schedule is rebuilt
        for it (its lr lambdas swapped in, this step's rates kept)."""
        used = race.clock()
        n = min(a.steps, self.step + max(0, math.floor((a.plan_budget - used) / step_s)))
        n = max(n, a.warmup_steps + 1)  # torchtitan shortens the warmup of a shorter run
        print(f"titan_ttl: --plan-budget {a.plan_budget:g} s: {1e3 * step_s:.1f} ms a step over steps "
              f"{timed}, {used:.1f} s used: {n} steps (--steps {a.steps})", flush=True)
        self.job_config.training.steps = n
        groups = [g for o in self.optimizers.optimizers for g in o.param_groups]
        rates = [g["lr"] for g in groups]
        fresh = self.train_spec.build_lr_schedulers_fn(self.optimizers, self.job_config.lr_scheduler, n)
        for old, new in zip(self.lr_schedulers.schedulers, fresh.schedulers):
            old.lr_lambdas = new.lr_lambdas
        for g, r in zip(groups, rates):
            g["lr"] = r

    def should_continue_training(self):
        return not race.stop and super().should_continue_training()


def job_args():
    """torchtitan's own configuration, as its command line takes it."""
    args = ["--job.dump_folder", a.dump_folder, "--job.description", f"titan_ttl {a.model}",
            "--model.hf_assets_path", os.path.dirname(os.path.abspath(a.train_data)),  # no tokenizer is read
            "--model.name", "fsdptrain_ttl", "--model.flavor", a.model,
            "--training.local_batch_size", str(B), "--training.seq_len", str(T),
            "--training.steps", str(a.steps), "--training.max_norm", str(a.grad_clip if a.grad_clip > 0 else 1e30),
            "--training.dtype", "float32", "--training.mixed_precision_param", "bfloat16",
            "--optimizer.name", "AdamW", "--optimizer.lr", str(a.lr), "--optimizer.eps", str(a.adam_eps),
            "--optimizer.beta1", str(a.beta1), "--optimizer.beta2", str(a.beta2),
            "--optimizer.weight_decay", str(a.weight_decay),
            "--optimizer.implementation", "fused" if a.device == "cuda" else "foreach",
            "--lr_scheduler.warmup_steps", str(a.warmup_steps), "--lr_scheduler.decay_type", "cosine",
            "--lr_scheduler.min_lr_factor", str(a.min_lr / a.lr),
            "--activation_checkpoint.mode", "none", "--metrics.log_freq", str(max(1, a.log_every)),
            "--metrics.disable_color_printing", "--validation.enable", "--debug.seed", str(a.seed),
            "--checkpoint.no-enable"]
    if a.compile:
        args += ["--compile.enable"]  # its components default to model and loss
    if a.float8 != "none":
        args += ["--model.converters", "quantize.linear.float8",
                 "--quantize.linear.float8.recipe_name", a.float8,
                 "--quantize.linear.float8.filter_fqns", "output"]
        if a.device == "cpu":
            args += ["--quantize.linear.float8.emulate"]
    return args


def main():
    init_logger()  # torchtitan's own log lines (throughput, MFU, memory), as its train.py shows them
    flavor = qwen3.Qwen3ModelArgs(vocab_size=a.vocab_size, max_seq_len=T, head_dim=D // H, dim=D, n_layers=L,
                                  n_heads=H, n_kv_heads=HKV, qk_norm=True, hidden_dim=FF, rope_theta=10000.0,
                                  norm_eps=1e-5, enable_weight_tying=True)
    spec = qwen3.get_train_spec()
    register_train_spec("fsdptrain_ttl", TrainSpec(
        model_cls=spec.model_cls, model_args={a.model: flavor}, parallelize_fn=spec.parallelize_fn,
        pipelining_fn=None, build_optimizers_fn=spec.build_optimizers_fn,
        build_lr_schedulers_fn=spec.build_lr_schedulers_fn, build_dataloader_fn=build_dataloader,
        build_tokenizer_fn=None, build_loss_fn=spec.build_loss_fn, build_validator_fn=build_validator))
    # One process, no launcher: torchtitan reads torchrun's variables.
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                 "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(k, v)
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    config = ConfigManager().parse_args(job_args())
    trainer = TTLTrainer(config)
    try:
        trainer.train()
    finally:
        trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    steps = trainer.step
    tok_s = steps * B * T / race.train_s if race.train_s > 0 else float("nan")
    print(f"titan_ttl: {steps} steps, {race.train_s:.1f} s training ({tok_s:.0f} tokens/s), "
          f"warm-up {race.warm_s:.1f} s, evaluation {race.eval_s:.1f} s", flush=True)


if __name__ == "__main__":
    main()
