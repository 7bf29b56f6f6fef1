// What C++ reports of a Python callback's exception (used by both
// extensions: jaxptx._ffi's handlers and jaxptx.testing._standin's driver).

#ifndef JAXPTX_FFI_PYTHON_ERROR_H_
#define JAXPTX_FFI_PYTHON_ERROR_H_

#include <string>

#include <nanobind/nanobind.h>

namespace jaxptx {

// "TypeName: message" of a Python exception (its traceback would name only
// XLA's and our frames). Call with the GIL held.
inline std::string describe_python_error(nanobind::python_error& e) {
  nanobind::object name = nanobind::getattr(e.type(), "__name__", nanobind::str("exception"));
  std::string out = nanobind::str(name).c_str();
  PyObject* text = PyObject_Str(e.value().ptr());
  if (text) {
    out += std::string(": ") + nanobind::str(nanobind::steal(text)).c_str();
  } else {
    PyErr_Clear();
  }
  return out;
}

}  // namespace jaxptx

#endif  // JAXPTX_FFI_PYTHON_ERROR_H_
