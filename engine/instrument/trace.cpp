#include "engine/instrument/trace.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "backends/error.h"
#include "engine/io/fileio.h"

namespace trainlab {

std::string chrome_trace_json(const std::vector<ProfileSpan>& spans,
                              const std::map<std::uint32_t, std::string>& thread_names, const TraceProcess& process) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", process.pid}, {"args", {{"name", process.name}}}});
  std::map<std::uint32_t, bool> seen;
  for (const auto& span : spans) seen[span.thread] = true;
  for (const auto& [thread, _] : seen) {
    auto it = thread_names.find(thread);
    const std::string name = it != thread_names.end() ? it->second : "thread " + std::to_string(thread);
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", process.pid}, {"tid", thread}, {"args", {{"name", name}}}});
  }
  for (const auto& span : spans) {
    events.push_back({{"name", span.name},
                      {"ph", "X"},
                      {"pid", process.pid},
                      {"tid", span.thread},
                      {"ts", static_cast<double>(span.start_ns) / 1000.0},
                      {"dur", static_cast<double>(span.end_ns - span.start_ns) / 1000.0}});
  }
  nlohmann::json trace{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  if (!process.device.empty()) trace["otherData"] = {{"device", process.device}};
  return trace.dump();
}

void write_chrome_trace(const std::string& path, const std::vector<ProfileSpan>& spans,
                        const std::map<std::uint32_t, std::string>& thread_names, const TraceProcess& process) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    TL_CHECK(!ec, "cannot create the trace directory '" + parent.string() + "': " + ec.message());
  }
  write_file_atomic(path, chrome_trace_json(spans, thread_names, process));
}

}  // namespace trainlab
