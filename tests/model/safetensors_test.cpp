#include "model/safetensors.h"

#include <gtest/gtest.h>

#include "model_files.h"

namespace skim {
namespace {

using test::expect_error;
using test::FakeTensor;
using test::safetensors_bytes;
using test::safetensors_raw;
using test::TempDir;

std::map<std::string, TensorView> parse(const std::string& bytes) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.safetensors");
}

void expect_parse_error(const std::string& bytes, std::initializer_list<std::string> needles) {
  expect_error([&] { parse(bytes); }, needles);
}

TEST(Safetensors, ParsesWhatTheWriterWrote) {
  std::string bytes = safetensors_bytes({{"a", {2, 3}, DType::F32, {1, 2, 3, 4, 5, 6}},
                                         {"b", {4}, DType::BF16, {0.5f, 1, 2, -3}},
                                         {"c", {2, 0}, DType::F16, {}},
                                         {"scalar", {}, DType::F16, {1.5f}}});
  auto t = parse(bytes);
  ASSERT_EQ(t.size(), 4u);
  const TensorView& a = t.at("a");
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.numel(), 6);
  EXPECT_EQ(a.nbytes, 24u);
  EXPECT_EQ(a.file, "x.safetensors");
  EXPECT_EQ(static_cast<const float*>(a.data)[5], 6.0f);
  const TensorView& b = t.at("b");
  float out[4];
  to_f32(b.dtype, b.data, out, 4);
  EXPECT_EQ(out[3], -3.0f);
  EXPECT_EQ(t.at("c").numel(), 0);
  EXPECT_EQ(t.at("scalar").numel(), 1);
  EXPECT_EQ(t.at("scalar").nbytes, 2u);
}

TEST(Safetensors, AcceptsGapsAndAnEmptyFile) {
  // Tensors need not be packed; only overlaps are lies.
  auto t = parse(safetensors_raw(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"__metadata__":{"k":"v"}})",
      std::string(16, '\0')));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(parse(safetensors_raw("{}", "")).empty());
}

TEST(Safetensors, MapsAFile) {
  TempDir dir;
  test::write_file(dir / "w.safetensors", safetensors_bytes({{"w", {3}, DType::F32, {7, 8, 9}}}));
  SafetensorsFile f(dir / "w.safetensors");
  ASSERT_EQ(f.tensors().count("w"), 1u);
  EXPECT_EQ(static_cast<const float*>(f.tensors().at("w").data)[2], 9.0f);
  EXPECT_EQ(f.tensors().at("w").file, (dir / "w.safetensors").string());
}

// --- truncated files ---

TEST(BadSafetensors, ShorterThanTheLengthField) {
  expect_parse_error("", {"x.safetensors", "0 bytes", "too short"});
  expect_parse_error(std::string(7, '\0'), {"x.safetensors", "7 bytes", "too short"});
  TempDir dir;
  test::write_file(dir / "empty.safetensors", "");
  expect_error([&] { SafetensorsFile f(dir / "empty.safetensors"); },
               {(dir / "empty.safetensors").string(), "too short"});
}

TEST(BadSafetensors, HeaderLengthPastTheEnd) {
  std::string bytes = safetensors_bytes({{"a", {4}, DType::F32, {}}});
  expect_parse_error(bytes.substr(0, 20), {"x.safetensors", "header length", "past the end"});
  std::string huge(8, '\xff');
  expect_parse_error(huge + "{}", {"header length 18446744073709551615"});
}

TEST(BadSafetensors, DataShorterThanOffsets) {
  std::string bytes = safetensors_bytes({{"a", {4}, DType::F32, {}}, {"b", {4}, DType::F32, {}}});
  expect_parse_error(bytes.substr(0, bytes.size() - 1),
                     {"x.safetensors", "tensor 'b'", "[16, 32]", "past the data region of 31 bytes"});
}

TEST(BadSafetensors, TruncatedFileOnDisk) {
  TempDir dir;
  std::string bytes = safetensors_bytes({{"w", {64}, DType::BF16, {}}});
  test::write_file(dir / "model.safetensors", bytes.substr(0, bytes.size() - 10));
  expect_error([&] { TensorStore store(dir.path()); },
               {"model.safetensors", "tensor 'w'", "truncated"});
}

// --- headers that lie or are malformed ---

TEST(BadSafetensors, OverlappingTensors) {
  expect_parse_error(
      safetensors_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      std::string(12, '\0')),
      {"x.safetensors", "'a'", "'b'", "overlap"});
}

TEST(BadSafetensors, ShapeDisagreesWithOffsets) {
  expect_parse_error(
      safetensors_raw(R"({"w":{"dtype":"BF16","shape":[3,4],"data_offsets":[0,48]}})",
                      std::string(48, '\0')),
      {"x.safetensors", "tensor 'w'", "[3,4]", "needs 24 bytes", "hold 48"});
  // Dimensions whose product overflows must not wrap around to a small size.
  expect_parse_error(
      safetensors_raw(
          R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})", ""),
      {"tensor 'w'", "64 bits"});
}

TEST(BadSafetensors, UnsupportedDtype) {
  expect_parse_error(
      safetensors_raw(R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})",
                      std::string(16, '\0')),
      {"x.safetensors", "tensor 'ids'", "unsupported dtype 'I64'", "F32, F16, BF16"});
  expect_parse_error(
      safetensors_raw(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,1]}})", "\0"),
      {"tensor 'w'", "unknown dtype 'Q4'"});
}

TEST(BadSafetensors, HeaderNotJson) {
  expect_parse_error(safetensors_raw("{\"a\": [", ""), {"x.safetensors", "not valid JSON"});
  expect_parse_error(safetensors_raw("[1,2]", ""), {"x.safetensors", "JSON object, got array"});
}

TEST(BadSafetensors, EntryFieldsOfTheWrongType) {
  auto entry = [](const std::string& body) {
    return safetensors_raw("{\"t\":" + body + "}", std::string(8, '\0'));
  };
  expect_parse_error(entry("5"), {"tensor 't'", "must be an object, got number"});
  expect_parse_error(entry(R"({"shape":[2],"data_offsets":[0,8]})"), {"tensor 't'", "missing 'dtype'"});
  expect_parse_error(entry(R"({"dtype":32,"shape":[2],"data_offsets":[0,8]})"),
                     {"tensor 't'", "'dtype' must be a string"});
  expect_parse_error(entry(R"({"dtype":"F32","data_offsets":[0,8]})"), {"missing 'shape'"});
  expect_parse_error(entry(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})"),
                     {"'shape' must be an array, got string"});
  expect_parse_error(entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
                     {"shape entries must be non-negative integers, got number -2"});
  expect_parse_error(entry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
                     {"shape entries must be non-negative integers"});
  expect_parse_error(entry(R"({"dtype":"F32","shape":[2]})"), {"missing 'data_offsets'"});
  expect_parse_error(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"),
                     {"'data_offsets' must be [begin, end]"});
  expect_parse_error(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,"8"]})"),
                     {"'data_offsets' must be [begin, end]"});
  expect_parse_error(entry(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"),
                     {"end before they begin"});
  expect_parse_error(safetensors_raw(R"({"__metadata__":"pt"})", ""),
                     {"'__metadata__' must be an object"});
}

// --- directories ---

TEST(TensorStore, SingleFileAndShards) {
  TempDir single;
  test::write_file(single / "model.safetensors", safetensors_bytes({{"a", {1}, DType::F32, {}}}));
  TensorStore s(single.path());
  EXPECT_TRUE(s.has("a"));
  EXPECT_FALSE(s.has("b"));
  expect_error([&] { s.get("b"); }, {"'b'", single.path().string()});

  TempDir sharded;
  test::write_file(sharded / "m-1.safetensors", safetensors_bytes({{"a", {1}, DType::F32, {}}}));
  test::write_file(sharded / "m-2.safetensors",
                   safetensors_bytes({{"b", {2}, DType::F32, {}}, {"c", {2}, DType::BF16, {}}}));
  test::write_file(sharded / "model.safetensors.index.json",
                   R"({"metadata":{},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors",)"
                   R"("c":"m-2.safetensors"}})");
  TensorStore t(sharded.path());
  EXPECT_EQ(t.all().size(), 3u);
  EXPECT_NE(t.get("c").file.find("m-2.safetensors"), std::string::npos);
}

TEST(BadTensorStore, NoSafetensors) {
  TempDir dir;
  expect_error([&] { TensorStore s(dir.path()); },
               {dir.path().string(), "no model.safetensors or model.safetensors.index.json",
                "no .safetensors files"});
  test::write_file(dir / "consolidated.safetensors", safetensors_bytes({}));
  expect_error([&] { TensorStore s(dir.path()); }, {"found consolidated.safetensors"});
  expect_error([&] { TensorStore s(dir / "nope"); }, {"nope", "not a directory"});
}

TEST(BadTensorStore, IndexNamesAMissingShard) {
  TempDir dir;
  test::write_file(dir / "m-1.safetensors", safetensors_bytes({{"a", {1}, DType::F32, {}}}));
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}})");
  expect_error([&] { TensorStore s(dir.path()); },
               {"model.safetensors.index.json", "shard 'm-2.safetensors'", "does not exist"});
}

TEST(BadTensorStore, IndexedTensorMissingFromItsShard) {
  TempDir dir;
  test::write_file(dir / "m-1.safetensors", safetensors_bytes({{"a", {1}, DType::F32, {}}}));
  test::write_file(dir / "m-2.safetensors",
                   safetensors_bytes({{"b", {1}, DType::F32, {}}, {"c", {1}, DType::F32, {}}}));
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"weight_map":{"a":"m-1.safetensors","b":"m-1.safetensors",)"
                   R"("c":"m-2.safetensors"}})");
  expect_error([&] { TensorStore s(dir.path()); },
               {"tensor 'b'", "listed in shard 'm-1.safetensors'", "m-2.safetensors"});
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"weight_map":{"a":"m-1.safetensors","z":"m-1.safetensors"}})");
  expect_error([&] { TensorStore s(dir.path()); }, {"tensor 'z'", "no shard holds it"});
}

TEST(BadTensorStore, TensorInTwoShards) {
  TempDir dir;
  test::write_file(dir / "m-1.safetensors", safetensors_bytes({{"a", {1}, DType::F32, {}}}));
  test::write_file(dir / "m-2.safetensors",
                   safetensors_bytes({{"a", {1}, DType::F32, {}}, {"b", {1}, DType::F32, {}}}));
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}})");
  expect_error([&] { TensorStore s(dir.path()); },
               {"tensor 'a'", "m-1.safetensors", "m-2.safetensors"});
}

TEST(BadTensorStore, MalformedIndex) {
  TempDir dir;
  test::write_file(dir / "model.safetensors.index.json", R"({"weight_map": )");
  expect_error([&] { TensorStore s(dir.path()); },
               {"model.safetensors.index.json", "not valid JSON"});
  test::write_file(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error([&] { TensorStore s(dir.path()); }, {"missing field 'weight_map'"});
  test::write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
  expect_error([&] { TensorStore s(dir.path()); }, {"weight_map['a']", "got number"});
  // An index must not reach outside the model directory.
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  expect_error([&] { TensorStore s(dir.path()); },
               {"'../elsewhere.safetensors' is not a file name in the model directory"});
}

}  // namespace
}  // namespace skim
