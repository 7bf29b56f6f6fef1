// Running the CUDA launch handler with no GPU (tests and CI).
//
// The handler reaches the CUDA driver only through the Driver table of
// cuda_driver.h. set_driver_override swaps that table for another one; the
// stand-in driver of standin_driver.cc forwards each entry point to a Python
// object (jaxptx.runtime.standin.StandInDriver) that runs modules on the
// emulator's jaxptx.sim.Device. call_frame.cc builds the XLA_FFI_CallFrame
// XLA would hand the handler (buffers, sorted attributes, a stream, a
// scratch allocator) and calls the real JaxptxLaunch with it. Together
// they execute the handler's own code: attribute decoding, the id check,
// parameter packing, TMA encoding, launch attributes and error returns.

#ifndef JAXPTX_FFI_STANDIN_H_
#define JAXPTX_FFI_STANDIN_H_

#include <cstdint>

#include <nanobind/nanobind.h>

#include "cuda_driver.h"

namespace jaxptx::cu {

// Makes driver() return `d` from now on (nullptr: libcuda.so.1 again).
// `d` must stay valid while it is set. Defined in cuda_launch.cc.
void set_driver_override(const Driver* d);

}  // namespace jaxptx::cu

namespace jaxptx {

// Installs `driver` (a Python object with the stand-in's methods, see
// jaxptx/runtime/standin.py) as the CUDA driver of the launch handler.
void standin_install(nanobind::object driver);

// Removes the stand-in: the handler opens libcuda.so.1 again.
void standin_uninstall();

// Calls the CUDA handler JaxptxLaunch with a call frame built from
// `args` and `rets` (each a sequence of (XLA_FFI_DataType code, device
// address, dims)), `attrs` (a sequence of (name, kind, value), kind one of
// "i64", "str", "i32[]", "i64[]" or "dict", whose value is a sequence of
// such triples; sorted by name here, as XLA does), the
// stream handle the frame's Stream_Get returns, and `scratch` (an object with
// alloc(size, alignment) -> address and free(address, size), or None: then
// every scratch allocation fails). With `retired`, the frame goes to the
// retired jaxptx_launch_v1 handler instead. Returns (XLA_FFI_Error_Code,
// message): (0, "") when the handler succeeded. The GIL is released while
// it runs.
nanobind::tuple call_cuda_handler(nanobind::handle args, nanobind::handle rets,
                                  nanobind::handle attrs, uint64_t stream,
                                  nanobind::object scratch, bool retired = false);

}  // namespace jaxptx

#endif  // JAXPTX_FFI_STANDIN_H_
