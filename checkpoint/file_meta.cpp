// Metadata attributes and the dataset check of checkpoint files.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <type_traits>
#include <variant>

#include "checkpoint/file_format.h"
#include "checkpoint/h5.h"
#include "common/error.h"
#include "model/params.h"

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
    throw_error("checkpoint '", path, "' is damaged: it has no group /", name);
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

// A dataset whose data lies in one block (contiguous, or compact: inside its
// header) must say it stores exactly its values' bytes. HDF5 1.10 trusts a
// compact dataset's stated size when reading, so a damaged header would
// crash the read instead of failing it (found by tests/src/fuzz_test.py).
// Chunked data (possibly compressed) is read chunk by chunk and checked there.
std::string storage_problem(hid_t dset, hsize_t values) {
  H5 dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (dcpl.get() < 0) return "has no readable creation properties";
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) return "";
  const hsize_t bytes = H5Dget_storage_size(dset);
  if (bytes == values * sizeof(float)) return "";
  return "stores " + std::to_string(bytes) + " bytes for its " + std::to_string(values) +
         " float32 values";
}

// --on-divergence's attributes, each optional (meta.h).
void read_divergence_meta(hid_t file, const std::string& path, CheckpointMeta& m) {
  const std::string damaged = "checkpoint '" + path + "' is damaged: ";
  if (H5Aexists(file, "loss_history") > 0) {
    m.loss_history = get_f64s(file, "loss_history", path);
    for (double v : m.loss_history)
      if (!std::isfinite(v))
        throw_error(damaged, "loss_history holds ", v, "; the losses of applied steps are finite");
  }
  if (H5Aexists(file, "rollbacks") > 0)
    m.rollbacks = get_i64_in(file, "rollbacks", 0, std::numeric_limits<int>::max(), path);
  if (H5Aexists(file, "skipped_sequences") > 0) {
    m.skipped_sequences = get_i64s(file, "skipped_sequences", path);
    const std::vector<int64_t>& v = m.skipped_sequences;
    if (v.size() % 2)
      throw_error(damaged, "skipped_sequences has ", v.size(), " values, not [first, end) pairs");
    for (size_t i = 0; i < v.size(); i += 2)
      if (v[i] < (i ? v[i - 1] : 0) || v[i + 1] <= v[i])
        throw_error(damaged, "skipped_sequences' range [", v[i], ", ", v[i + 1],
                    ") is empty, negative or not after the one before it");
  }
}

// A model field as /model holds it: integers and switches as int64, reals
// as float32.
void put_model_field(hid_t g, const ModelField& f, const ModelConfig& c, const std::string& path) {
  std::visit(
      [&](auto field) {
        using T = std::remove_cvref_t<decltype(c.*field)>;
        if constexpr (std::is_same_v<T, float>)
          put_f32(g, f.attribute, c.*field, path);
        else
          put_i64(g, f.attribute, int64_t(c.*field), path);
      },
      f.member);
}

void get_model_field(hid_t g, const ModelField& f, ModelConfig& c, const std::string& path) {
  std::visit(
      [&](auto field) {
        using T = std::remove_cvref_t<decltype(c.*field)>;
        if constexpr (std::is_same_v<T, float>)
          c.*field = get_f32(g, f.attribute, path);
        else if constexpr (std::is_same_v<T, bool>)
          c.*field = get_i64_in(g, f.attribute, 0, 1, path) != 0;
        else
          c.*field = T(get_i64_in(g, f.attribute, f.file_min, f.file_max, path));
      },
      f.member);
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
  put_str(file, "optimizer", m.optimizer == OptimizerKind::muon ? "muon" : "adamw", path);
  if (m.has_budget) {
    put_i64(file, "time_budget_steps", m.budget_steps, path);
    put_f32(file, "time_budget_used_s", float(m.budget_used_s), path);
  }
  if (!m.loss_history.empty()) put_f64s(file, "loss_history", m.loss_history, path);
  if (m.rollbacks > 0) put_i64(file, "rollbacks", m.rollbacks, path);
  if (!m.skipped_sequences.empty()) put_i64s(file, "skipped_sequences", m.skipped_sequences, path);

  H5 model = create_group(file, "model", path);
  const ModelConfig& c = m.model;
  put_str(model.get(), "name", c.name, path);
  for (const ModelField& f : model_fields())
    if (!f.stored_if || f.stored_if(c)) put_model_field(model.get(), f, c, path);
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
  // Every value is untrusted: one integer or float of the right class, in
  // range and consistent with the others, or the file is refused by name.
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
  CheckpointMeta m;
  m.format_version = int(
      get_i64_in(file, "format_version", kOldestCheckpointFormat, kCheckpointFormatVersion, path));
  if (m.format_version >= 2) {
    const std::string opt = get_str(file, "optimizer", path);
    if (opt != "adamw" && opt != "muon")
      throw_error("checkpoint '", path, "' is damaged: attribute 'optimizer' is '", opt,
                  "'; it must be adamw or muon");
    m.optimizer = opt == "muon" ? OptimizerKind::muon : OptimizerKind::adamw;
  }
  m.step = get_i64_in(file, "step", 0, kMaxI64, path);
  m.tokens_seen = get_i64_in(file, "tokens_seen", 0, kMaxI64, path);
  m.optimizer_steps = int(get_i64_in(file, "optimizer_steps", 0, std::min(m.step, kMaxInt), path));
  if (H5Aexists(file, "time_budget_steps") > 0) {
    m.has_budget = true;
    m.budget_steps = get_i64_in(file, "time_budget_steps", 0, kMaxInt, path);
    if (m.budget_steps > 0 && m.budget_steps < m.step)
      throw_error("checkpoint '", path, "' is damaged: time_budget_steps ", m.budget_steps,
                  " is below its step ", m.step);
    const float used = get_f32(file, "time_budget_used_s", path);
    if (used < 0)
      throw_error("checkpoint '", path, "' is damaged: time_budget_used_s is ", used,
                  "; it must be a time in seconds");
    m.budget_used_s = used;
  }
  read_divergence_meta(file, path, m);
  m.seed = uint64_t(get_i64(file, "seed", path));
  m.world_size = int(get_i64_in(file, "world_size", 1, kMaxInt, path));
  m.shard_group_size = int(get_i64_in(file, "shard_group_size", 1, m.world_size, path));
  if (m.world_size % m.shard_group_size != 0)
    throw_error("checkpoint '", path, "' is damaged: shard_group_size ", m.shard_group_size,
                " does not divide world_size ", m.world_size);
  // Kept for people (tools/inspect_checkpoint.py shows it) and for a resume's
  // report of changed settings (src/trainer/checkpointing.cpp); no value is loaded
  // from it: a load uses the attributes checked here and in /model.
  m.config_text = get_str(file, "config", path);
  // Files of this format always carry them; without them a changed tensor
  // would load unnoticed. The count is checked against the model on load.
  get_u64s(file, kChecksumAttr, path);

  H5 model = open_group(file, "model", path);
  ModelConfig& c = m.model;
  const hid_t g = model.get();
  c.name = get_str(g, "name", path);
  // In model_fields()' order, so that a field stored only under another's
  // value (the RoPE scaling's shape under its factor) is missed by name.
  for (const ModelField& f : model_fields())
    if (H5Aexists(g, f.attribute) > 0 || !f.stored_if || f.stored_if(c))
      get_model_field(g, f, c, path);
  try {
    validate_model(c);
  } catch (const Error& e) {
    throw_error("checkpoint '", path,
                "' is damaged: its /model attributes describe no valid model (", e.what(), ")");
  }

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

std::string model_mismatch(const ModelConfig& saved, const ModelConfig& running,
                           const std::string& path) {
  auto text = [](auto v) -> std::string {
    if constexpr (std::is_same_v<decltype(v), bool>) {
      return v ? "true" : "false";
    } else {
      // The shortest text that parses back to the same value, as a flag takes
      // it: 1e-05, not 9.99999975e-06; 500000, not 5e+05.
      char buf[32];
      if constexpr (std::is_floating_point_v<decltype(v)>)
        return std::string(buf,
                           std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general).ptr);
      else
        return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
    }
  };
  // A field as the file holds it: one stored only under a condition is its
  // default where that does not hold (--head-dim 0: d_model / n_head wide).
  const ModelConfig defaults;
  auto as_stored = [&](const ModelField& f, const ModelConfig& c) {
    const bool stored = !f.stored_if || f.stored_if(c);
    return std::visit([&](auto field) { return text(stored ? c.*field : defaults.*field); },
                      f.member);
  };
  // The fields that give the saved weights their meaning (ModelField::resume).
  std::string differ, pass;
  for (const ModelField& f : model_fields()) {
    using R = ModelField::Resume;
    if (f.resume == R::may_change || (f.resume == R::must_match_where_both_stored &&
                                      !(f.stored_if(saved) && f.stored_if(running))))
      continue;
    const std::string was = as_stored(f, saved), now = as_stored(f, running);
    if (was == now) continue;
    differ += std::string(differ.empty() ? "" : ", ") + "--" + f.flag + " " + was +
              " (this run: " + now + ")";
    pass += std::string(pass.empty() ? "" : " ") + "--" + f.flag + " " + was;
  }
  if (differ.empty()) return "";
  // tools/import_hf.py writes the model's flags beside its checkpoint as
  // OUT.ini: name that file, the way a user of an import meets this first.
  std::filesystem::path ini(path);
  ini.replace_extension(".ini");
  std::error_code ec;
  const std::string config = std::filesystem::is_regular_file(ini, ec)
                                 ? " (or --config " + ini.string() + ", which holds them)"
                                 : "";
  return "checkpoint '" + path + "' was saved by another model: " + differ + "; pass " + pass +
         config + " to resume it";
}

std::string check_datasets(hid_t file, const ModelConfig& model, const std::string& path) {
  // Called once the file's /model fields match `model` (model_mismatch), so
  // a dataset missing, extra or of another shape is damage, not a choice.
  const std::string damaged = "checkpoint '" + path + "' is damaged: ";
  const std::vector<UnitSpec> units = model_units(model);
  size_t expected = 0;
  for (const char* group : kGroups) {
    // H5Lexists fails, rather than says no, when a parent group is missing.
    const bool parent = std::string(group) == "model" || H5Lexists(file, "optim", H5P_DEFAULT) > 0;
    if (!parent || H5Lexists(file, group, H5P_DEFAULT) <= 0)
      return damaged + "it has no group /" + group;
    expected = 0;
    for (const UnitSpec& u : units) {
      for (const ParamSpec& p : u.params) {
        ++expected;
        const std::string name = std::string(group) + "/" + p.name;
        std::vector<hsize_t> want(p.shape.begin(), p.shape.end()), found;
        if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
          return damaged + "it has no dataset " + name + " (expected shape " + shape_text(want) +
                 ")";
        H5 d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
        if (d.get() < 0 || !f32_dims(d.get(), &found))
          return damaged + name + " is not a float32 dataset";
        if (found != want)
          return damaged + "dataset " + name + " has shape " + shape_text(found) +
                 " but its /model attributes make it " + shape_text(want);
        if (std::string why = storage_problem(d.get(), hsize_t(p.numel())); !why.empty())
          return damaged + "dataset " + name + " " + why;
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
          return damaged + "it has a dataset " + group + "/" + n +
                 " that its /model attributes do not describe";
      }
  }
  return "";
}

}  // namespace fsdp::ckpt
