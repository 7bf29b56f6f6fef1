// Compiled only when the build finds a cuda.h: checks that the driver
// declarations of cuda_driver.h match the real ones. It holds no code.

#include <cstddef>

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
static_assert(offsetof(jaxptx::cu::LaunchConfig, sharedMemBytes) ==
              offsetof(CUlaunchConfig, sharedMemBytes));
