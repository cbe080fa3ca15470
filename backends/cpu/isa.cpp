#include "backends/cpu/isa.h"

#include <cpuid.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backends/error.h"

#ifndef TRAINLAB_BUILD_TARGET
#define TRAINLAB_BUILD_TARGET "unknown"
#endif

namespace trainlab::cpu {

namespace {

// Before anything else in the library runs (static constructors of priority 101 come before the
// default ones): a build whose compiler target this CPU lacks (-march=native copied to an older
// machine, or the x86-64-v3 baseline on a CPU without AVX2) stops with one line instead of dying
// with SIGILL in the first vectorised loop. This function itself is compiled for plain x86-64;
// the macros it tests say what the rest of the build was compiled for.
__attribute__((constructor(101), target("arch=x86-64"))) void refuse_a_cpu_the_build_cannot_run_on() {
  __builtin_cpu_init();
  const char* missing = nullptr;
#if defined(__AVX512VL__)
  if (!__builtin_cpu_supports("avx512vl")) missing = "avx512vl";
#endif
#if defined(__AVX512BW__)
  if (!__builtin_cpu_supports("avx512bw")) missing = "avx512bw";
#endif
#if defined(__AVX512F__)
  if (!__builtin_cpu_supports("avx512f")) missing = "avx512f";
#endif
#if defined(__FMA__)
  if (!__builtin_cpu_supports("fma")) missing = "fma";
#endif
#if defined(__AVX2__)
  if (!__builtin_cpu_supports("avx2")) missing = "avx2";
#endif
  if (missing == nullptr) return;
  const char* parts[] = {"trainlab: this build (compiler target ", TRAINLAB_BUILD_TARGET, ") needs the CPU feature ",
                         missing,
                         ", which this CPU lacks; build it here, or portably with cmake -DTRAINLAB_NATIVE=OFF "
                         "(x86-64-v3: AVX2 and FMA)\n"};
  for (const char* part : parts) {
    if (write(2, part, std::strlen(part)) < 0) break;
  }
  _exit(70);
}

// F16C from cpuid leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

CpuIsa detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  if (!avx2) return CpuIsa::x86_64;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (!avx512) return CpuIsa::avx2;
  return __builtin_cpu_supports("avx512bf16") ? CpuIsa::avx512_core_bf16 : CpuIsa::avx512_core;
}

struct Cap {
  std::string variable, value;
  CpuIsa isa = CpuIsa::avx512_core_bf16;  // the highest: no cap
};

// The cap in the environment, or none. oneDNN's names, mapped to the family they allow.
Cap read_cap() {
  Cap cap;
  for (const char* variable : {"TRAINLAB_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && *value != '\0') {
      cap.variable = variable;
      cap.value = value;
      break;
    }
  }
  if (!cap.variable.empty()) cap.isa = cpu_isa_cap_value(cap.variable, cap.value);
  return cap;
}

const Cap& cap() {
  static const Cap value = read_cap();
  return value;
}

}  // namespace

CpuIsa cpu_isa_cap_value(const std::string& variable, const std::string& value) {
  std::string upper = value;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  static const std::pair<const char*, CpuIsa> kNames[] = {
      {"SSE41", CpuIsa::x86_64},
      {"AVX", CpuIsa::x86_64},
      {"AVX512_MIC", CpuIsa::x86_64},  // Xeon Phi: no AVX-512 BW/DQ/VL, so no AVX-512 loops
      {"AVX512_MIC_4OPS", CpuIsa::x86_64},
      {"AVX2", CpuIsa::avx2},
      {"AVX2_VNNI", CpuIsa::avx2},
      {"AVX512_CORE", CpuIsa::avx512_core},
      {"AVX512_CORE_VNNI", CpuIsa::avx512_core},
      {"AVX512_CORE_BF16", CpuIsa::avx512_core_bf16},
      {"AVX512_CORE_FP16", CpuIsa::avx512_core_bf16},
      {"AVX512_CORE_AMX", CpuIsa::avx512_core_bf16},
      {"ALL", CpuIsa::avx512_core_bf16},
  };
  for (const auto& [name, isa] : kNames) {
    if (upper == name) return isa;
  }
  throw Error(variable + "=" + quote_value(value) +
              " names no instruction set (allowed: SSE41, AVX, AVX2, AVX2_VNNI, AVX512_CORE, AVX512_CORE_VNNI, "
              "AVX512_CORE_BF16, AVX512_CORE_FP16, AVX512_CORE_AMX, ALL)");
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::x86_64:
      return "x86-64";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512_core:
      return "avx512_core";
    case CpuIsa::avx512_core_bf16:
      return "avx512_core_bf16";
  }
  return "invalid";
}

CpuIsa detected_cpu_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

CpuIsa cpu_isa() { return std::min(detected_cpu_isa(), cap().isa); }

std::string cpu_isa_cap() {
  const Cap& c = cap();
  if (c.variable.empty() || c.isa >= detected_cpu_isa()) return "";
  return c.variable + "=" + c.value;
}

const char* build_target() { return TRAINLAB_BUILD_TARGET; }

std::string describe_cpu_isa() {
  std::string out = cpu_isa_name(cpu_isa());
  out += " (this CPU: ";
  out += cpu_isa_name(detected_cpu_isa());
  const std::string capped = cpu_isa_cap();
  if (!capped.empty()) out += ", capped by " + capped;
  out += "; build ";
  out += build_target();
  out += ")";
  return out;
}

}  // namespace trainlab::cpu
