// SPDX-License-Identifier: Apache-2.0
// Install records (install_record.h): a line-based text file whose last line is a checksum of the
// lines above it, so a truncated or edited file is recognised and ignored.
#include "jit/install_record.h"

#include <charconv>

#include <fmt/format.h>

#include "jit/kernel_cache.h"

namespace shapevm::jit {

namespace {

constexpr std::string_view kHeader = "shapevm install record 1";

std::uint64_t fnv1a(std::string_view text, std::uint64_t hash = 0xCBF29CE484222325ULL) {
  for (const char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  return hash;
}

// Splits off the next space-separated field of `line` (the rest stays in `line`).
std::string_view field(std::string_view& line) {
  const std::size_t space = line.find(' ');
  const std::string_view out = line.substr(0, space);
  line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
  return out;
}

bool number(std::string_view text, int& out) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size() && out >= 0;
}

void appendEntry(std::string& out, std::string_view kind, int index, const InstallRecord::Entry& entry) {
  for (std::size_t m = 0; m < entry.sigs.size(); ++m) {
    for (const std::string& sig : entry.sigs[m]) {
      out += fmt::format("{} {} {} {} {} {} {}\n", kind, index, entry.first_site, entry.sigs.size(),
                         entry.tuned ? 1 : 0, m, sig);
    }
  }
}

void mergeEntries(std::map<int, InstallRecord::Entry>& into, const std::map<int, InstallRecord::Entry>& from) {
  for (const auto& [index, entry] : from) {
    auto [it, added] = into.try_emplace(index, entry);
    if (added) continue;
    InstallRecord::Entry& mine = it->second;
    if (mine.first_site != entry.first_site || mine.sigs.size() != entry.sigs.size()) continue;  // not the same range
    mine.tuned = mine.tuned || entry.tuned;
    for (std::size_t m = 0; m < entry.sigs.size(); ++m) mine.sigs[m].insert(entry.sigs[m].begin(), entry.sigs[m].end());
  }
}

}  // namespace

void InstallRecord::merge(const InstallRecord& other) {
  mergeEntries(sites, other.sites);
  mergeEntries(ranges, other.ranges);
}

std::string InstallRecord::encode() const {
  std::string out = fmt::format("{}\nidentity {}\n", kHeader, identity);
  for (const auto& [index, entry] : sites) appendEntry(out, "site", index, entry);
  for (const auto& [index, entry] : ranges) appendEntry(out, "range", index, entry);
  out += fmt::format("checksum {:016x}\n", fnv1a(out));
  return out;
}

Expected<InstallRecord> InstallRecord::decode(std::string_view text) {
  const std::size_t tail = text.rfind("checksum ");
  if (tail == std::string_view::npos || (tail > 0 && text[tail - 1] != '\n')) {
    return makeError(ErrorCode::InvalidArgument, "no checksum line (truncated?)");
  }
  if (fmt::format("checksum {:016x}\n", fnv1a(text.substr(0, tail))) != text.substr(tail)) {
    return makeError(ErrorCode::InvalidArgument, "the checksum does not match (damaged or truncated)");
  }
  InstallRecord record;
  std::string_view body = text.substr(0, tail);
  int line_number = 0;
  while (!body.empty()) {
    const std::size_t end = body.find('\n');
    std::string_view line = body.substr(0, end);
    body = end == std::string_view::npos ? std::string_view() : body.substr(end + 1);
    ++line_number;
    if (line_number == 1) {
      if (line != kHeader) return makeError(ErrorCode::InvalidArgument, "not an install record of this format");
      continue;
    }
    const std::string_view kind = field(line);
    if (kind == "identity") {
      record.identity = std::string(line);
      continue;
    }
    int index = 0, first = 0, members = 0, tuned = 0, member = 0;
    const bool ok = (kind == "site" || kind == "range") && number(field(line), index) && number(field(line), first) &&
                    number(field(line), members) && number(field(line), tuned) && number(field(line), member) &&
                    members > 0 && members <= 4096 && member < members && tuned <= 1 && !line.empty();
    if (!ok) return makeError(ErrorCode::InvalidArgument, "line {} is malformed", line_number);
    std::map<int, Entry>& entries = kind == "site" ? record.sites : record.ranges;
    Entry& entry = entries[index];
    if (entry.sigs.empty()) {
      entry.first_site = first;
      entry.sigs.resize(static_cast<std::size_t>(members));
    } else if (entry.first_site != first || entry.sigs.size() != static_cast<std::size_t>(members)) {
      return makeError(ErrorCode::InvalidArgument, "line {} contradicts an earlier line", line_number);
    }
    entry.tuned = entry.tuned || tuned == 1;
    entry.sigs[static_cast<std::size_t>(member)].insert(std::string(line));
  }
  if (record.identity.empty()) return makeError(ErrorCode::InvalidArgument, "no identity line");
  return record;
}

std::string installRecordIdentity(std::string_view function_text, int level, const std::string& code_identity) {
  std::uint64_t hash = fnv1a(function_text);
  hash = fnv1a(fmt::format("\nlevel {}\n", level), hash);
  hash = fnv1a(code_identity, hash);
  hash = fnv1a(shapevmBuildIdentity(), hash);
  return fmt::format("{:016x}", hash);
}

bool installRecordIntact(std::string_view text) {
  return InstallRecord::decode(text).hasValue();
}

}  // namespace shapevm::jit
