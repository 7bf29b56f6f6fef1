// The few CUDA driver API declarations the launch handler needs.
//
// Declared here rather than taken from cuda.h so that the extension builds
// with no CUDA toolkit and opens libcuda.so.1 with dlopen at run time. These
// types are part of the driver's stable ABI; cuda_driver_check.cc checks them
// against the real cuda.h (static_asserts) whenever the build finds one.
//
// The handler reaches the driver only through the Driver table below
// (cuda_driver.cc fills it from libcuda.so.1). Another table may be swapped
// in from Python: jaxptx._ffi.set_cuda_driver takes a PyCapsule named
// kDriverCapsule holding a `const Driver*` (the testing extension
// jaxptx.testing._standin makes one whose entry points run the emulator).

#ifndef JAXPTX_FFI_CUDA_DRIVER_H_
#define JAXPTX_FFI_CUDA_DRIVER_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace jaxptx::cu {

using CUresult = int;
using CUdevice = int;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUdeviceptr = unsigned long long;
// A physical allocation (cuMemCreate) or a multicast object (cuMulticastCreate).
using CUmemGenericAllocationHandle = unsigned long long;

inline constexpr CUresult CUDA_SUCCESS = 0;
// What cuFuncGetParamInfo returns for an index past the last parameter.
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
// What cuCtxEnablePeerAccess returns for a pair enabled already (by this
// process, or by another library in it): not a failure.
inline constexpr CUresult CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704;
// CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
inline constexpr int DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132;
// CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
// CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
// CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
// CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM and
// CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_MINIMUM
inline constexpr int MEM_ALLOCATION_TYPE_PINNED = 1;
inline constexpr int MEM_LOCATION_TYPE_DEVICE = 1;
inline constexpr int MEM_ACCESS_FLAGS_PROT_READWRITE = 3;
inline constexpr int MEM_ALLOC_GRANULARITY_MINIMUM = 0;
inline constexpr int MULTICAST_GRANULARITY_MINIMUM = 0;
// CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
inline constexpr int FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
// CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
inline constexpr int LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;
// CUjit_option::CU_JIT_ERROR_LOG_BUFFER{,_SIZE_BYTES}
inline constexpr int JIT_ERROR_LOG_BUFFER = 5;
inline constexpr int JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
// Kernels may use 48 KiB of dynamic shared memory without opting in.
inline constexpr int64_t DEFAULT_MAX_DYNAMIC_SMEM = 48 * 1024;

// CUlaunchAttributeValue: a 64-byte union whose widest members hold
// pointers (hence 8-byte alignment); clusterDim sits at offset 0.
union LaunchAttributeValue {
  char pad[64];
  unsigned long long align_;
  struct {
    unsigned int x, y, z;
  } clusterDim;
};

// CUlaunchAttribute
struct LaunchAttribute {
  int id;
  char pad[8 - sizeof(int)];
  LaunchAttributeValue value;
};

// CUlaunchConfig
struct LaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  LaunchAttribute* attrs;
  unsigned int numAttrs;
};

// CUtensorMap: an opaque 128-byte TMA descriptor (cuda.h aligns it to 64
// bytes up to CUDA 12, 128 from CUDA 13; the stricter suits both).
struct alignas(128) TensorMap {
  uint64_t opaque[16];
};

// CUmemLocation: a location type, then a 4-byte union whose `id` is the
// device ordinal for MEM_LOCATION_TYPE_DEVICE.
struct MemLocation {
  int type;
  int id;
};

// CUmemAllocationProp (cuMemCreate's properties; the enums are C enums).
struct MemAllocationProp {
  int type;
  int requestedHandleTypes;
  MemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

// CUmemAccessDesc (cuMemSetAccess: who may read and write a mapping).
struct MemAccessDesc {
  MemLocation location;
  int flags;
};

// CUmulticastObjectProp (cuMulticastCreate's properties).
struct MulticastObjectProp {
  unsigned int numDevices;
  size_t size;
  unsigned long long handleTypes;
  unsigned long long flags;
};

// Entry points, by the symbol names libcuda exports (cuda.h maps
// cuCtxPushCurrent to cuCtxPushCurrent_v2, and so on).
struct Driver {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext*);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxPushCurrent_v2)(CUcontext);
  CUresult (*cuCtxPopCurrent_v2)(CUcontext*);
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned int, int*, void**);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  // CUDA 12.4+ (driver R550): (function, paramIndex, *paramOffset,
  // *paramSize); CUDA_ERROR_INVALID_VALUE past the last parameter. The
  // handler reads each kernel's parameter sizes with it.
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*);
  CUresult (*cuLaunchKernelEx)(const LaunchConfig*, CUfunction, void**, void**);
  CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  // Captures only (JAXPTX_CAPTURE_DIR): reading buffers back to the host.
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemcpyDtoH_v2)(void*, CUdeviceptr, size_t);
  // Optional (CUDA 12+; null when the driver lacks it). The enum arguments
  // (data type, interleave, swizzle, L2 promotion, OOB fill) are C enums.
  CUresult (*cuTensorMapEncodeTiled)(TensorMap*, int, uint32_t, void*, const uint64_t*,
                                     const uint64_t*, const uint32_t*, const uint32_t*, int, int,
                                     int, int);
  // Kernels with peers (cuda_peers.h): the devices of a call's mesh axis,
  // peer access between them, and each device's peer table. Optional: null
  // when the driver lacks one, and then such calls are refused.
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuCtxGetDevice)(CUdevice*);
  CUresult (*cuDeviceCanAccessPeer)(int*, CUdevice, CUdevice);
  CUresult (*cuCtxEnablePeerAccess)(CUcontext, unsigned int);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t);
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void*, size_t, CUstream);
  // Kernels that take a multicast address (multimem_ptr; cuda_multicast.h):
  // the device's support, a multicast object over the axis's devices,
  // physical memory bound to it on each, and the virtual address ranges
  // that map both. Optional (CUDA 12.1+ for the multicast ones): null when
  // the driver lacks one, and then such calls are refused.
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuMulticastGetGranularity)(size_t*, const MulticastObjectProp*, int);
  CUresult (*cuMulticastCreate)(CUmemGenericAllocationHandle*, const MulticastObjectProp*);
  CUresult (*cuMulticastAddDevice)(CUmemGenericAllocationHandle, CUdevice);
  CUresult (*cuMulticastBindMem)(CUmemGenericAllocationHandle, size_t,
                                 CUmemGenericAllocationHandle, size_t, size_t,
                                 unsigned long long);
  CUresult (*cuMemGetAllocationGranularity)(size_t*, const MemAllocationProp*, int);
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t, const MemAllocationProp*,
                          unsigned long long);
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                       unsigned long long);
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const MemAccessDesc*, size_t);
};

// The name of a capsule holding a `const Driver*` for set_driver_override.
// It carries the table's layout version: bump it whenever Driver's members
// change (the static_assert below fails until then), so an extension built
// against another layout is refused rather than called through.
#define JAXPTX_DRIVER_CAPSULE "jaxptx.cu.Driver.v4"
inline constexpr const char* kDriverCapsule = JAXPTX_DRIVER_CAPSULE;
static_assert(sizeof(Driver) == 32 * sizeof(void*),
              "Driver's members changed: bump the version in kDriverCapsule");

// The driver, opened and initialised on first use (thread-safe), or the
// table set_driver_override installed. Returns nullptr when libcuda.so.1 or
// one of its symbols is missing, or cuInit fails; `error` then says why.
const Driver* driver(const char** error);

// "CUDA_ERROR_NAME (the driver's description)" of a CUresult.
std::string describe(const Driver& d, CUresult rc);

// Makes driver() return `d` from now on (nullptr: libcuda.so.1 again).
// `d` must stay valid while it is set.
void set_driver_override(const Driver* d);

}  // namespace jaxptx::cu

#endif  // JAXPTX_FFI_CUDA_DRIVER_H_
