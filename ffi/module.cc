// jaxptx._ffi: the compiled half of jaxptx.
//
// Exports the typed XLA FFI handlers as capsules (registered from Python
// with jax.ffi.register_ffi_target) and the hooks that feed them: the CPU
// handler's Python callback, the CUDA handler's module registry, its call
// frame built outside XLA (jaxptx.torch's launcher) and the one seam by
// which another driver table may replace libcuda.so.1 (set_cuda_driver).
// No test double is compiled in: the stand-in driver is the testing
// layer's own extension (jaxptx.testing._standin, standin.h).

#include <array>
#include <cstdint>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "call_identity.h"
#include "cuda_driver.h"
#include "handlers.h"
#include "tensor_maps.h"

namespace nb = nanobind;

#define JAXPTX_STR_(x) #x
#define JAXPTX_STR(x) JAXPTX_STR_(x)

namespace {

// The capsule the CUDA handler's driver table was swapped for (a strong
// reference while installed; a raw pointer, so that no destructor runs
// after the interpreter is gone); touched with the GIL held.
PyObject* g_driver_capsule = nullptr;

void set_cuda_driver(nb::object table) {
  PyObject* old = g_driver_capsule;
  if (table.is_none()) {
    jaxptx::cu::set_driver_override(nullptr);
    g_driver_capsule = nullptr;
    Py_XDECREF(old);
    return;
  }
  if (!PyCapsule_CheckExact(table.ptr())) {
    throw nb::type_error(("set_cuda_driver: expected a capsule named " +
                          std::string(jaxptx::cu::kDriverCapsule) + " or None, got " +
                          nb::type_name(table.type()).c_str())
                             .c_str());
  }
  void* p = PyCapsule_GetPointer(table.ptr(), jaxptx::cu::kDriverCapsule);
  if (!p) {
    PyErr_Clear();
    const char* name = PyCapsule_GetName(table.ptr());
    throw nb::type_error(("set_cuda_driver: expected a capsule named " +
                          std::string(jaxptx::cu::kDriverCapsule) + ", got one named " +
                          (name ? name : "(none)") +
                          " (an extension built against another driver table?)")
                             .c_str());
  }
  jaxptx::cu::set_driver_override(static_cast<const jaxptx::cu::Driver*>(p));
  g_driver_capsule = table.release().ptr();
  Py_XDECREF(old);
}

// The handlers as capsules and the CPU handler's hooks.
void bind_handlers(nb::module_& m) {
  m.def("handlers", []() {
    nb::dict d;
    d[jaxptx::kCpuTarget] = nb::capsule(reinterpret_cast<void*>(&JaxptxCpu));
    d[jaxptx::kCudaTarget] = nb::capsule(reinterpret_cast<void*>(&JaxptxLaunch));
    return d;
  }, "The typed FFI handlers by target name, as capsules for "
     "jax.ffi.register_ffi_target: " JAXPTX_CPU_TARGET " (platform cpu) and "
     JAXPTX_CUDA_TARGET " (platform CUDA).");

  m.def("retired_handlers", []() {
    nb::dict d;
    d[jaxptx::kRetiredCpuTarget] = nb::capsule(reinterpret_cast<void*>(&JaxptxCpuRetiredV1));
    d[jaxptx::kRetiredCudaTarget] = nb::capsule(reinterpret_cast<void*>(&JaxptxLaunchRetiredV1));
    return d;
  }, "The handlers of the retired version-1 targets by name (jaxptx_cpu_v1 on "
     "cpu, jaxptx_launch_v1 on CUDA): each refuses every call, saying that an "
     "older jaxptx lowered it and that the function must be lowered and "
     "exported again (or run with that jaxptx).");

  m.def("set_cpu_callback", &jaxptx::set_cpu_callback, nb::arg("fn").none(),
        "Set fn(kernel_id, inputs, outputs, ptx, entry, launch, scalars, tma, "
        "input_types, output_types, allow_unwritten) -> None | str, called by "
        "the CPU handler (after checking the call against its id) with tuples "
        "of memoryviews (outputs writable), a memoryview of the PTX, all valid "
        "only during the call, the launch as (grid, block, cluster, smem) "
        "(decoded from the launch attribute and validated), tuples of the "
        "raw scalar and TMA descriptor records, a (numpy dtype name, shape) "
        "pair per buffer and the allow_unwritten mask; a returned string "
        "becomes the FFI error.");

  m.def("cpu_shutdown", &jaxptx::cpu_shutdown,
        "Close the CPU handler for good and wait for the calls in flight (an "
        "atexit hook: XLA threads still running at exit must not take the GIL).");
}

// The CUDA handler's module registry.
void bind_cuda_modules(nb::module_& m) {
  m.def("cuda_register",
        [](int64_t kernel_id, nb::bytes image, const std::string& ptx, const std::string& entry,
           int64_t num_params) {
          jaxptx::cuda_register(kernel_id, std::string(image.c_str(), image.size()), ptx, entry,
                                num_params);
        },
        nb::arg("kernel_id"), nb::arg("image"), nb::arg("ptx"),
        nb::arg("entry"), nb::arg("num_params"),
        "Register a kernel's module image (PTX text or cubin bytes) built "
        "from ptx, and its entry name, for the CUDA handler under kernel_id; "
        "it takes num_params pointer parameters (inputs then outputs). A call "
        "is served the image only when it carries that PTX. Without it, the "
        "handler JIT-compiles the PTX that each call carries.");
}

// What both handlers check on every call, exposed so Python can agree with it.
void bind_checks(nb::module_& m) {
  m.def("content_id",
        [](nb::bytes ptx, const std::string& entry, const std::vector<int64_t>& launch) {
          return jaxptx::content_id(std::string_view(ptx.c_str(), ptx.size()), entry, launch);
        },
        nb::arg("ptx"), nb::arg("entry"), nb::arg("launch"),
        "The kernel id the handlers derive from a call's PTX, entry and "
        "launch integers (call_identity.h), for checking that Python agrees.");

  m.def("check_call",
        [](const std::string& target, int64_t kernel_id, nb::bytes ptx, const std::string& entry,
           const std::vector<int32_t>& grid, const std::vector<int32_t>& block,
           const std::vector<int32_t>& cluster, int64_t smem, const std::vector<int64_t>& tma,
           const std::vector<int64_t>& input_bytes, const std::vector<int64_t>& output_bytes) {
          using xla::ffi::Span;
          return jaxptx::check_call(target, kernel_id, std::string_view(ptx.c_str(), ptx.size()),
                                    entry, Span<const int32_t>(grid.data(), grid.size()),
                                    Span<const int32_t>(block.data(), block.size()),
                                    Span<const int32_t>(cluster.data(), cluster.size()), smem,
                                    Span<const int64_t>(tma.data(), tma.size()), input_bytes,
                                    output_bytes);
        },
        nb::arg("target"), nb::arg("kernel_id"), nb::arg("ptx"), nb::arg("entry"), nb::arg("grid"),
        nb::arg("block"), nb::arg("cluster"), nb::arg("smem"), nb::arg("tma"),
        nb::arg("input_bytes"), nb::arg("output_bytes"),
        "The check both handlers run on a call before anything else (the "
        "launch, given here by its members, then the content against the "
        "kernel id): empty when it passes, else the error message. For tests.");

  m.def("launch_limits", []() {
    using jaxptx::LaunchShape;
    auto dims = [](const std::array<int64_t, 3>& v) { return nb::make_tuple(v[0], v[1], v[2]); };
    nb::dict d;
    d["grid"] = dims(LaunchShape::kMaxGrid);
    d["block"] = dims(LaunchShape::kMaxBlock);
    d["threads_per_block"] = LaunchShape::kMaxThreads;
    d["cluster_size"] = LaunchShape::kMaxClusterSize;
    d["smem"] = LaunchShape::kMaxSmem;
    return d;
  }, "The launch limits both handlers check on every call (LaunchShape in "
     "call_identity.h): grid and block (3 ints each), threads_per_block, "
     "cluster_size and smem (bytes of dynamic shared memory); for checking "
     "that jaxptx/launch.py has the same.");

  m.def("target_names", []() {
    return nb::make_tuple(jaxptx::kCpuTarget, jaxptx::kCudaTarget);
  }, "The (CPU, CUDA) FFI target names, versioned with the attributes.");

  m.def("cuda_registered", &jaxptx::cuda_registered, nb::arg("kernel_id"),
        "Whether kernel_id is registered for the CUDA handler.");
}

// The CUDA handler's tensor-map decoder, for inspection and tests.
void bind_tensor_maps(nb::module_& m) {
  m.def("tma_encode_arguments",
        [](const std::vector<int64_t>& records, size_t num_buffers) {
          std::vector<jaxptx::cu::TiledMapArgs> args;
          std::string bad = jaxptx::cu::decode_tensor_maps(
              xla::ffi::Span<const int64_t>(records.data(), records.size()), num_buffers, &args);
          if (!bad.empty()) throw nb::value_error(bad.c_str());
          nb::list out;
          for (const auto& a : args) {
            nb::dict d;
            nb::list dims, strides, box, element_strides;
            for (uint32_t k = 0; k < a.rank; ++k) {
              dims.append(a.dims[k]);
              box.append(a.box[k]);
              element_strides.append(a.element_strides[k]);
              if (k + 1 < a.rank) strides.append(a.strides[k]);
            }
            d["buffer"] = a.buffer;
            d["dtype"] = a.dtype;
            d["rank"] = a.rank;
            d["dims"] = nb::tuple(dims);
            d["strides"] = nb::tuple(strides);
            d["box"] = nb::tuple(box);
            d["element_strides"] = nb::tuple(element_strides);
            d["interleave"] = a.interleave;
            d["swizzle"] = a.swizzle;
            d["l2_promotion"] = a.l2_promotion;
            d["oob_fill"] = a.oob_fill;
            out.append(d);
          }
          return out;
        },
        nb::arg("records"), nb::arg("num_buffers"),
        "The cuTensorMapEncodeTiled arguments (but the address) that the CUDA "
        "handler decodes from a call's tma attribute over num_buffers "
        "buffers, one dict per descriptor; ValueError for a malformed one. "
        "The handler's own decoder, for inspection and tests.");
}

// The driver: its status, the seam that swaps its table, and the call frame built outside XLA.
void bind_driver(nb::module_& m) {
  m.def("cuda_driver_error", &jaxptx::cuda_driver_error,
        "Empty when libcuda.so.1 opens and cuInit succeeds (or another "
        "driver table is installed: set_cuda_driver), else the reason.");

  m.def("set_cuda_driver", &set_cuda_driver, nb::arg("table").none(),
        "Make the CUDA handler call the driver table in `table`, a capsule "
        "named " JAXPTX_DRIVER_CAPSULE " holding a `const Driver*` "
        "(ffi/cuda_driver.h; jaxptx.testing._standin.driver_table() makes "
        "one), kept alive while installed; None: libcuda.so.1 again. "
        "TypeError for another object or a capsule of another name.");

  m.def("call_cuda_handler", &jaxptx::call_cuda_handler, nb::arg("args"), nb::arg("rets"),
        nb::arg("attrs"), nb::arg("stream"), nb::arg("scratch").none(),
        nb::arg("retired") = false,
        "Call the CUDA handler (" JAXPTX_CUDA_TARGET ") outside XLA, as "
        "jaxptx.torch launches, with a call frame built from (dtype code, device "
        "address, dims) buffers and (name, kind, value) attributes (kind i64, "
        "str, i32[], i64[] or dict, whose value is a sequence of (name, kind, "
        "value) members); `scratch` has alloc(size, alignment) and free(address, "
        "size), or is None; with retired, the retired jaxptx_launch_v1 handler "
        "is called instead. Returns (XLA_FFI_Error_Code, message), (0, '') on "
        "success.");
}

}  // namespace

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
    d["xla_ffi_headers"] = true;
#if defined(JAXPTX_CHECKED_CUDA_H)
    d["checked_against_cuda_h"] = true;
#else
    d["checked_against_cuda_h"] = false;
#endif
    return d;
  }, "Small facts about how this extension was built.");

  bind_handlers(m);
  bind_cuda_modules(m);
  bind_checks(m);
  bind_tensor_maps(m);
  bind_driver(m);
}
