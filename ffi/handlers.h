// The typed XLA FFI handlers of jaxptx._ffi and the Python-facing hooks
// that feed them (module.cc exposes both to Python).

#ifndef JAXPTX_FFI_HANDLERS_H_
#define JAXPTX_FFI_HANDLERS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <nanobind/nanobind.h>

#include "python_error.h"
#include "xla/ffi/api/ffi.h"

// CPU: runs a kernel on the emulator through a Python callback.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxptxCpu);
// CUDA: launches a registered PTX module on XLA's stream.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxptxLaunch);
// The retired version-1 targets (kRetiredCpuTarget, kRetiredCudaTarget):
// any call of them fails, saying which jaxptx made it and what to do.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxptxCpuRetiredV1);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxptxLaunchRetiredV1);

namespace jaxptx {

// The FFI target names. They carry a version: a change to the attributes
// below makes a new name, so an artifact exported by another jaxptx fails
// rather than misreading its attributes. Version 2 carries the launch as
// one dictionary attribute; version 1 had grid, block, cluster and smem as
// four. The version-1 names stay registered, with handlers that refuse
// every call with the reason and the fix (an old artifact would otherwise
// fail with XLA's bare "no handler").
// (The macros let messages be string literals: JAXPTX_CUDA_TARGET ": ...".)
#define JAXPTX_CPU_TARGET "jaxptx_cpu_v2"
#define JAXPTX_CUDA_TARGET "jaxptx_launch_v2"
inline constexpr const char* kCpuTarget = JAXPTX_CPU_TARGET;
inline constexpr const char* kCudaTarget = JAXPTX_CUDA_TARGET;
inline constexpr const char* kRetiredCpuTarget = "jaxptx_cpu_v1";
inline constexpr const char* kRetiredCudaTarget = "jaxptx_launch_v1";

// The attributes every jaxptx custom call carries, in the order the handlers
// take them: kernel_id (derived from the content: call_identity.h), ptx,
// entry, launch (a dictionary {block, cluster, grid, smem}, decoded into one
// LaunchShape: call_identity.h), scalars (a (bytes, bits) pair per raw
// scalar param), tma (the kernel's TMA descriptors but for their addresses;
// tensor_maps.h), may_write_inputs (bit i: the kernel may store into input
// i, which the CUDA handler then hands it as a private copy unless an
// output aliases it), allow_unwritten (bit j: output j may keep bytes the
// kernel never writes; the CPU handler reports them otherwise).
template <typename Binding>
auto bind_launch_attributes(Binding binding) {
  namespace ffi = xla::ffi;
  return std::move(binding)
      .template Attr<int64_t>("kernel_id")
      .template Attr<std::string_view>("ptx")
      .template Attr<std::string_view>("entry")
      .template Attr<ffi::Dictionary>("launch")
      .template Attr<ffi::Span<const int64_t>>("scalars")
      .template Attr<ffi::Span<const int64_t>>("tma")
      .template Attr<int64_t>("may_write_inputs")
      .template Attr<int64_t>("allow_unwritten");
}

// Sets the callable the CPU handler calls as
// ``fn(kernel_id, inputs, outputs, ptx, entry, launch, scalars, tma,
// input_types, output_types, allow_unwritten)``: tuples of memoryviews over
// the XLA buffers (outputs writable), a memoryview of the call's PTX text,
// its entry name, its launch as ``(grid, block, cluster, smem)`` (decoded and
// validated: call_identity.h), tuples of its raw scalar and TMA descriptor
// records, a (numpy dtype name, shape) pair per buffer, and the
// allow_unwritten mask. The handler has checked the call
// against its id first. It returns None on success or an error string.
void set_cpu_callback(nanobind::object fn);

// Closes the CPU handler for good (later calls fail without touching
// Python) and waits, without the GIL, for the calls in flight. Registered
// with atexit by jaxptx.jax.
void cpu_shutdown();

// Registers the module image (PTX text or cubin) built from `ptx` under a
// kernel id for the CUDA handler, which otherwise JIT-compiles the PTX each
// call carries; a call is served this image only when it carries that PTX.
// Raises ValueError when the id already names different content.
void cuda_register(int64_t kernel_id, const std::string& image, const std::string& ptx,
                   const std::string& entry, int64_t num_params);

// True when the id is registered for the CUDA handler.
bool cuda_registered(int64_t kernel_id);

// Empty when the CUDA handler has a driver (libcuda.so.1 opens and
// initialises, or a table set with set_cuda_driver is installed), else why not.
std::string cuda_driver_error();

// Calls the CUDA handler JaxptxLaunch with a call frame built from
// `args` and `rets` (each a sequence of (XLA_FFI_DataType code, device
// address, dims)), `attrs` (a sequence of (name, kind, value), kind one of
// "i64", "str", "i32[]", "i64[]" or "dict", whose value is a sequence of
// such triples; sorted by name here, as XLA does), the stream handle the
// frame's Stream_Get returns, and `scratch` (an object with
// alloc(size, alignment) -> address and free(address, size), or None: then
// every scratch allocation fails). With `retired`, the frame goes to the
// retired jaxptx_launch_v1 handler instead. Returns (XLA_FFI_Error_Code,
// message): (0, "") when the handler succeeded. The GIL is released while
// it runs. What jaxptx.torch launches with (call_frame.cc).
nanobind::tuple call_cuda_handler(nanobind::handle args, nanobind::handle rets,
                                  nanobind::handle attrs, uint64_t stream,
                                  nanobind::object scratch, bool retired = false);

}  // namespace jaxptx

#endif  // JAXPTX_FFI_HANDLERS_H_
