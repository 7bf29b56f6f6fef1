// A kernel's parameters from the driver, and the call's check (kernel_params.h).

#include "kernel_params.h"

#include <cctype>

namespace jaxptx {

namespace {

// A kernel's parameters fill at most 32764 bytes (CUDA 12.1+), so no kernel
// has more parameters than that: a driver answering past it is broken.
constexpr size_t kMaxParams = 32764;

// `ptx` with its comments blanked out (same length, newlines kept).
std::string without_comments(std::string_view ptx) {
  std::string out(ptx);
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '/' && out[i + 1] == '/') {
      for (; i < out.size() && out[i] != '\n'; ++i) out[i] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      size_t end = out.find("*/", i + 2);
      end = end == std::string::npos ? out.size() : end + 2;
      for (; i < end; ++i) {
        if (out[i] != '\n') out[i] = ' ';
      }
      --i;
    }
  }
  return out;
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
}

}  // namespace

int64_t declared_param_count(std::string_view ptx, std::string_view entry) {
  const std::string text = without_comments(ptx);
  for (size_t at = text.find(".entry"); at != std::string::npos;
       at = text.find(".entry", at + 1)) {
    size_t i = at + 6;
    if (i >= text.size() || !std::isspace(static_cast<unsigned char>(text[i]))) continue;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t name_end = i;
    while (name_end < text.size() && is_name_char(text[name_end])) ++name_end;
    if (std::string_view(text).substr(i, name_end - i) != entry) continue;
    i = name_end;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i >= text.size() || text[i] != '(') return 0;  // `.entry k { ... }`: no parameters
    size_t close = text.find(')', i);
    if (close == std::string::npos) return -1;
    std::string_view list = std::string_view(text).substr(i + 1, close - i - 1);
    if (list.find_first_not_of(" \t\r\n") == std::string_view::npos) return 0;
    int64_t commas = 0;
    for (char c : list) commas += c == ',';
    return commas + 1;
  }
  return -1;
}

std::string kernel_param_bytes(const cu::Driver& d, cu::CUfunction fn, int64_t count,
                               std::vector<int64_t>* out) {
  out->clear();
  const size_t last = count < 0 ? kMaxParams : static_cast<size_t>(count);
  for (size_t index = 0; index <= kMaxParams && (count < 0 || index < last); ++index) {
    size_t offset = 0, size = 0;
    cu::CUresult rc = d.cuFuncGetParamInfo(fn, index, &offset, &size);
    if (rc == cu::CUDA_ERROR_INVALID_VALUE && count < 0) return std::string();  // past the last
    if (rc == cu::CUDA_ERROR_INVALID_VALUE) {
      out->clear();
      return "its PTX declares " + std::to_string(count) + " parameters, but the driver "
             "reports " + std::to_string(index) + " (cuFuncGetParamInfo answers "
             "CUDA_ERROR_INVALID_VALUE for parameter " + std::to_string(index) + ")";
    }
    if (rc != cu::CUDA_SUCCESS) {
      out->clear();
      return "cuFuncGetParamInfo failed for parameter " + std::to_string(index) + ": " +
             cu::describe(d, rc);
    }
    out->push_back(static_cast<int64_t>(size));
  }
  if (count >= 0) return std::string();
  out->clear();
  return "cuFuncGetParamInfo reported more than " + std::to_string(kMaxParams) +
         " parameters (a kernel's parameters fill at most 32764 bytes)";
}

std::string check_params(const std::vector<int64_t>& declared, size_t n_buffers,
                         const int64_t* scalars, size_t n_scalars, size_t n_maps) {
  constexpr int64_t kPointer = 8, kTensorMap = 128;
  const std::vector<int64_t>& p = declared;
  if (p.size() != n_buffers + n_scalars + n_maps) {
    return "it declares " + std::to_string(p.size()) + " parameters, but the call passes " +
           std::to_string(n_buffers) + " buffer pointers, " + std::to_string(n_scalars) +
           " raw scalars and " + std::to_string(n_maps) + " TMA descriptors (" +
           std::to_string(n_buffers + n_scalars + n_maps) +
           "): the call does not match its kernel";
  }
  auto mismatch = [&](size_t k, const std::string& what, int64_t bytes) {
    return "parameter " + std::to_string(k) + " is " + std::to_string(p[k]) +
           " bytes in the kernel, but the call passes " + what + " there (" +
           std::to_string(bytes) + " bytes)";
  };
  for (size_t i = 0; i < n_buffers; ++i) {
    if (p[i] != kPointer) return mismatch(i, "buffer pointer " + std::to_string(i), kPointer);
  }
  for (size_t j = 0; j < n_scalars; ++j) {
    int64_t bytes = scalars[2 * j];
    if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) {
      return "raw scalar " + std::to_string(j) + " has " + std::to_string(bytes) +
             " bytes; a raw scalar has 1, 2, 4 or 8";
    }
    if (p[n_buffers + j] != bytes) {
      return mismatch(n_buffers + j, "raw scalar " + std::to_string(j), bytes);
    }
  }
  for (size_t t = 0; t < n_maps; ++t) {
    size_t k = n_buffers + n_scalars + t;
    if (p[k] != kTensorMap) return mismatch(k, "TMA descriptor " + std::to_string(t), kTensorMap);
  }
  return std::string();
}

}  // namespace jaxptx
