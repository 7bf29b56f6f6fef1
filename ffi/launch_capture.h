// Captures of CUDA launches (JAXPTX_CAPTURE_DIR; jaxptx/capture.py): the
// handler reads every buffer of a launch back to the host before and after
// it and hands the bytes to jaxptx.runtime._capture, which writes the file
// that `python -m jaxptx.replay` replays on the emulator. Off (the variable
// unset or empty), a launch pays one getenv.

#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "call_identity.h"
#include "cuda_driver.h"

namespace jaxptx::cu {

// One pointer parameter of a launch, as the handler passes it.
struct CapturedBuffer {
  void* pointer;
  size_t nbytes;
  int dtype;                      // XLA_FFI_DataType
  std::vector<int64_t> shape;
};

class LaunchCapture {
 public:
  // Whether JAXPTX_CAPTURE_DIR asks for captures (checked per launch).
  static bool requested();

  // Null when captures are off, or Python declines this launch (over
  // JAXPTX_CAPTURE_MAX_BYTES: it warns). Otherwise reads every distinct
  // buffer (by pointer and size), after synchronising `stream`.
  static std::unique_ptr<LaunchCapture> begin(const Driver& d, CUstream stream,
                                              std::vector<CapturedBuffer> params, size_t num_inputs,
                                              std::string_view entry);

  // Reads the buffers again and writes the capture (through Python). A
  // failure to read or write warns; it never fails the launch.
  void finish(const Driver& d, CUstream stream, int64_t kernel_id, std::string_view ptx,
              std::string_view entry, const LaunchShape& shape, const std::vector<int64_t>& scalars,
              const std::vector<int64_t>& tma);

 private:
  std::string read(const Driver& d, CUstream stream, std::vector<std::string>* out) const;

  std::vector<CapturedBuffer> params_;
  size_t num_inputs_ = 0;
  std::vector<int64_t> buffer_of_;     // pointer parameter -> distinct buffer
  std::vector<size_t> distinct_;       // distinct buffer -> its first parameter
  std::vector<std::string> before_;
  std::string error_;
};

}  // namespace jaxptx::cu
