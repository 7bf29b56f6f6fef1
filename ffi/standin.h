// The stand-in CUDA driver of the testing extension jaxptx.testing._standin
// (never part of jaxptx._ffi): a Driver table (cuda_driver.h) whose entry
// points forward to a Python object, jaxptx.testing.standin.StandInDriver,
// which runs modules on the emulator's jaxptx.sim.Device (or StandInNode,
// jaxptx/testing/_standin_peers.py, on the devices of a jaxptx.sim.System,
// for kernels with peers: a context and stream per device). Python installs
// it in the CUDA handler with jaxptx._ffi.set_cuda_driver(driver_table())
// and calls the handler with jaxptx._ffi.call_cuda_handler; so the
// handler's own code runs with no GPU: attribute decoding, the id check,
// parameter reading and checks, packing, TMA encoding, launch attributes
// and error returns.

#ifndef JAXPTX_FFI_STANDIN_H_
#define JAXPTX_FFI_STANDIN_H_

#include <nanobind/nanobind.h>

#include "cuda_driver.h"

namespace jaxptx::standin {

// The stand-in's table: each entry point calls the installed object (one
// with the methods of jaxptx/testing/standin.py's StandInDriver); with none
// installed, each fails with CUDA_ERROR_NOT_INITIALIZED.
const cu::Driver* table();

// Makes `driver` the object the table calls (a strong reference is kept).
void install(nanobind::object driver);

// Drops the object (the table's entry points fail from now on).
void uninstall();

}  // namespace jaxptx::standin

#endif  // JAXPTX_FFI_STANDIN_H_
