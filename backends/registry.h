// Backends are found by name. Each backend's own source file registers itself with a static
// BackendRegistration, so the engine never names a backend.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace trainlab {

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

struct BackendInfo {
  std::string name;
  std::string description;
  DeviceType device_type;
  int priority;  // the highest-priority CPU backend is the default
};

class BackendRegistration {
 public:
  BackendRegistration(BackendInfo info, BackendFactory factory);
};

// The process-wide instance of the named backend, created on first use.
// Throws Error naming the unknown backend and listing the registered ones.
Backend& get_backend(const std::string& name);
std::vector<BackendInfo> registered_backends();
std::string registered_backend_names();  // "eigen, onednn, reference"
std::string default_backend_name();      // the best registered CPU backend

}  // namespace trainlab
