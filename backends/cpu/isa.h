// The x86-64 instruction-set family the CPU backends run their hand-written loops with, chosen once
// at run time: what this CPU has (cpuid, and the OS's support for the registers), capped by the
// environment. One variable makes the whole process behave like an older CPU: oneDNN's own
// ONEDNN_MAX_CPU_ISA caps oneDNN's dispatch and, read here too, trainlab's (TRAINLAB_MAX_CPU_ISA,
// when set, caps trainlab's loops alone). That is how CI runs the suite as on an AVX2 machine.
//
// The families are oneDNN's names, so that a ledger row, the golden-weight table and oneDNN's
// header agree: x86-64 (below AVX2), avx2 (AVX2 + FMA + F16C), avx512_core (AVX-512 F/BW/DQ/VL),
// avx512_core_bf16 (plus AVX512_BF16).
#pragma once

#include <cstdint>
#include <string>

namespace trainlab::cpu {

enum class CpuIsa : std::uint8_t { x86_64, avx2, avx512_core, avx512_core_bf16 };

const char* cpu_isa_name(CpuIsa isa);  // "x86-64", "avx2", "avx512_core", "avx512_core_bf16"

// What the CPU and the OS support, uncapped.
CpuIsa detected_cpu_isa();

// The family in force: detected_cpu_isa() capped by TRAINLAB_MAX_CPU_ISA, else by
// ONEDNN_MAX_CPU_ISA (oneDNN's values: SSE41, AVX, AVX2, AVX2_VNNI, AVX512_CORE, AVX512_CORE_VNNI,
// AVX512_CORE_BF16, AVX512_CORE_FP16, AVX512_CORE_AMX, ALL; any case). Read once. Throws Error
// naming the variable, its value and the allowed values when the value names no ISA.
CpuIsa cpu_isa();

// The family a cap's value allows (oneDNN's names above, any case), for the variable named in the
// error: throws Error naming both and the allowed values when the value names no ISA.
CpuIsa cpu_isa_cap_value(const std::string& variable, const std::string& value);

// The cap that applies, as "ONEDNN_MAX_CPU_ISA=AVX2", or "" when none does.
std::string cpu_isa_cap();

// What the compiler was told to target: "native" (-march=native: this build runs only on CPUs
// like the one it was built on) or the portable baseline ("x86-64-v3").
const char* build_target();

// One line: "avx2 (this CPU: avx512_core_bf16, capped by ONEDNN_MAX_CPU_ISA=AVX2; build x86-64-v3)".
std::string describe_cpu_isa();

}  // namespace trainlab::cpu
