// jaxptx.testing._standin: the testing layer's extension, built beside
// jaxptx._ffi but never part of it. It holds the stand-in CUDA driver
// (standin.h); jaxptx/testing/standin.py installs it in _ffi's CUDA handler.

#include <nanobind/nanobind.h>

#include "cuda_driver.h"
#include "standin.h"

namespace nb = nanobind;

NB_MODULE(_standin, m) {
  m.doc() = "jaxptx's stand-in CUDA driver, for tests (jaxptx.testing.standin)";

  m.def("driver_table", []() {
    // The table is static: it outlives every capsule.
    return nb::capsule(static_cast<const void*>(jaxptx::standin::table()),
                       jaxptx::cu::kDriverCapsule);
  }, "The stand-in's driver table, as the capsule jaxptx._ffi.set_cuda_driver takes.");

  m.def("install", &jaxptx::standin::install, nb::arg("driver").none(),
        "Make the table's entry points call `driver` (a "
        "jaxptx.testing.standin.StandInDriver); ValueError for None.");

  m.def("uninstall", &jaxptx::standin::uninstall,
        "Drop the driver object: the table's entry points fail with "
        "CUDA_ERROR_NOT_INITIALIZED until the next install.");
}
