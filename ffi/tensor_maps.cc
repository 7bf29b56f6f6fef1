// Encoding the TMA descriptors of a launch (see tensor_maps.h).

#include "tensor_maps.h"

#include <sstream>

namespace jaxptx::cu {

namespace {

// Field offsets in a record (jaxptx/jax/_tma.py).
enum Field : size_t {
  BUFFER = 0, DTYPE = 1, RANK = 2, SWIZZLE = 3, DIMS = 4, STRIDES = 9, BOX = 13,
  ELEMENT_STRIDES = 18, INTERLEAVE = 23, L2_PROMOTION = 24, OOB_FILL = 25,
};
constexpr int64_t MAX_RANK = 5;

std::string describe(const int64_t* r) {
  std::ostringstream out;
  out << "buffer " << r[BUFFER] << ", data type " << r[DTYPE] << ", rank " << r[RANK]
      << ", swizzle " << r[SWIZZLE] << ", dims {";
  for (int64_t k = 0; k < r[RANK]; ++k) out << (k ? ", " : "") << r[DIMS + k];
  out << "}, box {";
  for (int64_t k = 0; k < r[RANK]; ++k) out << (k ? ", " : "") << r[BOX + k];
  out << "}, strides {";
  for (int64_t k = 0; k + 1 < r[RANK]; ++k) out << (k ? ", " : "") << r[STRIDES + k];
  out << "}";
  return out.str();
}

}  // namespace

std::string encode_tensor_maps(const Driver& d, xla::ffi::Span<const int64_t> records,
                               const std::vector<void*>& buffers, std::vector<TensorMap>* maps) {
  if (records.size() % TMA_RECORD != 0) {
    return "the tma attribute has " + std::to_string(records.size()) +
           " entries, not whole records of " + std::to_string(TMA_RECORD);
  }
  size_t n = records.size() / TMA_RECORD;
  maps->assign(n, TensorMap{});
  if (n == 0) return std::string();
  if (!d.cuTensorMapEncodeTiled) {
    return "the kernel uses TMA descriptors, but this driver has no cuTensorMapEncodeTiled "
           "(CUDA 12 or newer is needed)";
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t* r = records.begin() + i * TMA_RECORD;
    int64_t rank = r[RANK];
    if (r[BUFFER] < 0 || r[BUFFER] >= static_cast<int64_t>(buffers.size()) || rank < 1 ||
        rank > MAX_RANK) {
      return "TMA descriptor " + std::to_string(i) + " is malformed (" + describe(r) + ")";
    }
    uint64_t dims[MAX_RANK], strides[MAX_RANK - 1];
    uint32_t box[MAX_RANK], element_strides[MAX_RANK];
    for (int64_t k = 0; k < rank; ++k) {
      dims[k] = static_cast<uint64_t>(r[DIMS + k]);
      box[k] = static_cast<uint32_t>(r[BOX + k]);
      element_strides[k] = static_cast<uint32_t>(r[ELEMENT_STRIDES + k]);
      if (k + 1 < rank) strides[k] = static_cast<uint64_t>(r[STRIDES + k]);
    }
    CUresult rc = d.cuTensorMapEncodeTiled(
        &(*maps)[i], static_cast<int>(r[DTYPE]), static_cast<uint32_t>(rank),
        buffers[static_cast<size_t>(r[BUFFER])], dims, strides, box, element_strides,
        static_cast<int>(r[INTERLEAVE]), static_cast<int>(r[SWIZZLE]),
        static_cast<int>(r[L2_PROMOTION]), static_cast<int>(r[OOB_FILL]));
    if (rc != CUDA_SUCCESS) {
      return "cuTensorMapEncodeTiled refused TMA descriptor " + std::to_string(i) + " (" +
             describe(r) + ", address " +
             std::to_string(reinterpret_cast<uintptr_t>(buffers[static_cast<size_t>(r[BUFFER])])) +
             "): CUresult " + std::to_string(rc);
    }
  }
  return std::string();
}

}  // namespace jaxptx::cu
