// Compiled in every build (cuda.h from the nvidia-cuda-runtime wheel, a build
// requirement; CMake option JAXPTX_CHECK_CUDA_H=OFF skips it): checks that the driver
// declarations of cuda_driver.h match the real ones. It holds no code.

#include <cstddef>
#include <type_traits>

#include <cuda.h>

#include "cuda_driver.h"

static_assert(sizeof(jaxptx::cu::LaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(jaxptx::cu::LaunchConfig, hStream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(jaxptx::cu::LaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs));
static_assert(offsetof(jaxptx::cu::LaunchConfig, numAttrs) == offsetof(CUlaunchConfig, numAttrs));
static_assert(sizeof(jaxptx::cu::LaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(alignof(jaxptx::cu::LaunchAttribute) == alignof(CUlaunchAttribute));
static_assert(offsetof(jaxptx::cu::LaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
static_assert(sizeof(jaxptx::cu::LaunchAttributeValue) == sizeof(CUlaunchAttributeValue));
static_assert(jaxptx::cu::LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
static_assert(jaxptx::cu::FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(jaxptx::cu::JIT_ERROR_LOG_BUFFER == CU_JIT_ERROR_LOG_BUFFER);
static_assert(jaxptx::cu::JIT_ERROR_LOG_BUFFER_SIZE_BYTES == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
static_assert(sizeof(CUjit_option) == sizeof(int) && sizeof(CUresult) == sizeof(int));
static_assert(offsetof(CUlaunchAttributeValue, clusterDim) == 0);
static_assert(sizeof(jaxptx::cu::CUdeviceptr) == sizeof(CUdeviceptr));
static_assert(offsetof(jaxptx::cu::LaunchConfig, sharedMemBytes) ==
              offsetof(CUlaunchConfig, sharedMemBytes));
static_assert(sizeof(jaxptx::cu::TensorMap) == sizeof(CUtensorMap));
static_assert(alignof(jaxptx::cu::TensorMap) == alignof(CUtensorMap));
static_assert(sizeof(CUtensorMapDataType) == sizeof(int) && sizeof(CUtensorMapSwizzle) == sizeof(int));
static_assert(sizeof(CUtensorMapInterleave) == sizeof(int) &&
              sizeof(CUtensorMapL2promotion) == sizeof(int) &&
              sizeof(CUtensorMapFloatOOBfill) == sizeof(int));
// The codes jaxptx/jax/_tma.py writes into the `tma` attribute.
static_assert(CU_TENSOR_MAP_DATA_TYPE_UINT8 == 0 && CU_TENSOR_MAP_DATA_TYPE_UINT16 == 1 &&
              CU_TENSOR_MAP_DATA_TYPE_UINT32 == 2 && CU_TENSOR_MAP_DATA_TYPE_INT32 == 3 &&
              CU_TENSOR_MAP_DATA_TYPE_UINT64 == 4 && CU_TENSOR_MAP_DATA_TYPE_INT64 == 5 &&
              CU_TENSOR_MAP_DATA_TYPE_FLOAT16 == 6 && CU_TENSOR_MAP_DATA_TYPE_FLOAT32 == 7 &&
              CU_TENSOR_MAP_DATA_TYPE_FLOAT64 == 8 && CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 == 9 &&
              CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 == 11);
static_assert(CU_TENSOR_MAP_SWIZZLE_32B == 1 && CU_TENSOR_MAP_SWIZZLE_64B == 2 &&
              CU_TENSOR_MAP_SWIZZLE_128B == 3 && CU_TENSOR_MAP_L2_PROMOTION_L2_128B == 2 &&
              CU_TENSOR_MAP_INTERLEAVE_NONE == 0 && CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE == 0);
static_assert(alignof(jaxptx::cu::LaunchConfig) == alignof(CUlaunchConfig));
static_assert(offsetof(jaxptx::cu::LaunchConfig, gridDimX) == offsetof(CUlaunchConfig, gridDimX) &&
              offsetof(jaxptx::cu::LaunchConfig, blockDimX) == offsetof(CUlaunchConfig, blockDimX) &&
              offsetof(jaxptx::cu::LaunchConfig, blockDimZ) == offsetof(CUlaunchConfig, blockDimZ));
static_assert(offsetof(jaxptx::cu::LaunchAttributeValue, clusterDim) == 0);
static_assert(sizeof(jaxptx::cu::CUdevice) == sizeof(CUdevice));
static_assert(jaxptx::cu::CUDA_SUCCESS == CUDA_SUCCESS);
// The capture entry points take what cuda_driver.h passes them.
static_assert(std::is_same_v<decltype(&cuMemcpyDtoH_v2), CUresult (*)(void*, CUdeviceptr, size_t)>);
static_assert(std::is_same_v<decltype(&cuStreamSynchronize), CUresult (*)(CUstream)>);
// The parameter layout the handler reads (CUDA 12.4+), and the code that
// ends its walk over the parameters.
static_assert(std::is_same_v<decltype(&cuFuncGetParamInfo),
                             CUresult (*)(CUfunction, size_t, size_t*, size_t*)>);
static_assert(jaxptx::cu::CUDA_ERROR_INVALID_VALUE == CUDA_ERROR_INVALID_VALUE);
// Kernels with peers (cuda_peers.cc): the entry points as cuda_driver.h
// declares them (cuda.h maps cuMemAlloc and cuMemcpyHtoDAsync to their _v2
// symbols), and the code of a pair enabled already.
static_assert(std::is_same_v<decltype(&cuDeviceGetCount), CUresult (*)(int*)>);
static_assert(std::is_same_v<decltype(&cuCtxGetDevice), CUresult (*)(CUdevice*)>);
static_assert(std::is_same_v<decltype(&cuDeviceCanAccessPeer),
                             CUresult (*)(int*, CUdevice, CUdevice)>);
static_assert(std::is_same_v<decltype(&cuCtxEnablePeerAccess),
                             CUresult (*)(CUcontext, unsigned int)>);
static_assert(std::is_same_v<decltype(&cuMemAlloc_v2), CUresult (*)(CUdeviceptr*, size_t)>);
static_assert(std::is_same_v<decltype(&cuMemcpyHtoDAsync_v2),
                             CUresult (*)(CUdeviceptr, const void*, size_t, CUstream)>);
static_assert(jaxptx::cu::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED ==
              CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
// Kernels that take a multicast address (cuda_multicast.cc): the entry
// points, the property and access structures as cuda_driver.h lays them out,
// and the enum values it passes.
using jaxptx::cu::MemAccessDesc;
using jaxptx::cu::MemAllocationProp;
using jaxptx::cu::MemLocation;
using jaxptx::cu::MulticastObjectProp;
static_assert(sizeof(jaxptx::cu::CUmemGenericAllocationHandle) ==
              sizeof(CUmemGenericAllocationHandle));
static_assert(sizeof(CUdevice_attribute) == sizeof(int) &&
              sizeof(CUmemAllocationType) == sizeof(int) &&
              sizeof(CUmemAllocationHandleType) == sizeof(int) &&
              sizeof(CUmemLocationType) == sizeof(int) &&
              sizeof(CUmemAccess_flags) == sizeof(int) &&
              sizeof(CUmemAllocationGranularity_flags) == sizeof(int) &&
              sizeof(CUmulticastGranularity_flags) == sizeof(int));
static_assert(std::is_same_v<decltype(&cuDeviceGetAttribute),
                             CUresult (*)(int*, CUdevice_attribute, CUdevice)>);
static_assert(std::is_same_v<decltype(&cuMulticastGetGranularity),
                             CUresult (*)(size_t*, const CUmulticastObjectProp*,
                                          CUmulticastGranularity_flags)>);
static_assert(std::is_same_v<decltype(&cuMulticastCreate),
                             CUresult (*)(CUmemGenericAllocationHandle*,
                                          const CUmulticastObjectProp*)>);
static_assert(std::is_same_v<decltype(&cuMulticastAddDevice),
                             CUresult (*)(CUmemGenericAllocationHandle, CUdevice)>);
static_assert(std::is_same_v<decltype(&cuMulticastBindMem),
                             CUresult (*)(CUmemGenericAllocationHandle, size_t,
                                          CUmemGenericAllocationHandle, size_t, size_t,
                                          unsigned long long)>);
static_assert(std::is_same_v<decltype(&cuMemGetAllocationGranularity),
                             CUresult (*)(size_t*, const CUmemAllocationProp*,
                                          CUmemAllocationGranularity_flags)>);
static_assert(std::is_same_v<decltype(&cuMemCreate),
                             CUresult (*)(CUmemGenericAllocationHandle*, size_t,
                                          const CUmemAllocationProp*, unsigned long long)>);
static_assert(std::is_same_v<decltype(&cuMemAddressReserve),
                             CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                                          unsigned long long)>);
static_assert(std::is_same_v<decltype(&cuMemMap),
                             CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                          unsigned long long)>);
static_assert(std::is_same_v<decltype(&cuMemSetAccess),
                             CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)>);
static_assert(sizeof(MemLocation) == sizeof(CUmemLocation) &&
              alignof(MemLocation) == alignof(CUmemLocation) &&
              offsetof(MemLocation, id) == offsetof(CUmemLocation, id));
static_assert(sizeof(MemAllocationProp) == sizeof(CUmemAllocationProp) &&
              alignof(MemAllocationProp) == alignof(CUmemAllocationProp) &&
              offsetof(MemAllocationProp, requestedHandleTypes) ==
                  offsetof(CUmemAllocationProp, requestedHandleTypes) &&
              offsetof(MemAllocationProp, location) == offsetof(CUmemAllocationProp, location) &&
              offsetof(MemAllocationProp, win32HandleMetaData) ==
                  offsetof(CUmemAllocationProp, win32HandleMetaData) &&
              offsetof(MemAllocationProp, allocFlags) == offsetof(CUmemAllocationProp, allocFlags));
static_assert(sizeof(MemAccessDesc) == sizeof(CUmemAccessDesc) &&
              offsetof(MemAccessDesc, flags) == offsetof(CUmemAccessDesc, flags));
static_assert(sizeof(MulticastObjectProp) == sizeof(CUmulticastObjectProp) &&
              offsetof(MulticastObjectProp, size) == offsetof(CUmulticastObjectProp, size) &&
              offsetof(MulticastObjectProp, handleTypes) ==
                  offsetof(CUmulticastObjectProp, handleTypes) &&
              offsetof(MulticastObjectProp, flags) == offsetof(CUmulticastObjectProp, flags));
static_assert(jaxptx::cu::DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED ==
                  CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED &&
              jaxptx::cu::MEM_ALLOCATION_TYPE_PINNED == CU_MEM_ALLOCATION_TYPE_PINNED &&
              jaxptx::cu::MEM_LOCATION_TYPE_DEVICE == CU_MEM_LOCATION_TYPE_DEVICE &&
              jaxptx::cu::MEM_ACCESS_FLAGS_PROT_READWRITE == CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
              jaxptx::cu::MEM_ALLOC_GRANULARITY_MINIMUM == CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
              jaxptx::cu::MULTICAST_GRANULARITY_MINIMUM == CU_MULTICAST_GRANULARITY_MINIMUM);
