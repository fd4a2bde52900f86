// The op table's protocol (see op_table.h): the inputs a case draws, the
// parity protocol, case names, and the list of families that make the table.
#include "tests/model/op_table/op_table.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "model/params.h"

namespace fsdp::test {
namespace {

// A function-local list, so families may add themselves during static
// initialisation in any order.
std::vector<OpFamily>& families() {
  static std::vector<OpFamily> f;
  return f;
}

std::vector<OpFamily> sorted_families() {
  std::vector<OpFamily> f = families();
  std::sort(f.begin(), f.end(),
            [](const OpFamily& a, const OpFamily& b) { return a.name < b.name; });
  return f;
}

}  // namespace

std::vector<float> Env::rnd(int64_t n, float lo, float hi) {
  const int64_t fresh = fresh_limit > 0 && fresh_limit < n ? fresh_limit : n;
  std::vector<float> v = random_bf16(rng, fresh, lo, hi);
  v.resize(size_t(n));
  for (int64_t i = fresh; i < n; ++i) v[size_t(i)] = v[size_t(i - fresh)];
  return v;
}

Tensor Env::out(DType d, int64_t n) {
  Tensor t = pool.make(dt(d), n);
  poison(ops, t);
  return t;
}

void run_parity(
    const Bound& r, const Bound& d, Ops& ref, Ops& dev,
    const std::function<void(const std::vector<Check>&, const std::vector<Check>&)>& compare) {
  FSDP_CHECK(r.fwd && d.fwd && bool(r.bwd) == bool(d.bwd) &&
                 r.from_ref.size() == d.from_ref.size() && r.from_dev.size() == d.from_dev.size(),
             "the case bound different calls on the two backends");
  r.fwd();
  d.fwd();
  compare(r.fwd_checks, d.fwd_checks);
  if (!d.bwd) return;
  for (size_t i = 0; i < d.from_ref.size(); ++i)
    upload(dev, d.from_ref[i], download(ref, r.from_ref[i]));
  for (size_t i = 0; i < d.from_dev.size(); ++i)
    upload(ref, r.from_dev[i], download(dev, d.from_dev[i]));
  r.bwd();
  d.bwd();
  compare(r.bwd_checks, d.bwd_checks);
}

std::string OpCase::name() const {
  std::string s;
  for (char ch : op + " " + shape + " " + variant) {
    if (ch == '=') continue;  // "M=256" -> "M256"
    if (std::isalnum(static_cast<unsigned char>(ch)))
      s += ch;
    else if (!s.empty() && s.back() != '_')
      s += '_';
  }
  while (!s.empty() && s.back() == '_') s.pop_back();
  return s;
}

bool add_op_family(OpFamily f) {
  FSDP_CHECK(!f.name.empty() && f.cases, "an op family needs a name and its cases");
  for (const OpFamily& g : families()) FSDP_CHECK(g.name != f.name, "op family ", f.name, " twice");
  families().push_back(std::move(f));
  return true;
}

std::vector<OpCase> op_cases() {
  std::vector<OpCase> t;
  for (const OpFamily& f : sorted_families()) f.cases(t);
  return t;
}

std::vector<OpCase> model_op_cases(const ModelConfig& c, int B, int T) {
  const ModelShape m{c, B, T, model_units(c).at(1).numel()};
  std::vector<OpCase> t;
  for (const OpFamily& f : sorted_families())
    if (f.model_cases) f.model_cases(t, m);
  return t;
}

}  // namespace fsdp::test
