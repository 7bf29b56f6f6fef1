// The stand-in CUDA driver (standin.h): a Driver table whose entry points
// forward to a Python object, jaxptx.testing.standin.StandInDriver, which
// keeps modules and memory on the emulator's jaxptx.sim.Device.
//
// This file does what a driver does with the C arguments before any device
// work: it reads the launch configuration and its attributes, copies as many
// bytes through each kernel parameter pointer as the kernel's parameter has
// (the sizes the object reports for cuFuncGetParamInfo), reads the
// tensor-map arrays, fills the JIT error log, and turns every failure into a
// CUresult with a name and a description. A Python exception carrying a
// `code` attribute (standin.DriverError) gives that CUresult; any other is
// CUDA_ERROR_UNKNOWN. The handles it hands out (contexts, modules,
// functions) are the Python object's ints.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "cuda_driver.h"
#include "python_error.h"
#include "standin.h"

namespace nb = nanobind;

namespace jaxptx::standin {

namespace {

using namespace cu;

// The installed Python object (a strong reference); read and written with
// the GIL held.
PyObject* g_standin = nullptr;

constexpr CUresult kInvalidValue = 1;
constexpr CUresult kNotInitialized = 3;
constexpr CUresult kNotSupported = 801;
constexpr CUresult kUnknown = 999;

struct ErrorName {
  CUresult code;
  const char* name;
  const char* text;
};

// The CUresults the stand-in returns, with the driver's names.
constexpr ErrorName kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "invalid cluster size"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

// The last failure on this thread: cuGetErrorString describes a code with
// what the stand-in said about it (the real driver has one fixed text per
// code; the emulator's reason is more use in a test's message).
thread_local CUresult t_code = 0;
thread_local std::string t_text;

CUresult fail(CUresult code, std::string text) {
  t_code = code;
  t_text = std::move(text);
  return code;
}

// Runs `body(driver)` with the GIL held, turning exceptions into CUresults.
template <typename F>
CUresult guarded(const char* entry_point, F&& body) {
  nb::gil_scoped_acquire gil;
  if (!g_standin) return fail(kNotInitialized, "no stand-in driver is installed");
  try {
    body(nb::handle(g_standin));
    return CUDA_SUCCESS;
  } catch (nb::python_error& e) {
    CUresult code = kUnknown;
    nb::object attr = nb::getattr(e.value(), "code", nb::none());
    if (nb::isinstance<nb::int_>(attr)) code = nb::cast<int>(attr);
    if (code == CUDA_SUCCESS) code = kUnknown;
    return fail(code, std::string(entry_point) + ": " + describe_python_error(e));
  } catch (const std::exception& e) {
    return fail(kUnknown, std::string(entry_point) + ": " + e.what());
  }
}

uint64_t handle_of(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

template <typename T>
T pointer_of(nb::handle v) {
  return reinterpret_cast<T>(static_cast<uintptr_t>(nb::cast<uint64_t>(v)));
}

CUresult init(unsigned int flags) {
  return guarded("cuInit", [&](nb::handle d) { d.attr("init")(flags); });
}

CUresult get_error_name(CUresult code, const char** name) {
  for (const ErrorName& e : kErrors) {
    if (e.code == code) {
      *name = e.name;
      return CUDA_SUCCESS;
    }
  }
  *name = nullptr;
  return kInvalidValue;
}

CUresult get_error_string(CUresult code, const char** text) {
  if (code != 0 && code == t_code && !t_text.empty()) {
    *text = t_text.c_str();
    return CUDA_SUCCESS;
  }
  for (const ErrorName& e : kErrors) {
    if (e.code == code) {
      *text = e.text;
      return CUDA_SUCCESS;
    }
  }
  *text = nullptr;
  return kInvalidValue;
}

CUresult stream_get_ctx(CUstream stream, CUcontext* ctx) {
  return guarded("cuStreamGetCtx", [&](nb::handle d) {
    *ctx = pointer_of<CUcontext>(d.attr("stream_get_ctx")(handle_of(stream)));
  });
}

CUresult ctx_get_current(CUcontext* ctx) {
  return guarded("cuCtxGetCurrent", [&](nb::handle d) {
    *ctx = pointer_of<CUcontext>(d.attr("ctx_get_current")());
  });
}

CUresult ctx_push(CUcontext ctx) {
  return guarded("cuCtxPushCurrent", [&](nb::handle d) { d.attr("ctx_push")(handle_of(ctx)); });
}

CUresult ctx_pop(CUcontext* ctx) {
  return guarded("cuCtxPopCurrent", [&](nb::handle d) {
    CUcontext popped = pointer_of<CUcontext>(d.attr("ctx_pop")());
    if (ctx) *ctx = popped;
  });
}

// cuModuleLoadDataEx: PTX text (NUL-terminated) only; a failure's reason
// goes to the JIT error log the caller passed, as the driver's JIT does.
CUresult module_load(CUmodule* module, const void* image, unsigned int num_options, int* options,
                     void** values) {
  char* log = nullptr;
  size_t log_size = 0;
  for (unsigned int i = 0; i < num_options; ++i) {
    if (options[i] == JIT_ERROR_LOG_BUFFER) log = static_cast<char*>(values[i]);
    if (options[i] == JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      log_size = static_cast<size_t>(reinterpret_cast<uintptr_t>(values[i]));
    }
  }
  CUresult rc;
  if (!module || !image) {
    rc = fail(kInvalidValue, "cuModuleLoadDataEx: null module or image");
  } else if (std::memcmp(image, "\x7f" "ELF", 4) == 0) {
    rc = fail(kNotSupported, "cuModuleLoadDataEx: the stand-in driver loads PTX, not cubins");
  } else {
    const char* text = static_cast<const char*>(image);
    rc = guarded("cuModuleLoadDataEx", [&](nb::handle d) {
      *module = pointer_of<CUmodule>(d.attr("module_load")(nb::bytes(text, std::strlen(text))));
    });
  }
  if (rc != CUDA_SUCCESS && log && log_size > 0) {
    // As from the driver's JIT: the reason in the log, the code's own text
    // from cuGetErrorString.
    size_t n = std::min(log_size - 1, t_text.size());
    std::memcpy(log, t_text.data(), n);
    log[n] = '\0';
    t_text.clear();
  }
  return rc;
}

CUresult module_get_function(CUfunction* fn, CUmodule module, const char* name) {
  return guarded("cuModuleGetFunction", [&](nb::handle d) {
    *fn = pointer_of<CUfunction>(d.attr("module_get_function")(handle_of(module), name));
  });
}

CUresult func_set_attribute(CUfunction fn, int attribute, int value) {
  return guarded("cuFuncSetAttribute", [&](nb::handle d) {
    d.attr("func_set_attribute")(handle_of(fn), attribute, value);
  });
}

// cuFuncGetParamInfo: the object returns (offset, size), or raises
// DriverError(CUDA_ERROR_INVALID_VALUE) past the last parameter.
CUresult func_get_param_info(CUfunction fn, size_t index, size_t* offset, size_t* size) {
  if (!offset && !size) return fail(kInvalidValue, "cuFuncGetParamInfo: null outputs");
  return guarded("cuFuncGetParamInfo", [&](nb::handle d) {
    nb::tuple info = nb::cast<nb::tuple>(d.attr("func_get_param_info")(handle_of(fn), index));
    if (offset) *offset = nb::cast<size_t>(info[0]);
    if (size) *size = nb::cast<size_t>(info[1]);
  });
}

// cuLaunchKernelEx: reads the configuration, its attributes and each
// parameter's bytes (as many as the kernel's parameter has), then launches.
CUresult launch_kernel(const LaunchConfig* config, CUfunction fn, void** params, void** extra) {
  if (!config) return fail(kInvalidValue, "cuLaunchKernelEx: null config");
  if (extra) return fail(kNotSupported, "cuLaunchKernelEx: the stand-in takes kernelParams only");
  if (config->numAttrs && !config->attrs) {
    return fail(kInvalidValue, "cuLaunchKernelEx: numAttrs without attrs");
  }
  return guarded("cuLaunchKernelEx", [&](nb::handle d) {
    std::vector<int64_t> sizes =
        nb::cast<std::vector<int64_t>>(d.attr("param_sizes")(handle_of(fn)));
    if (!sizes.empty() && !params) {
      throw nb::value_error("kernelParams is null, but the kernel has parameters");
    }
    nb::list values;
    for (size_t i = 0; i < sizes.size(); ++i) {
      values.append(nb::bytes(static_cast<const char*>(params[i]), static_cast<size_t>(sizes[i])));
    }
    nb::list attributes;
    for (unsigned int i = 0; i < config->numAttrs; ++i) {
      const LaunchAttribute& a = config->attrs[i];
      if (a.id == LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
        const auto& c = a.value.clusterDim;
        attributes.append(nb::make_tuple(a.id, nb::make_tuple(c.x, c.y, c.z)));
      } else {
        attributes.append(nb::make_tuple(a.id, nb::none()));
      }
    }
    d.attr("launch")(handle_of(fn),
                     nb::make_tuple(config->gridDimX, config->gridDimY, config->gridDimZ),
                     nb::make_tuple(config->blockDimX, config->blockDimY, config->blockDimZ),
                     config->sharedMemBytes, handle_of(config->hStream), attributes, values);
  });
}

CUresult memcpy_dtod(CUdeviceptr dst, CUdeviceptr src, size_t nbytes, CUstream stream) {
  return guarded("cuMemcpyDtoDAsync", [&](nb::handle d) {
    d.attr("memcpy_dtod")(static_cast<uint64_t>(dst), static_cast<uint64_t>(src), nbytes,
                          handle_of(stream));
  });
}

CUresult stream_synchronize(CUstream stream) {
  return guarded("cuStreamSynchronize",
                 [&](nb::handle d) { d.attr("stream_synchronize")(handle_of(stream)); });
}

CUresult memcpy_dtoh(void* dst, CUdeviceptr src, size_t nbytes) {
  if (!dst && nbytes) return fail(kInvalidValue, "cuMemcpyDtoH: null destination");
  return guarded("cuMemcpyDtoH", [&](nb::handle d) {
    nb::bytes raw = nb::cast<nb::bytes>(d.attr("memcpy_dtoh")(static_cast<uint64_t>(src), nbytes));
    if (raw.size() != nbytes) throw nb::value_error("the stand-in's cuMemcpyDtoH returned another size");
    std::memcpy(dst, raw.c_str(), nbytes);
  });
}

CUresult tensor_map_encode_tiled(TensorMap* map, int dtype, uint32_t rank, void* address,
                                 const uint64_t* dims, const uint64_t* strides,
                                 const uint32_t* box, const uint32_t* element_strides,
                                 int interleave, int swizzle, int l2_promotion, int oob_fill) {
  if (!map || !dims || !box || !element_strides || (rank > 1 && !strides) || rank < 1 ||
      rank > 5) {
    return fail(kInvalidValue, "cuTensorMapEncodeTiled: a null array or a rank outside 1..5");
  }
  return guarded("cuTensorMapEncodeTiled", [&](nb::handle d) {
    nb::list dl, sl, bl, el;
    for (uint32_t k = 0; k < rank; ++k) {
      dl.append(dims[k]);
      bl.append(box[k]);
      el.append(element_strides[k]);
      if (k + 1 < rank) sl.append(strides[k]);
    }
    nb::bytes raw = nb::cast<nb::bytes>(d.attr("tensor_map_encode_tiled")(
        dtype, rank, handle_of(address), dl, sl, bl, el, interleave, swizzle, l2_promotion,
        oob_fill));
    if (raw.size() != sizeof(TensorMap)) {
      throw nb::value_error("the stand-in's tensor map is not 128 bytes");
    }
    std::memcpy(map, raw.c_str(), sizeof(TensorMap));
  });
}

// Kernels with peers: the devices, peer access between their contexts, and
// the peer tables' memory.
CUresult device_get_count(int* count) {
  if (!count) return fail(kInvalidValue, "cuDeviceGetCount: null count");
  return guarded("cuDeviceGetCount",
                 [&](nb::handle d) { *count = nb::cast<int>(d.attr("device_get_count")()); });
}

CUresult ctx_get_device(CUdevice* device) {
  if (!device) return fail(kInvalidValue, "cuCtxGetDevice: null device");
  return guarded("cuCtxGetDevice",
                 [&](nb::handle d) { *device = nb::cast<int>(d.attr("ctx_get_device")()); });
}

CUresult device_can_access_peer(int* can, CUdevice device, CUdevice peer) {
  if (!can) return fail(kInvalidValue, "cuDeviceCanAccessPeer: null result");
  return guarded("cuDeviceCanAccessPeer", [&](nb::handle d) {
    *can = nb::cast<bool>(d.attr("device_can_access_peer")(device, peer)) ? 1 : 0;
  });
}

CUresult ctx_enable_peer_access(CUcontext peer, unsigned int flags) {
  return guarded("cuCtxEnablePeerAccess", [&](nb::handle d) {
    d.attr("ctx_enable_peer_access")(handle_of(peer), flags);
  });
}

CUresult mem_alloc(CUdeviceptr* address, size_t nbytes) {
  if (!address) return fail(kInvalidValue, "cuMemAlloc: null address");
  return guarded("cuMemAlloc", [&](nb::handle d) {
    *address = static_cast<CUdeviceptr>(nb::cast<uint64_t>(d.attr("mem_alloc")(nbytes)));
  });
}

// cuMemcpyHtoDAsync: the bytes are read here, before it returns (as the
// driver stages pageable memory), so the caller may free them at once.
CUresult memcpy_htod(CUdeviceptr dst, const void* src, size_t nbytes, CUstream stream) {
  if (!src && nbytes) return fail(kInvalidValue, "cuMemcpyHtoDAsync: null source");
  return guarded("cuMemcpyHtoDAsync", [&](nb::handle d) {
    d.attr("memcpy_htod")(static_cast<uint64_t>(dst),
                          nb::bytes(static_cast<const char*>(src), nbytes), handle_of(stream));
  });
}

// Kernels that take a multicast address: the device attribute, multicast
// objects, physical memory and the address ranges that map them. The
// property structures are read here and passed on as their fields.
CUresult device_get_attribute(int* value, int attribute, CUdevice device) {
  if (!value) return fail(kInvalidValue, "cuDeviceGetAttribute: null value");
  return guarded("cuDeviceGetAttribute", [&](nb::handle d) {
    *value = nb::cast<int>(d.attr("device_get_attribute")(attribute, device));
  });
}

CUresult multicast_get_granularity(size_t* granularity, const MulticastObjectProp* prop,
                                   int option) {
  if (!granularity || !prop) {
    return fail(kInvalidValue, "cuMulticastGetGranularity: a null pointer");
  }
  return guarded("cuMulticastGetGranularity", [&](nb::handle d) {
    *granularity = nb::cast<size_t>(d.attr("multicast_get_granularity")(
        prop->numDevices, prop->size, prop->handleTypes, prop->flags, option));
  });
}

CUresult multicast_create(CUmemGenericAllocationHandle* handle, const MulticastObjectProp* prop) {
  if (!handle || !prop) return fail(kInvalidValue, "cuMulticastCreate: a null pointer");
  return guarded("cuMulticastCreate", [&](nb::handle d) {
    *handle = nb::cast<uint64_t>(
        d.attr("multicast_create")(prop->numDevices, prop->size, prop->handleTypes, prop->flags));
  });
}

CUresult multicast_add_device(CUmemGenericAllocationHandle handle, CUdevice device) {
  return guarded("cuMulticastAddDevice", [&](nb::handle d) {
    d.attr("multicast_add_device")(static_cast<uint64_t>(handle), device);
  });
}

CUresult multicast_bind_mem(CUmemGenericAllocationHandle handle, size_t mc_offset,
                            CUmemGenericAllocationHandle memory, size_t mem_offset, size_t size,
                            unsigned long long flags) {
  return guarded("cuMulticastBindMem", [&](nb::handle d) {
    d.attr("multicast_bind_mem")(static_cast<uint64_t>(handle), mc_offset,
                                 static_cast<uint64_t>(memory), mem_offset, size, flags);
  });
}

CUresult mem_get_allocation_granularity(size_t* granularity, const MemAllocationProp* prop,
                                        int option) {
  if (!granularity || !prop) {
    return fail(kInvalidValue, "cuMemGetAllocationGranularity: a null pointer");
  }
  return guarded("cuMemGetAllocationGranularity", [&](nb::handle d) {
    *granularity = nb::cast<size_t>(d.attr("mem_get_allocation_granularity")(
        prop->type, prop->location.type, prop->location.id, option));
  });
}

CUresult mem_create(CUmemGenericAllocationHandle* handle, size_t size,
                    const MemAllocationProp* prop, unsigned long long flags) {
  if (!handle || !prop) return fail(kInvalidValue, "cuMemCreate: a null pointer");
  return guarded("cuMemCreate", [&](nb::handle d) {
    *handle = nb::cast<uint64_t>(d.attr("mem_create")(
        size, prop->type, prop->requestedHandleTypes, prop->location.type, prop->location.id,
        flags));
  });
}

CUresult mem_address_reserve(CUdeviceptr* address, size_t size, size_t alignment, CUdeviceptr hint,
                             unsigned long long flags) {
  if (!address) return fail(kInvalidValue, "cuMemAddressReserve: null address");
  return guarded("cuMemAddressReserve", [&](nb::handle d) {
    *address = static_cast<CUdeviceptr>(nb::cast<uint64_t>(d.attr("mem_address_reserve")(
        size, alignment, static_cast<uint64_t>(hint), flags)));
  });
}

CUresult mem_map(CUdeviceptr address, size_t size, size_t offset,
                 CUmemGenericAllocationHandle handle, unsigned long long flags) {
  return guarded("cuMemMap", [&](nb::handle d) {
    d.attr("mem_map")(static_cast<uint64_t>(address), size, offset,
                      static_cast<uint64_t>(handle), flags);
  });
}

CUresult mem_set_access(CUdeviceptr address, size_t size, const MemAccessDesc* descs,
                        size_t count) {
  if (!descs && count) return fail(kInvalidValue, "cuMemSetAccess: null descriptors");
  return guarded("cuMemSetAccess", [&](nb::handle d) {
    nb::list access;
    for (size_t i = 0; i < count; ++i) {
      access.append(nb::make_tuple(descs[i].location.type, descs[i].location.id, descs[i].flags));
    }
    d.attr("mem_set_access")(static_cast<uint64_t>(address), size, access);
  });
}

const Driver kStandIn = {
    init,          get_error_name, get_error_string, stream_get_ctx,    ctx_get_current,
    ctx_push,      ctx_pop,        module_load,      module_get_function, func_set_attribute,
    func_get_param_info, launch_kernel, memcpy_dtod, stream_synchronize, memcpy_dtoh,
    tensor_map_encode_tiled,
    device_get_count, ctx_get_device, device_can_access_peer, ctx_enable_peer_access,
    mem_alloc, memcpy_htod,
    device_get_attribute, multicast_get_granularity, multicast_create, multicast_add_device,
    multicast_bind_mem, mem_get_allocation_granularity, mem_create, mem_address_reserve,
    mem_map, mem_set_access,
};

}  // namespace

const Driver* table() { return &kStandIn; }

void install(nb::object driver) {
  if (driver.is_none()) throw nb::value_error("install: expected a driver object, got None");
  PyObject* old = g_standin;
  g_standin = driver.release().ptr();
  Py_XDECREF(old);
}

void uninstall() {
  PyObject* old = g_standin;
  g_standin = nullptr;
  Py_XDECREF(old);
}

}  // namespace jaxptx::standin
