// Metadata attributes and the dataset check of checkpoint files.
#include <sstream>

#include "common/error.h"
#include "model/params.h"
#include "shard/checkpoint_h5.h"
#include "shard/checkpoint_io.h"

namespace fsdp::ckpt {

namespace {

H5 create_group(hid_t file, const char* name, const std::string& path) {
  // Attribute creation order is kept so named values (the sampler state)
  // come back in the order they were given.
  H5 gcpl = h5_own(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "H5Pcreate", path);
  h5_check(H5Pset_attr_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
           "H5Pset_attr_creation_order", path);
  return h5_own(H5Gcreate2(file, name, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
                "creating a group", path);
}

H5 open_group(hid_t file, const char* name, const std::string& path) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
    throw_error("checkpoint '", path, "' has no group /", name);
  return h5_own(H5Gopen2(file, name, H5P_DEFAULT), H5Gclose, "H5Gopen2", path);
}

std::string shape_text(const std::vector<hsize_t>& dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// The flags that would rebuild the saved model, for error messages.
std::string saved_model_flags(hid_t file, const std::string& path) {
  try {
    const ModelConfig m = read_meta(file, path).model;
    std::ostringstream os;
    os << "--vocab-size " << m.vocab_size << " --n-layer " << m.n_layer << " --d-model "
       << m.d_model << " --n-head " << m.n_head << " --n-kv-head " << m.n_kv_head << " --d-ff "
       << m.d_ff << " --tie-embeddings " << (m.tie_embeddings ? "true" : "false");
    return "; it was saved with " + os.str() + ": pass the same model flags";
  } catch (const Error&) {
    return "; pass the model flags it was saved with";
  }
}

}  // namespace

void write_meta(hid_t file, const CheckpointMeta& m, const std::string& path) {
  put_i64(file, "format_version", m.format_version, path);
  put_i64(file, "step", m.step, path);
  put_i64(file, "tokens_seen", m.tokens_seen, path);
  put_i64(file, "optimizer_steps", m.optimizer_steps, path);
  put_i64(file, "seed", int64_t(m.seed), path);
  put_i64(file, "world_size", m.world_size, path);
  put_i64(file, "shard_group_size", m.shard_group_size, path);
  put_str(file, "config", m.config_text, path);

  H5 model = create_group(file, "model", path);
  const ModelConfig& c = m.model;
  put_str(model.get(), "name", c.name, path);
  put_i64(model.get(), "vocab_size", c.vocab_size, path);
  put_i64(model.get(), "n_layer", c.n_layer, path);
  put_i64(model.get(), "d_model", c.d_model, path);
  put_i64(model.get(), "n_head", c.n_head, path);
  put_i64(model.get(), "n_kv_head", c.n_kv_head, path);
  put_i64(model.get(), "d_ff", c.d_ff, path);
  put_i64(model.get(), "max_seq_len", c.max_seq_len, path);
  put_f32(model.get(), "rope_theta", c.rope_theta, path);
  put_f32(model.get(), "norm_eps", c.norm_eps, path);
  put_f32(model.get(), "init_std", c.init_std, path);
  put_i64(model.get(), "tie_embeddings", c.tie_embeddings ? 1 : 0, path);
  h5_close(model, path);

  H5 optim = create_group(file, "optim", path);
  h5_close(optim, path);
  h5_close(create_group(file, "optim/exp_avg", path), path);
  h5_close(create_group(file, "optim/exp_avg_sq", path), path);
  H5 sampler = create_group(file, "sampler", path);
  for (const auto& [name, v] : m.sampler) put_i64(sampler.get(), name.c_str(), v, path);
  h5_close(sampler, path);
}

CheckpointMeta read_meta(hid_t file, const std::string& path) {
  CheckpointMeta m;
  m.format_version = int(get_i64(file, "format_version", path));
  if (m.format_version != kCheckpointFormatVersion)
    throw_error("checkpoint '", path, "' has format version ", m.format_version,
                " but this build reads version ", kCheckpointFormatVersion);
  m.step = get_i64(file, "step", path);
  m.tokens_seen = get_i64(file, "tokens_seen", path);
  m.optimizer_steps = int(get_i64(file, "optimizer_steps", path));
  m.seed = uint64_t(get_i64(file, "seed", path));
  m.world_size = int(get_i64(file, "world_size", path));
  m.shard_group_size = int(get_i64(file, "shard_group_size", path));
  m.config_text = get_str(file, "config", path);

  H5 model = open_group(file, "model", path);
  ModelConfig& c = m.model;
  c.name = get_str(model.get(), "name", path);
  c.vocab_size = int(get_i64(model.get(), "vocab_size", path));
  c.n_layer = int(get_i64(model.get(), "n_layer", path));
  c.d_model = int(get_i64(model.get(), "d_model", path));
  c.n_head = int(get_i64(model.get(), "n_head", path));
  c.n_kv_head = int(get_i64(model.get(), "n_kv_head", path));
  c.d_ff = int(get_i64(model.get(), "d_ff", path));
  c.max_seq_len = int(get_i64(model.get(), "max_seq_len", path));
  c.rope_theta = get_f32(model.get(), "rope_theta", path);
  c.norm_eps = get_f32(model.get(), "norm_eps", path);
  c.init_std = get_f32(model.get(), "init_std", path);
  c.tie_embeddings = get_i64(model.get(), "tie_embeddings", path) != 0;

  H5 sampler = open_group(file, "sampler", path);
  std::vector<std::string> names;
  hsize_t idx = 0;
  h5_check(H5Aiterate2(
               sampler.get(), H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx,
               [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
                 static_cast<std::vector<std::string>*>(out)->push_back(name);
                 return 0;
               },
               &names),
           "listing the sampler state", path);
  for (const auto& n : names) m.sampler.emplace_back(n, get_i64(sampler.get(), n.c_str(), path));
  return m;
}

std::string check_datasets(hid_t file, const ModelConfig& model, const std::string& path) {
  const std::string hint = saved_model_flags(file, path);
  const std::vector<UnitSpec> units = model_units(model);
  size_t expected = 0;
  for (const char* group : kGroups) {
    // H5Lexists fails, rather than says no, when a parent group is missing.
    const bool parent = std::string(group) == "model" || H5Lexists(file, "optim", H5P_DEFAULT) > 0;
    if (!parent || H5Lexists(file, group, H5P_DEFAULT) <= 0)
      return "checkpoint '" + path + "' has no group /" + group;
    expected = 0;
    for (const UnitSpec& u : units) {
      for (const ParamSpec& p : u.params) {
        ++expected;
        const std::string name = std::string(group) + "/" + p.name;
        std::vector<hsize_t> want(p.shape.begin(), p.shape.end()), found;
        if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
          return "checkpoint '" + path + "' has no dataset " + name + " (expected shape " +
                 shape_text(want) + ")" + hint;
        H5 d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
        if (d.get() < 0 || !f32_dims(d.get(), &found))
          return "checkpoint '" + path + "': " + name + " is not a float32 dataset";
        if (found != want)
          return "checkpoint '" + path + "': dataset " + name + " has shape " + shape_text(found) +
                 " but the current model expects " + shape_text(want) + hint;
      }
    }
    // A dataset the model lacks (say head.weight of an untied model loaded
    // into a tied one) would be silently dropped, so it is an error too.
    std::vector<std::string> names;
    H5 g = h5_own(H5Gopen2(file, group, H5P_DEFAULT), H5Gclose, "H5Gopen2", path);
    h5_check(H5Literate(g.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_name, &names),
             "listing datasets", path);
    if (names.size() != expected)
      for (const auto& n : names) {
        bool known = false;
        for (const UnitSpec& u : units)
          for (const ParamSpec& p : u.params) known = known || p.name == n;
        if (!known)
          return "checkpoint '" + path + "' has dataset " + group + "/" + n +
                 " that the current model does not have" + hint;
      }
  }
  return "";
}

}  // namespace fsdp::ckpt
