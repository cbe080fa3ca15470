// Chrome trace event JSON (the "traceEvents" format that Perfetto and chrome://tracing load) from
// profiler spans: one complete ("X") event per span in microseconds, one process per rank, one
// track per thread, named by metadata ("M") events.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/instrument/profiler.h"

namespace trainlab {

struct TraceProcess {
  int pid = 0;                    // the rank
  std::string name = "trainlab";  // shown as the process track's name
  std::string device;             // the backend, its device and this process's placement ("otherData")
};

std::string chrome_trace_json(const std::vector<ProfileSpan>& spans,
                              const std::map<std::uint32_t, std::string>& thread_names,
                              const TraceProcess& process = {});
// Writes it atomically, creating the directory when needed.
void write_chrome_trace(const std::string& path, const std::vector<ProfileSpan>& spans,
                        const std::map<std::uint32_t, std::string>& thread_names, const TraceProcess& process = {});

}  // namespace trainlab
