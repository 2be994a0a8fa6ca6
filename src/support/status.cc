// SPDX-License-Identifier: Apache-2.0
// Status helpers and the name/meaning tables generated from errors.def.
#include "shapevm/status.h"

#include <array>

namespace shapevm {
namespace {
struct ErrorRow {
  std::string_view name;
  std::string_view meaning;
};
constexpr std::array kErrorRows = {
#define SVM_ERROR(name, meaning) ErrorRow{#name, meaning},
#include "shapevm/errors.def"
#undef SVM_ERROR
};
const std::string kEmpty;
}  // namespace

std::string_view errorCodeName(ErrorCode code) {
  auto index = static_cast<std::size_t>(code);
  return index < kErrorRows.size() ? kErrorRows[index].name : "UnknownError";
}

std::string_view errorCodeMeaning(ErrorCode code) {
  auto index = static_cast<std::size_t>(code);
  return index < kErrorRows.size() ? kErrorRows[index].meaning : "unknown error";
}

const std::string& Status::message() const { return state_ ? state_->message : kEmpty; }

std::string Status::toString() const {
  if (isOk()) return "Ok";
  return fmt::format("{}: {}", errorCodeName(state_->code), state_->message);
}

Status& Status::withContext(std::string_view context) {
  if (state_ && !context.empty()) state_->message = fmt::format("{}: {}", context, state_->message);
  return *this;
}

}  // namespace shapevm
