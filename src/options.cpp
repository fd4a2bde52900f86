#include "src/options.h"

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "model/transformer.h"

namespace po = boost::program_options;

namespace fsdp {

namespace {

// One table of flags: model fields first, so a preset can be overridden
// field by field after it is loaded.
struct Parsed {
  po::options_description desc{"fsdptrain options", 100};
  po::variables_map vm;
};

void describe(po::options_description& d, Options& o) {
  // clang-format off
  d.add_options()
    ("help,h", "print this help")
    ("config", po::value<std::string>(), "INI file of option = value lines; flags override it")
    ("model", po::value<std::string>()->default_value("tiny"),
     "preset: tiny, gpt-125m, gpt-350m, gpt-760m, gpt-1.3b")
    ("vocab-size", po::value<int>(), "override the preset's vocabulary size")
    ("n-layer", po::value<int>(), "override: transformer blocks")
    ("d-model", po::value<int>(), "override: model width")
    ("n-head", po::value<int>(), "override: attention heads")
    ("n-kv-head", po::value<int>(), "override: key/value heads (GQA)")
    ("d-ff", po::value<int>(), "override: SwiGLU hidden width")
    ("max-seq-len", po::value<int>(), "override: context length")
    ("rope-theta", po::value<float>(), "override: RoPE base")
    ("norm-eps", po::value<float>(), "override: RMSNorm epsilon")
    ("init-std", po::value<float>(), "override: initialisation std")
    ("tie-embeddings", po::value<bool>(), "override: share embedding and head (true|false)")
    ("train-data", po::value(&o.train_data), "training tokens: FILE.h5[:/dataset] (default dataset /tokens)")
    ("val-data", po::value(&o.val_data), "validation tokens: FILE.h5[:/dataset]")
    ("seq-len", po::value(&o.seq_len)->default_value(o.seq_len), "tokens per sequence (0: the model's context)")
    ("batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "sequences per rank per micro-batch")
    ("grad-accum", po::value(&o.grad_accum)->default_value(o.grad_accum), "micro-batches per optimizer step")
    ("steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps (sets the LR schedule)")
    ("lr", po::value(&o.lr)->default_value(o.lr), "peak learning rate")
    ("min-lr", po::value(&o.min_lr)->default_value(o.min_lr), "learning rate at the end of the cosine")
    ("warmup-steps", po::value(&o.warmup_steps)->default_value(o.warmup_steps), "linear warmup steps")
    ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay), "AdamW decay, matrices only")
    ("beta1", po::value(&o.beta1)->default_value(o.beta1), "AdamW beta1")
    ("beta2", po::value(&o.beta2)->default_value(o.beta2), "AdamW beta2")
    ("adam-eps", po::value(&o.adam_eps)->default_value(o.adam_eps), "AdamW epsilon")
    ("grad-clip", po::value(&o.grad_clip)->default_value(o.grad_clip), "clip the global gradient norm (0: off)")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seed for initialisation and data order")
    ("device", po::value(&o.device)->default_value(o.device), "auto | cpu | cuda")
    ("precision", po::value(&o.precision)->default_value(o.precision), "auto (fp32 on cpu, bf16 on cuda) | fp32 | bf16 | fp8")
    ("debug", po::bool_switch(&o.debug), "debug mode: stop at the first unit whose output or gradient holds NaN/Inf; on a GPU also deterministic attention and a sync after every op")
    ("shard-group-size", po::value(&o.shard_group_size)->default_value(o.shard_group_size),
     "shard within groups of K ranks, replicate across groups (0: all ranks)")
    ("reshard-after-forward", po::value(&o.reshard_after_forward)->default_value(true),
     "free gathered weights after forward, re-gather for backward (true|false)")
    ("recompute", po::value(&o.recompute)->default_value(o.recompute),
     "activation recomputation in backward: none | mlp | block (less memory, more compute)")
    ("reduce-dtype", po::value(&o.reduce_dtype)->default_value(o.reduce_dtype),
     "element type of gradient reduce-scatters: fp32 | bf16 (bf16 needs --device cuda)")
    ("device-comm", po::value(&o.device_comm)->default_value(o.device_comm),
     "auto (NCCL on cuda, MPI on cpu) | staged: a TEST MODE that runs the engine's collectives "
     "through host memory over MPI, so several ranks can share one GPU (slow)")
    ("eval-every", po::value(&o.eval_every)->default_value(o.eval_every), "validate every N steps (0: at the end only)")
    ("eval-batches", po::value(&o.eval_batches)->default_value(o.eval_batches), "validation micro-batches per rank")
    ("log-every", po::value(&o.log_every)->default_value(o.log_every), "print a line every N steps")
    ("metrics", po::value(&o.metrics), "write JSON-lines metrics to FILE")
    ("checkpoint-dir", po::value(&o.checkpoint_dir), "directory for checkpoints")
    ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(o.checkpoint_every), "save every N steps (and at the end)")
    ("keep-checkpoints", po::value(&o.keep_checkpoints)->default_value(o.keep_checkpoints), "keep the newest K checkpoints (0: all)")
    ("resume", po::value(&o.resume), "auto (newest valid in --checkpoint-dir, or start fresh) | PATH")
    ("stop-at-step", po::value(&o.stop_at_step)->default_value(o.stop_at_step),
     "end after step N with a checkpoint, as a preemption would; the LR schedule still follows --steps");
  // clang-format on
}

template <typename T>
void override_field(const po::variables_map& vm, const char* key, T& field) {
  if (vm.count(key)) field = vm[key].as<T>();
}

void check(bool ok, const char* flag, const std::string& value, const char* rule) {
  if (!ok) throw_error(flag, ": '", value, "' is invalid: ", rule);
}

template <typename T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void validate(const Options& o) {
  check(o.seq_len >= 0 && o.seq_len <= o.model.max_seq_len, "--seq-len", str(o.seq_len),
        "must be between 1 and the model's --max-seq-len (0 picks it)");
  check(o.batch_size >= 1, "--batch-size", str(o.batch_size), "must be at least 1");
  check(o.grad_accum >= 1, "--grad-accum", str(o.grad_accum), "must be at least 1");
  check(o.steps >= 1, "--steps", str(o.steps), "must be at least 1");
  check(o.lr > 0, "--lr", str(o.lr), "must be positive");
  check(o.min_lr >= 0 && o.min_lr <= o.lr, "--min-lr", str(o.min_lr), "must be in [0, --lr]");
  check(o.warmup_steps >= 0, "--warmup-steps", str(o.warmup_steps), "must be >= 0");
  check(o.weight_decay >= 0, "--weight-decay", str(o.weight_decay), "must be >= 0");
  check(o.beta1 >= 0 && o.beta1 < 1, "--beta1", str(o.beta1), "must be in [0, 1)");
  check(o.beta2 >= 0 && o.beta2 < 1, "--beta2", str(o.beta2), "must be in [0, 1)");
  check(o.adam_eps > 0, "--adam-eps", str(o.adam_eps), "must be positive");
  check(o.grad_clip >= 0, "--grad-clip", str(o.grad_clip), "must be >= 0 (0 turns clipping off)");
  check(o.device == "auto" || o.device == "cpu" || o.device == "cuda", "--device", o.device,
        "choose auto, cpu or cuda");
  check(o.precision == "auto" || o.precision == "fp32" || o.precision == "bf16" ||
            o.precision == "fp8",
        "--precision", o.precision, "choose auto, fp32, bf16 or fp8");
  parse_recompute(o.recompute);  // throws naming --recompute
  check(o.reduce_dtype == "fp32" || o.reduce_dtype == "bf16", "--reduce-dtype", o.reduce_dtype,
        "choose fp32 or bf16");
  check(o.device_comm == "auto" || o.device_comm == "staged", "--device-comm", o.device_comm,
        "choose auto or staged");
  check(o.shard_group_size >= 0, "--shard-group-size", str(o.shard_group_size), "must be >= 0");
  check(o.eval_every >= 0, "--eval-every", str(o.eval_every), "must be >= 0");
  check(o.eval_batches >= 1, "--eval-batches", str(o.eval_batches), "must be at least 1");
  check(o.log_every >= 1, "--log-every", str(o.log_every), "must be at least 1");
  check(o.checkpoint_every >= 0, "--checkpoint-every", str(o.checkpoint_every), "must be >= 0");
  check(o.keep_checkpoints >= 0, "--keep-checkpoints", str(o.keep_checkpoints), "must be >= 0");
  check(o.stop_at_step >= 0 && o.stop_at_step <= o.steps, "--stop-at-step", str(o.stop_at_step),
        "must be between 1 and --steps (0: off)");
  if (o.checkpoint_dir.empty() && (o.checkpoint_every > 0 || o.resume == "auto" ||
                                   o.stop_at_step > 0 || o.keep_checkpoints > 0))
    throw_error(
        "--checkpoint-every/--resume auto/--stop-at-step/--keep-checkpoints need "
        "--checkpoint-dir DIR");
  if (o.train_data.empty())
    throw_error("--train-data is required: pass an HDF5 token file (see tools/prepare_data.py)");
}

}  // namespace

std::string options_help() {
  Options o;
  Parsed p;
  describe(p.desc, o);
  std::ostringstream os;
  os << "usage: fsdptrain --train-data FILE.h5 [options]\n"
     << "       mpirun -np N fsdptrain ...   (one rank per GPU, or --device cpu)\n\n"
     << p.desc;
  return os.str();
}

std::string options_to_ini(const Options& o) {
  const ModelConfig& m = o.model;
  std::ostringstream os;
  auto kv = [&](const char* k, const auto& v) { os << k << " = " << v << "\n"; };
  os.precision(9);
  kv("model", m.name);
  kv("vocab-size", m.vocab_size);
  kv("n-layer", m.n_layer);
  kv("d-model", m.d_model);
  kv("n-head", m.n_head);
  kv("n-kv-head", m.n_kv_head);
  kv("d-ff", m.d_ff);
  kv("max-seq-len", m.max_seq_len);
  kv("rope-theta", m.rope_theta);
  kv("norm-eps", m.norm_eps);
  kv("init-std", m.init_std);
  kv("tie-embeddings", m.tie_embeddings ? "true" : "false");
  kv("train-data", o.train_data);
  if (!o.val_data.empty()) kv("val-data", o.val_data);
  kv("seq-len", o.seq_len);
  kv("batch-size", o.batch_size);
  kv("grad-accum", o.grad_accum);
  kv("steps", o.steps);
  kv("lr", o.lr);
  kv("min-lr", o.min_lr);
  kv("warmup-steps", o.warmup_steps);
  kv("weight-decay", o.weight_decay);
  kv("beta1", o.beta1);
  kv("beta2", o.beta2);
  kv("adam-eps", o.adam_eps);
  kv("grad-clip", o.grad_clip);
  kv("seed", o.seed);
  kv("device", o.device);
  kv("precision", o.precision);
  kv("shard-group-size", o.shard_group_size);
  kv("reshard-after-forward", o.reshard_after_forward ? "true" : "false");
  kv("recompute", o.recompute);
  kv("reduce-dtype", o.reduce_dtype);
  kv("device-comm", o.device_comm);
  kv("eval-every", o.eval_every);
  kv("eval-batches", o.eval_batches);
  kv("log-every", o.log_every);
  kv("checkpoint-every", o.checkpoint_every);
  kv("keep-checkpoints", o.keep_checkpoints);
  return os.str();
}

std::optional<Options> parse_options(int argc, const char* const argv[]) {
  Options o;
  Parsed p;
  describe(p.desc, o);
  try {
    po::store(po::parse_command_line(argc, argv, p.desc), p.vm);
    if (p.vm.count("help")) {
      std::cout << options_help();
      return std::nullopt;
    }
    if (p.vm.count("config")) {
      const auto path = p.vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw_error("--config: cannot read '", path, "': no such file or not readable");
      try {
        po::store(po::parse_config_file(in, p.desc), p.vm);  // flags stored first win
      } catch (const po::error& e) {
        throw_error("--config '", path, "': ", e.what());
      }
    }
    po::notify(p.vm);
  } catch (const po::error& e) {
    throw_error(e.what(), " (see fsdptrain --help)");
  }

  o.model = model_preset(p.vm["model"].as<std::string>());
  ModelConfig& m = o.model;
  override_field(p.vm, "vocab-size", m.vocab_size);
  override_field(p.vm, "n-layer", m.n_layer);
  override_field(p.vm, "d-model", m.d_model);
  override_field(p.vm, "n-head", m.n_head);
  override_field(p.vm, "n-kv-head", m.n_kv_head);
  override_field(p.vm, "d-ff", m.d_ff);
  override_field(p.vm, "max-seq-len", m.max_seq_len);
  override_field(p.vm, "rope-theta", m.rope_theta);
  override_field(p.vm, "norm-eps", m.norm_eps);
  override_field(p.vm, "init-std", m.init_std);
  override_field(p.vm, "tie-embeddings", m.tie_embeddings);
  m.validate();
  validate(o);
  if (o.seq_len == 0) o.seq_len = m.max_seq_len;
  return o;
}

}  // namespace fsdp
