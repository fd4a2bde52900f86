// The options that pick one of a few choices, as enums. Their names are turned
// into these once, when the options are parsed; code that acts on a choice
// compares enums, and the names come back only for printing (--help, the INI
// copy of the configuration, messages).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "common/dtype.h"
#include "common/error.h"
#include "model/transformer.h"
#include "shard/optimizer_config.h"
#include "src/policy/divergence.h"
#include "src/policy/lr_schedule.h"

namespace fsdp {

enum class Device { automatic, cpu, cuda };           // automatic: cuda when a GPU is visible
enum class Precision { automatic, fp32, bf16, fp8 };  // automatic: fp32 on cpu, bf16 on cuda
enum class DeviceComm { automatic, staged };          // staged: a test mode (docs/RUNNING.md)

template <typename E>
struct Choice {
  E value;
  std::string_view name;
};

// Every name an option accepts for E, in the order --help lists them.
template <typename E>
struct Choices;
template <>
struct Choices<Device> {
  static constexpr std::array<Choice<Device>, 3> all{
      {{Device::automatic, "auto"}, {Device::cpu, "cpu"}, {Device::cuda, "cuda"}}};
};
template <>
struct Choices<Precision> {
  static constexpr std::array<Choice<Precision>, 4> all{{{Precision::automatic, "auto"},
                                                         {Precision::fp32, "fp32"},
                                                         {Precision::bf16, "bf16"},
                                                         {Precision::fp8, "fp8"}}};
};
template <>
struct Choices<DeviceComm> {
  static constexpr std::array<Choice<DeviceComm>, 2> all{
      {{DeviceComm::automatic, "auto"}, {DeviceComm::staged, "staged"}}};
};
template <>
struct Choices<LrShape> {
  static constexpr std::array<Choice<LrShape>, 3> all{
      {{LrShape::cosine, "cosine"}, {LrShape::wsd, "wsd"}, {LrShape::linear, "linear"}}};
};
template <>
struct Choices<OptimizerKind> {
  static constexpr std::array<Choice<OptimizerKind>, 2> all{
      {{OptimizerKind::adamw, "adamw"}, {OptimizerKind::muon, "muon"}}};
};
template <>
struct Choices<MuonLrAdjust> {
  static constexpr std::array<Choice<MuonLrAdjust>, 2> all{
      {{MuonLrAdjust::match_rms_adamw, "match_rms_adamw"}, {MuonLrAdjust::original, "original"}}};
};
template <>
struct Choices<MuonNsCoefficients> {
  static constexpr std::array<Choice<MuonNsCoefficients>, 2> all{
      {{MuonNsCoefficients::jordan, "jordan"},
       {MuonNsCoefficients::polar_express, "polar_express"}}};
};
template <>
struct Choices<OnDivergence> {
  static constexpr std::array<Choice<OnDivergence>, 2> all{
      {{OnDivergence::stop, "stop"}, {OnDivergence::rollback, "rollback"}}};
};
template <>
struct Choices<Recompute> {
  static constexpr std::array<Choice<Recompute>, 3> all{
      {{Recompute::none, "none"}, {Recompute::mlp, "mlp"}, {Recompute::block, "block"}}};
};
// Only the element types gradients may be reduce-scattered in (--reduce-dtype),
// under the names users know, not dtype_name()'s.
template <>
struct Choices<DType> {
  static constexpr std::array<Choice<DType>, 2> all{{{DType::f32, "fp32"}, {DType::bf16, "bf16"}}};
};

template <typename E>
std::optional<E> find_choice(std::string_view name) {
  for (const auto& c : Choices<E>::all)
    if (c.name == name) return c.value;
  return std::nullopt;
}

template <typename E>
std::string choice_name(E value) {
  for (const auto& c : Choices<E>::all)
    if (c.value == value) return std::string(c.name);
  throw_error("internal: an enum value without a name (src/options/option_enums.h)");
}

// "auto, cpu or cuda" for messages; "auto|cpu|cuda" for --help.
template <typename E>
std::string choice_list(std::string_view last_sep = " or ", std::string_view sep = ", ") {
  std::string s;
  const auto& all = Choices<E>::all;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) s += i + 1 == all.size() ? last_sep : sep;
    s += all[i].name;
  }
  return s;
}

}  // namespace fsdp
