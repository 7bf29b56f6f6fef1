// jaxptx._ffi: the compiled half of jaxptx.
//
// For now it only reports build facts. The CUDA launch handler and the CPU
// (emulator) handler arrive with the JAX integration, as typed XLA FFI
// handlers exported to Python as capsules.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

namespace nb = nanobind;

#define JAXPTX_STR_(x) #x
#define JAXPTX_STR(x) JAXPTX_STR_(x)

NB_MODULE(_ffi, m) {
  m.doc() = "jaxptx native extension (XLA FFI handlers)";
  m.attr("__version__") = JAXPTX_VERSION;

  m.def("abi_info", []() {
    nb::dict d;
    d["compiler"] = JAXPTX_CXX_COMPILER;  // CMake's id and version
    d["cplusplus"] = static_cast<long>(__cplusplus);
    d["nanobind"] = JAXPTX_STR(NB_VERSION_MAJOR) "." JAXPTX_STR(
        NB_VERSION_MINOR) "." JAXPTX_STR(NB_VERSION_PATCH);
#if defined(Py_LIMITED_API)
    d["stable_abi"] = true;
#else
    d["stable_abi"] = false;
#endif
#if defined(JAXPTX_HAVE_XLA_FFI)
    d["xla_ffi_headers"] = true;
#else
    d["xla_ffi_headers"] = false;
#endif
    return d;
  }, "Small facts about how this extension was built.");
}
