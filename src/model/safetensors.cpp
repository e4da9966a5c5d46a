#include "model/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/mapped_file.h"

namespace skim {

namespace {

using json = nlohmann::json;

// The names safetensors writes for dtypes we cannot hold; listed so the message can say
// "unsupported" rather than "unknown" for a well-formed but integer or fp8 checkpoint.
constexpr std::string_view kOtherSafetensorsDtypes[] = {
    "F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2"};

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  return std::nullopt;
}

uint64_t read_le_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// A non-negative JSON integer, or a message saying what it is instead.
std::optional<uint64_t> as_count(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  return std::nullopt;
}

// Scalars are shown with their value; containers only by kind, since dumping an arbitrarily
// nested value from a hostile header would recurse without bound.
std::string describe(const json& j) {
  if (j.is_structured()) return fmt::format("{} of {} entries", j.type_name(), j.size());
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return fmt::format("{} {}", j.type_name(), s);
}

TensorView parse_entry(const std::string& name, const json& entry, const uint8_t* data,
                       uint64_t data_size, const std::string& source) {
  SKIM_REQUIRE(entry.is_object(), "{}: tensor '{}': header entry must be an object, got {}",
               source, name, describe(entry));

  auto dtype_it = entry.find("dtype");
  SKIM_REQUIRE(dtype_it != entry.end(), "{}: tensor '{}': missing 'dtype'", source, name);
  SKIM_REQUIRE(dtype_it->is_string(), "{}: tensor '{}': 'dtype' must be a string, got {}",
               source, name, describe(*dtype_it));
  const auto& dtype_str = dtype_it->get_ref<const std::string&>();
  std::optional<DType> dtype = parse_dtype(dtype_str);
  if (!dtype) {
    bool known = std::find(std::begin(kOtherSafetensorsDtypes), std::end(kOtherSafetensorsDtypes),
                           dtype_str) != std::end(kOtherSafetensorsDtypes);
    fail("{}: tensor '{}' has {} dtype '{}'; supported: F32, F16, BF16", source, name,
         known ? "unsupported" : "unknown", dtype_str);
  }

  auto shape_it = entry.find("shape");
  SKIM_REQUIRE(shape_it != entry.end(), "{}: tensor '{}': missing 'shape'", source, name);
  SKIM_REQUIRE(shape_it->is_array(), "{}: tensor '{}': 'shape' must be an array, got {}", source,
               name, describe(*shape_it));
  std::vector<int64_t> shape;
  uint64_t numel = 1;
  for (const json& d : *shape_it) {
    std::optional<uint64_t> dim = as_count(d);
    SKIM_REQUIRE(dim && *dim <= uint64_t(INT64_MAX),
                 "{}: tensor '{}': shape entries must be non-negative integers, got {}", source,
                 name, describe(d));
    SKIM_REQUIRE(!__builtin_mul_overflow(numel, *dim, &numel),
                 "{}: tensor '{}': shape {} has more elements than fit in 64 bits", source, name,
                 shape_it->dump());
    shape.push_back(int64_t(*dim));
  }

  auto offsets_it = entry.find("data_offsets");
  SKIM_REQUIRE(offsets_it != entry.end(), "{}: tensor '{}': missing 'data_offsets'", source, name);
  const json& offsets = *offsets_it;
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_count(offsets[0]);
    end = as_count(offsets[1]);
  }
  SKIM_REQUIRE(begin && end,
               "{}: tensor '{}': 'data_offsets' must be [begin, end] of non-negative integers, "
               "got {}",
               source, name, describe(offsets));
  SKIM_REQUIRE(*begin <= *end, "{}: tensor '{}': data_offsets [{}, {}] end before they begin",
               source, name, *begin, *end);
  SKIM_REQUIRE(*end <= data_size,
               "{}: tensor '{}': data_offsets [{}, {}] reach past the data region of {} bytes "
               "(file truncated?)",
               source, name, *begin, *end, data_size);

  uint64_t expected_bytes = 0;
  SKIM_REQUIRE(!__builtin_mul_overflow(numel, dtype_size(*dtype), &expected_bytes) &&
                   expected_bytes == *end - *begin,
               "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
               source, name, shape_it->dump(), dtype_str, expected_bytes, *begin, *end,
               *end - *begin);

  TensorView view;
  view.name = name;
  view.dtype = *dtype;
  view.shape = std::move(shape);
  view.data = data + *begin;
  view.nbytes = size_t(*end - *begin);
  view.file = source;
  return view;
}

// Two tensors sharing bytes means the header lies about at least one of them.
void check_no_overlap(const std::map<std::string, TensorView>& tensors, const uint8_t* data,
                      const std::string& source) {
  std::vector<const TensorView*> by_offset;
  for (const auto& [_, v] : tensors)
    if (v.nbytes > 0) by_offset.push_back(&v);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorView* a, const TensorView* b) {
    return static_cast<const uint8_t*>(a->data) < static_cast<const uint8_t*>(b->data);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView& prev = *by_offset[i - 1];
    const TensorView& cur = *by_offset[i];
    auto prev_begin = static_cast<const uint8_t*>(prev.data) - data;
    auto cur_begin = static_cast<const uint8_t*>(cur.data) - data;
    SKIM_REQUIRE(size_t(prev_begin) + prev.nbytes <= size_t(cur_begin),
                 "{}: tensors '{}' (bytes {}..{}) and '{}' (bytes {}..{}) overlap", source,
                 prev.name, prev_begin, size_t(prev_begin) + prev.nbytes, cur.name, cur_begin,
                 size_t(cur_begin) + cur.nbytes);
  }
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::map<std::string, TensorView> parse_safetensors(const uint8_t* bytes, size_t size,
                                                     const std::string& source) {
  SKIM_REQUIRE(size >= 8,
               "{}: {} bytes, too short for a safetensors file (it starts with an 8-byte header "
               "length)",
               source, size);
  uint64_t header_len = read_le_u64(bytes);
  SKIM_REQUIRE(header_len <= size - 8,
               "{}: header length {} reaches past the end of the file ({} bytes; truncated or "
               "not safetensors?)",
               source, header_len, size);

  const uint8_t* header_begin = bytes + 8;
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", source, e.what());
  }
  SKIM_REQUIRE(header.is_object(), "{}: header must be a JSON object, got {}", source,
               header.type_name());

  const uint8_t* data = header_begin + header_len;
  uint64_t data_size = size - 8 - header_len;
  std::map<std::string, TensorView> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      // Free-form string map (format, producer); nothing we depend on.
      SKIM_REQUIRE(entry.is_object() || entry.is_null(),
                   "{}: '__metadata__' must be an object, got {}", source, entry.type_name());
      continue;
    }
    tensors.emplace(name, parse_entry(name, entry, data, data_size, source));
  }
  check_no_overlap(tensors, data, source);
  return tensors;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), mapping_(std::make_unique<MappedFile>(path)) {
  tensors_ = parse_safetensors(mapping_->data(), mapping_->size(), path.string());
}

SafetensorsFile::~SafetensorsFile() = default;

}  // namespace skim
