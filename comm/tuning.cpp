#include "comm/tuning.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "backends/error.h"
#include "engine/io/fileio.h"

namespace trainlab::comm {

namespace {

using nlohmann::json;
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
constexpr const char* kHandWritten[] = {"ring", "recursive_doubling", "halving_doubling"};

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// The geometric mean of two sizes: the boundary between a size one algorithm wins and the next.
std::int64_t boundary(std::int64_t below, std::int64_t above) {
  return static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(below) * static_cast<double>(above))));
}

// A member of an entry, checked: a whole number in [lo, hi] (or null where `null_means` is set).
std::int64_t whole(const json& entry, const char* key, std::int64_t lo, std::int64_t hi, const std::string& where,
                   const std::int64_t* null_means = nullptr) {
  if (!entry.contains(key)) throw Error(where + " has no \"" + key + "\"");
  const json& v = entry.at(key);
  if (v.is_null() && null_means != nullptr) return *null_means;
  if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
    throw Error(fmt::format("{}: \"{}\" is {}, not a whole number in [{}, {}]{}", where, key, one_line(v.dump()), lo,
                            hi, null_means != nullptr ? " or null" : ""));
  return v.get<std::int64_t>();
}

std::string text_member(const json& entry, const char* key) {
  return entry.contains(key) && entry.at(key).is_string() ? entry.at(key).get<std::string>() : std::string();
}

TuningEntry entry_of(const json& e, const std::string& where) {
  if (!e.is_object()) throw Error(where + " is not an object");
  TuningEntry t;
  t.world = static_cast<int>(whole(e, "world", 1, 1 << 20, where));
  const std::string at = fmt::format("{} (world {})", where, t.world);
  t.recursive_doubling_below = whole(e, "recursive_doubling_below", 0, kNever - 1, at, &kNever);
  t.ring_from = whole(e, "ring_from", 0, kNever - 1, at, &kNever);
  if (t.ring_from < t.recursive_doubling_below)
    throw Error(fmt::format("{}: ring_from {} is below recursive_doubling_below {} (the ring takes the largest sizes)",
                            at, t.ring_from, t.recursive_doubling_below));
  t.single_copy_from =
      e.contains("single_copy_from") ? whole(e, "single_copy_from", 0, kNever - 1, at, &kNever) : kNever;
  t.run_id = text_member(e, "run_id");
  t.communicator = text_member(e, "communicator");
  t.library = text_member(e, "library");
  if (e.contains("measured") && e.at("measured").is_array()) {
    for (const json& m : e.at("measured")) {
      if (!m.is_object() || !m.contains("bytes") || !m.at("bytes").is_number_integer()) continue;
      TuningPoint p;
      p.bytes = m.at("bytes").get<std::int64_t>();
      p.best = text_member(m, "best");
      if (m.contains("median_us") && m.at("median_us").is_object())
        for (const auto& [name, us] : m.at("median_us").items())
          if (us.is_number()) p.median_s[name] = us.get<double>() * 1e-6;
      t.measured.push_back(p);
    }
  }
  return t;
}

json json_of(const TuningEntry& t) {
  json measured = json::array();
  for (const TuningPoint& p : t.measured) {
    json us = json::object();
    for (const auto& [name, s] : p.median_s) us[name] = s * 1e6;
    measured.push_back({{"bytes", p.bytes}, {"best", p.best}, {"median_us", us}});
  }
  return {{"world", t.world},
          {"recursive_doubling_below",
           t.recursive_doubling_below == kNever ? json(nullptr) : json(t.recursive_doubling_below)},
          {"ring_from", t.ring_from == kNever ? json(nullptr) : json(t.ring_from)},
          {"single_copy_from", t.single_copy_from == kNever ? json(nullptr) : json(t.single_copy_from)},
          {"run_id", t.run_id},
          {"communicator", t.communicator},
          {"library", t.library},
          {"measured", measured}};
}

}  // namespace

std::string fastest(const TuningPoint& point) {
  std::string best;
  for (const char* name : kHandWritten) {
    const auto it = point.median_s.find(name);
    if (it != point.median_s.end() && (best.empty() || it->second < point.median_s.at(best))) best = name;
  }
  return best;
}

TuningEntry derive_thresholds(int world, const std::vector<TuningPoint>& points,
                              std::vector<std::string>* disagreements) {
  TL_CHECK(!points.empty(), "allreduce tuning: no sizes measured");
  TuningEntry t;
  t.world = world;
  t.measured = points;
  std::sort(t.measured.begin(), t.measured.end(), [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
  const std::size_t n = t.measured.size();
  for (TuningPoint& p : t.measured) p.best = fastest(p);
  std::size_t k1 = 0;  // sizes [0, k1) go to recursive doubling
  while (k1 < n && t.measured[k1].best == "recursive_doubling") ++k1;
  std::size_t k2 = n;  // sizes [k2, n) to the ring
  while (k2 > k1 && t.measured[k2 - 1].best == "ring") --k2;
  const auto between = [&](std::size_t k) {
    return k == 0 ? 0 : k == n ? kNever : boundary(t.measured[k - 1].bytes, t.measured[k].bytes);
  };
  t.recursive_doubling_below = between(k1);
  t.ring_from = k1 == n ? kNever : between(k2);
  t.single_copy_from = kNever;
  const bool window = std::all_of(t.measured.begin(), t.measured.end(),
                                  [](const TuningPoint& p) { return p.median_s.count("single_copy") > 0; });
  if (window) {
    // Sizes [k3, n) to single-copy: the k3 whose choice takes the least time summed over the sizes
    // (a near-tie at one size does not move the threshold past sizes it wins by far); a tie keeps
    // the larger k3. A size inside the range that another algorithm won is a disagreement too.
    const auto given = [&](std::size_t i) { return t.measured[i].median_s.at(t.measured[i].best); };
    double cost = 0;
    for (std::size_t i = 0; i < n; ++i) cost += given(i);
    double best_cost = cost;
    std::size_t k3 = n;
    for (std::size_t k = n; k-- > 0;) {
      cost += t.measured[k].median_s.at("single_copy") - given(k);
      if (cost < best_cost) {
        best_cost = cost;
        k3 = k;
      }
    }
    t.single_copy_from = k3 == n ? kNever : between(k3);
    for (std::size_t i = k3; i < n && disagreements != nullptr; ++i) {
      const TuningPoint& p = t.measured[i];
      const double single = p.median_s.at("single_copy"), best = given(i);
      if (single > best)
        disagreements->push_back(
            fmt::format("at {} bytes {} was fastest ({:.1f} us); the thresholds give single_copy "
                        "({:.1f} us, {:+.1f}%)",
                        p.bytes, p.best, best * 1e6, single * 1e6, (single / best - 1) * 100));
    }
  }
  for (std::size_t i = k1; i < k2 && disagreements != nullptr; ++i) {
    const TuningPoint& p = t.measured[i];
    if (p.best == "halving_doubling" || !p.median_s.count("halving_doubling")) continue;
    const double given = p.median_s.at("halving_doubling"), best = p.median_s.at(p.best);
    disagreements->push_back(
        fmt::format("at {} bytes {} was fastest ({:.1f} us); the thresholds give halving_doubling "
                    "({:.1f} us, {:+.1f}%)",
                    p.bytes, p.best, best * 1e6, given * 1e6, (given / best - 1) * 100));
  }
  return t;
}

TuningFile read_tuning(const std::string& path) {
  const std::string where = "allreduce tuning " + path;
  std::vector<unsigned char> bytes;
  try {
    bytes = read_file(path, 16u << 20);
  } catch (const Error& e) {
    throw Error(where + ": " + one_line(e.what()));
  }
  const auto* text = reinterpret_cast<const char*>(bytes.data());
  check_json_bounds(text, bytes.size(), 16, 16u << 20, where);
  json root;
  try {
    root = json::parse(text, text + bytes.size());
  } catch (const json::exception& e) {
    throw Error(where + ": not JSON (" + one_line(e.what()) + ")");
  }
  if (!root.is_object() || !root.contains("format") || root.at("format") != kTuningFormat)
    throw Error(fmt::format(
        "{}: not a trainlab all-reduce tuning file (format {}, expected \"{}\"; bench_allreduce "
        "--write-tuning writes one)",
        where,
        root.is_object() && root.contains("format") ? one_line(root.at("format").dump()) : std::string("missing"),
        kTuningFormat));
  if (!root.contains("entries") || !root.at("entries").is_array())
    throw Error(where + ": \"entries\" is missing or not an array");
  TuningFile file;
  for (std::size_t i = 0; i < root.at("entries").size(); ++i) {
    TuningEntry e = entry_of(root.at("entries")[i], fmt::format("{}: entry {}", where, i));
    for (const TuningEntry& seen : file.entries)
      if (seen.world == e.world) throw Error(fmt::format("{}: world {} has two entries", where, e.world));
    file.entries.push_back(std::move(e));
  }
  return file;
}

void merge_entry(TuningFile& file, const TuningEntry& entry) {
  auto& es = file.entries;
  es.erase(std::remove_if(es.begin(), es.end(), [&](const TuningEntry& e) { return e.world == entry.world; }),
           es.end());
  es.push_back(entry);
  std::sort(es.begin(), es.end(), [](const auto& a, const auto& b) { return a.world < b.world; });
}

void write_tuning(const std::string& path, const TuningFile& file) {
  if (file_kind(path) == "a regular file") {
    try {
      read_tuning(path);
    } catch (const Error& e) {
      throw Error("refusing to replace " + path + ", which is not a tuning file we wrote (" + one_line(e.what()) + ")");
    }
  }
  json entries = json::array();
  for (const TuningEntry& e : file.entries) entries.push_back(json_of(e));
  const json root = {{"format", kTuningFormat}, {"entries", entries}};
  write_file_atomic(path, root.dump(1) + "\n");
}

AlgorithmThresholds thresholds_of(const TuningEntry& entry, const std::string& path) {
  AlgorithmThresholds t;
  t.recursive_doubling_below = entry.recursive_doubling_below;
  t.ring_from = entry.ring_from;
  t.single_copy_from = entry.single_copy_from;
  t.source = fmt::format("{}, world {}{}", path, entry.world, entry.run_id.empty() ? "" : ", run " + entry.run_id);
  return t;
}

AlgorithmThresholds thresholds_for(const std::string& path, int world, std::string* note) {
  if (path.empty()) return {};
  const TuningFile file = read_tuning(path);
  std::string worlds;
  for (const TuningEntry& e : file.entries) {
    if (e.world == world) return thresholds_of(e, path);
    worlds += (worlds.empty() ? "" : ", ") + std::to_string(e.world);
  }
  if (note != nullptr)
    *note = fmt::format("{} has no entry for world {} (it has: {}); the built-in thresholds apply", path, world,
                        worlds.empty() ? "none" : worlds);
  AlgorithmThresholds builtin;
  builtin.source = "built-in; " + path + " has no entry for world " + std::to_string(world);
  return builtin;
}

}  // namespace trainlab::comm
