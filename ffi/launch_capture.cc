// See launch_capture.h.

#include "launch_capture.h"

#include <cstdlib>
#include <utility>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;

namespace jaxptx::cu {

namespace {

std::string describe_rc(const Driver& d, CUresult rc) {
  const char* name = nullptr;
  if (d.cuGetErrorName && d.cuGetErrorName(rc, &name) == CUDA_SUCCESS && name) return name;
  return "CUresult " + std::to_string(rc);
}

nb::object recorder(const char* name) {
  return nb::module_::import_("jaxptx.runtime._capture").attr(name);
}

}  // namespace

bool LaunchCapture::requested() {
  const char* dir = std::getenv("JAXPTX_CAPTURE_DIR");
  return dir != nullptr && *dir != '\0';
}

std::unique_ptr<LaunchCapture> LaunchCapture::begin(const Driver& d, CUstream stream,
                                                    std::vector<CapturedBuffer> params,
                                                    size_t num_inputs, std::string_view entry) {
  if (!requested()) return nullptr;
  auto c = std::unique_ptr<LaunchCapture>(new LaunchCapture());
  c->params_ = std::move(params);
  c->num_inputs_ = num_inputs;
  size_t total = 0;
  for (size_t i = 0; i < c->params_.size(); ++i) {
    const CapturedBuffer& p = c->params_[i];
    int64_t found = -1;
    for (size_t b = 0; b < c->distinct_.size() && p.nbytes; ++b) {
      const CapturedBuffer& q = c->params_[c->distinct_[b]];
      if (q.pointer == p.pointer && q.nbytes == p.nbytes) found = static_cast<int64_t>(b);
    }
    if (found < 0) {
      found = static_cast<int64_t>(c->distinct_.size());
      c->distinct_.push_back(i);
      total += p.nbytes;
    }
    c->buffer_of_.push_back(found);
  }
  {
    nb::gil_scoped_acquire gil;
    try {
      if (!nb::cast<bool>(recorder("wanted")(std::string(entry), 2 * total))) return nullptr;
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("jaxptx capture (deciding whether to capture)");
      return nullptr;
    }
  }
  c->error_ = c->read(d, stream, &c->before_);
  return c;
}

std::string LaunchCapture::read(const Driver& d, CUstream stream,
                                std::vector<std::string>* out) const {
  if (!d.cuStreamSynchronize || !d.cuMemcpyDtoH_v2) return "the driver cannot copy to the host";
  CUresult rc = d.cuStreamSynchronize(stream);
  if (rc != CUDA_SUCCESS) return "cuStreamSynchronize failed: " + describe_rc(d, rc);
  out->clear();
  for (size_t first : distinct_) {
    const CapturedBuffer& p = params_[first];
    std::string bytes(p.nbytes, '\0');
    if (p.nbytes) {
      rc = d.cuMemcpyDtoH_v2(bytes.data(), reinterpret_cast<CUdeviceptr>(p.pointer), p.nbytes);
      if (rc != CUDA_SUCCESS) return "cuMemcpyDtoH failed: " + describe_rc(d, rc);
    }
    out->push_back(std::move(bytes));
  }
  return {};
}

void LaunchCapture::finish(const Driver& d, CUstream stream, int64_t kernel_id,
                           std::string_view ptx, std::string_view entry, const LaunchShape& shape,
                           const std::vector<int64_t>& scalars, const std::vector<int64_t>& tma) {
  std::vector<std::string> after;
  if (error_.empty()) error_ = read(d, stream, &after);
  nb::gil_scoped_acquire gil;
  try {
    if (!error_.empty()) {
      recorder("failed")(std::string(entry), error_);
      return;
    }
    nb::list before, now, dtypes, shapes;
    for (size_t b = 0; b < distinct_.size(); ++b) {
      before.append(nb::bytes(before_[b].data(), before_[b].size()));
      now.append(nb::bytes(after[b].data(), after[b].size()));
    }
    for (const CapturedBuffer& p : params_) {
      dtypes.append(p.dtype);
      shapes.append(nb::cast(p.shape));
    }
    auto dims = [](const std::array<int64_t, 3>& v) { return nb::make_tuple(v[0], v[1], v[2]); };
    recorder("record_cuda")(kernel_id, nb::bytes(ptx.data(), ptx.size()), std::string(entry),
                            nb::make_tuple(dims(shape.grid), dims(shape.block), dims(shape.cluster),
                                           shape.smem),
                            num_inputs_, buffer_of_, before, now, dtypes, shapes, scalars, tma);
  } catch (nb::python_error& e) {
    e.discard_as_unraisable("jaxptx capture (writing the capture file)");
  }
}

}  // namespace jaxptx::cu
