// Reading an entry's parameter declarations from PTX (entry_params.h).

#include "entry_params.h"

#include <cctype>

namespace jaxptx {

namespace {

// The PTX with each comment replaced by one space.
std::string strip_comments(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
      out.push_back(' ');
    } else if (s.compare(i, 2, "/*") == 0) {
      size_t end = s.find("*/", i + 2);
      i = end == std::string_view::npos ? s.size() : end + 2;
      out.push_back(' ');
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

std::string_view trim(std::string_view s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return std::string_view();
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
}

// Bytes of a PTX scalar type used in a parameter declaration (0: unknown).
int64_t type_bytes(std::string_view t) {
  struct Entry {
    const char* name;
    int64_t bytes;
  };
  static const Entry kTypes[] = {
      {".b8", 1},    {".u8", 1},     {".s8", 1},      {".b16", 2},      {".u16", 2},
      {".s16", 2},   {".f16", 2},    {".bf16", 2},    {".b32", 4},      {".u32", 4},
      {".s32", 4},   {".f32", 4},    {".f16x2", 4},   {".bf16x2", 4},   {".b64", 8},
      {".u64", 8},   {".s64", 8},    {".f64", 8},     {".b128", 16},
  };
  for (const Entry& e : kTypes) {
    if (t == e.name) return e.bytes;
  }
  return 0;
}

// One declaration, e.g. ".param .align 64 .b8 tma0[128]": its size, or an
// error (empty `error` on success).
int64_t declaration_bytes(std::string_view decl, std::string* error) {
  std::vector<std::string> tokens;
  std::vector<int64_t> dims;
  std::string cur;
  size_t i = 0;
  auto flush = [&]() {
    if (!cur.empty()) tokens.push_back(cur);
    cur.clear();
  };
  for (; i < decl.size() && decl[i] != '['; ++i) {
    if (std::isspace(static_cast<unsigned char>(decl[i]))) flush();
    else cur.push_back(decl[i]);
  }
  flush();
  while (i < decl.size()) {
    if (std::isspace(static_cast<unsigned char>(decl[i]))) { ++i; continue; }
    if (decl[i] != '[') { *error = "unexpected text after the array size"; return 0; }
    size_t close = decl.find(']', i);
    if (close == std::string_view::npos) { *error = "an unclosed ["; return 0; }
    std::string num(decl.substr(i + 1, close - i - 1));
    size_t used = 0;
    int64_t n = 0;
    try {
      n = std::stoll(num, &used, 0);
    } catch (...) {
      used = 0;
    }
    while (used < num.size() && std::isspace(static_cast<unsigned char>(num[used]))) ++used;
    if (used != num.size() || num.empty() || n < 1 || n > (int64_t{1} << 32)) {
      *error = "array size [" + num + "] is not a positive integer";
      return 0;
    }
    dims.push_back(n);
    i = close + 1;
  }
  if (tokens.empty() || tokens[0] != ".param") {
    *error = "a parameter that is not .param";
    return 0;
  }
  int64_t elem = 0, vector = 1;
  bool named = false;
  for (size_t k = 1; k < tokens.size(); ++k) {
    const std::string& t = tokens[k];
    if (t == ".align") {
      ++k;  // its value
    } else if (t == ".v2" || t == ".v4" || t == ".v8") {
      vector = t[2] - '0';
    } else if (t == ".ptr" || t == ".global" || t == ".shared" || t == ".const" ||
               t == ".local") {
      // pointer attributes: the parameter is still the value of its type
    } else if (t[0] == '.') {
      int64_t b = type_bytes(t);
      if (!b) {
        *error = "unknown parameter type " + t;
        return 0;
      }
      elem = b;
    } else {
      if (named || !ident_char(t[0])) {
        *error = "unexpected token " + t;
        return 0;
      }
      named = true;
    }
  }
  if (!elem || !named) {
    *error = "a parameter without a type or a name";
    return 0;
  }
  int64_t size = elem * vector;
  for (int64_t d : dims) size *= d;
  return size;
}

}  // namespace

std::string entry_param_bytes(std::string_view ptx, std::string_view entry,
                              std::vector<int64_t>* out) {
  out->clear();
  const std::string text = strip_comments(ptx);
  const std::string_view s(text);
  for (size_t at = s.find(".entry"); at != std::string_view::npos;
       at = s.find(".entry", at + 1)) {
    if (at > 0 && (ident_char(s[at - 1]) || s[at - 1] == '.')) continue;
    size_t i = at + 6;
    if (i >= s.size() || !std::isspace(static_cast<unsigned char>(s[i]))) continue;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t name_end = i;
    while (name_end < s.size() && ident_char(s[name_end])) ++name_end;
    if (s.substr(i, name_end - i) != entry) continue;
    i = name_end;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i >= s.size() || s[i] != '(') return std::string();  // no parameters
    size_t close = s.find(')', i);
    if (close == std::string_view::npos) {
      return "the parameter list of entry " + std::string(entry) + " is not closed";
    }
    std::string_view list = s.substr(i + 1, close - i - 1);
    if (trim(list).empty()) return std::string();
    size_t start = 0;
    for (int index = 0;; ++index) {
      size_t comma = list.find(',', start);
      std::string_view decl = list.substr(start, comma == std::string_view::npos
                                                     ? std::string_view::npos
                                                     : comma - start);
      std::string error;
      int64_t bytes = declaration_bytes(decl, &error);
      if (!error.empty()) {
        out->clear();
        return "parameter " + std::to_string(index) + " of entry " + std::string(entry) +
               " (" + std::string(trim(decl)) + "): " + error;
      }
      out->push_back(bytes);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return std::string();
  }
  return "the PTX has no .entry " + std::string(entry);
}

std::string check_params(const std::vector<int64_t>& declared, size_t n_buffers,
                         const int64_t* scalars, size_t n_scalars, size_t n_maps) {
  constexpr int64_t kPointer = 8, kTensorMap = 128;
  const std::vector<int64_t>& p = declared;
  if (p.size() != n_buffers + n_scalars + n_maps) {
    return "its PTX declares " + std::to_string(p.size()) + " parameters, but the call passes " +
           std::to_string(n_buffers) + " buffer pointers, " + std::to_string(n_scalars) +
           " raw scalars and " + std::to_string(n_maps) + " TMA descriptors (" +
           std::to_string(n_buffers + n_scalars + n_maps) +
           "): the call does not match its kernel";
  }
  auto mismatch = [&](size_t k, const std::string& what, int64_t bytes) {
    return "parameter " + std::to_string(k) + " is " + std::to_string(p[k]) +
           " bytes in its PTX, but the call passes " + what + " there (" +
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
