// TMA descriptors for a launch: the records of a call's `tma` attribute
// (jaxptx/jax/_tma.py documents the layout), encoded by the driver with the
// buffers' device addresses for each call.

#ifndef JAXPTX_FFI_TENSOR_MAPS_H_
#define JAXPTX_FFI_TENSOR_MAPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_driver.h"
#include "xla/ffi/api/ffi.h"

namespace jaxptx::cu {

// int64s per descriptor record in the `tma` attribute.
inline constexpr size_t TMA_RECORD = 26;

// Encodes each record with the address of the buffer it names (an index
// into `buffers`: inputs, then outputs) into `maps`, one per record, in
// order. Returns an empty string, or what is wrong (a malformed record, a
// driver without TMA, or the driver's refusal with the descriptor's
// fields).
std::string encode_tensor_maps(const Driver& d, xla::ffi::Span<const int64_t> records,
                               const std::vector<void*>& buffers, std::vector<TensorMap>* maps);

}  // namespace jaxptx::cu

#endif  // JAXPTX_FFI_TENSOR_MAPS_H_
