// The Driver table (cuda_driver.h): libcuda.so.1's entry points, opened with
// dlopen on first use so that the extension builds and imports with no
// driver, or a table swapped in with set_driver_override.

#include <dlfcn.h>

#include <atomic>
#include <string>

#include "cuda_driver.h"

namespace jaxptx::cu {

namespace {

struct Loaded {
  Driver api{};
  std::string error;
};

template <typename F>
bool bind(void* lib, const char* name, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && error.empty()) error = std::string("libcuda.so.1 has no symbol ") + name;
  return fn != nullptr;
}

// An entry point the handler can do without: null when libcuda lacks it.
template <typename F>
void optional(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
}

Loaded open_driver() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    out.error = std::string("cannot open libcuda.so.1 (no NVIDIA driver?): ") + (why ? why : "");
    return out;
  }
  Driver& d = out.api;
  bind(lib, "cuInit", d.cuInit, out.error);
  bind(lib, "cuGetErrorName", d.cuGetErrorName, out.error);
  bind(lib, "cuGetErrorString", d.cuGetErrorString, out.error);
  bind(lib, "cuStreamGetCtx", d.cuStreamGetCtx, out.error);
  bind(lib, "cuCtxGetCurrent", d.cuCtxGetCurrent, out.error);
  bind(lib, "cuCtxPushCurrent_v2", d.cuCtxPushCurrent_v2, out.error);
  bind(lib, "cuCtxPopCurrent_v2", d.cuCtxPopCurrent_v2, out.error);
  bind(lib, "cuModuleLoadDataEx", d.cuModuleLoadDataEx, out.error);
  bind(lib, "cuModuleGetFunction", d.cuModuleGetFunction, out.error);
  bind(lib, "cuFuncSetAttribute", d.cuFuncSetAttribute, out.error);
  bind(lib, "cuLaunchKernelEx", d.cuLaunchKernelEx, out.error);
  bind(lib, "cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync_v2, out.error);
  bind(lib, "cuStreamSynchronize", d.cuStreamSynchronize, out.error);
  bind(lib, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH_v2, out.error);
  // Every launch reads its kernel's parameter sizes with it (the handler's
  // check of a call's parameters), and only CUDA 12.4's driver has it.
  if (!bind(lib, "cuFuncGetParamInfo", d.cuFuncGetParamInfo, out.error) &&
      out.error == "libcuda.so.1 has no symbol cuFuncGetParamInfo") {
    out.error += ": jaxptx needs an NVIDIA driver for CUDA 12.4 or newer (R550+)";
  }
  // Optional: only kernels with TMA descriptors need it.
  optional(lib, "cuTensorMapEncodeTiled", d.cuTensorMapEncodeTiled);
  // Optional: only kernels with peers need them (cuda_peers.cc refuses
  // their calls when one is missing).
  optional(lib, "cuDeviceGetCount", d.cuDeviceGetCount);
  optional(lib, "cuCtxGetDevice", d.cuCtxGetDevice);
  optional(lib, "cuDeviceCanAccessPeer", d.cuDeviceCanAccessPeer);
  optional(lib, "cuCtxEnablePeerAccess", d.cuCtxEnablePeerAccess);
  optional(lib, "cuMemAlloc_v2", d.cuMemAlloc_v2);
  optional(lib, "cuMemcpyHtoDAsync_v2", d.cuMemcpyHtoDAsync_v2);
  // Optional: only kernels that take a multicast address need them
  // (cuda_multicast.cc refuses their calls when one is missing).
  optional(lib, "cuDeviceGetAttribute", d.cuDeviceGetAttribute);
  optional(lib, "cuMulticastGetGranularity", d.cuMulticastGetGranularity);
  optional(lib, "cuMulticastCreate", d.cuMulticastCreate);
  optional(lib, "cuMulticastAddDevice", d.cuMulticastAddDevice);
  optional(lib, "cuMulticastBindMem", d.cuMulticastBindMem);
  optional(lib, "cuMemGetAllocationGranularity", d.cuMemGetAllocationGranularity);
  optional(lib, "cuMemCreate", d.cuMemCreate);
  optional(lib, "cuMemAddressReserve", d.cuMemAddressReserve);
  optional(lib, "cuMemMap", d.cuMemMap);
  optional(lib, "cuMemSetAccess", d.cuMemSetAccess);
  if (out.error.empty()) {
    CUresult rc = d.cuInit(0);
    if (rc != CUDA_SUCCESS) out.error = "cuInit failed with CUresult " + std::to_string(rc);
  }
  return out;  // the library stays open for the life of the process
}

std::atomic<const Driver*> g_override{nullptr};

}  // namespace

std::string describe(const Driver& d, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  d.cuGetErrorName(rc, &name);
  d.cuGetErrorString(rc, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(rc)) + " (" +
         (text ? text : "no description") + ")";
}

void set_driver_override(const Driver* d) { g_override.store(d, std::memory_order_release); }

const Driver* driver(const char** error) {
  if (const Driver* d = g_override.load(std::memory_order_acquire)) return d;
  static const Loaded loaded = open_driver();  // thread-safe initialisation
  if (!loaded.error.empty()) {
    *error = loaded.error.c_str();
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace jaxptx::cu
