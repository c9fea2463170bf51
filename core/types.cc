#include "ckptdb/types.h"

#include <array>

#include "ckptdb/box.h"
#include "core/sorted_maps.h"

namespace ckptdb {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  bool numeric;
};

constexpr std::array<DTypeInfo, 14> kDTypes = {{
    {DType::kFloat64, "float64", 8, true},
    {DType::kFloat32, "float32", 4, true},
    {DType::kFloat16, "float16", 2, true},
    {DType::kBFloat16, "bfloat16", 2, true},
    {DType::kInt64, "int64", 8, true},
    {DType::kInt32, "int32", 4, true},
    {DType::kInt16, "int16", 2, true},
    {DType::kInt8, "int8", 1, true},
    {DType::kUInt8, "uint8", 1, true},
    {DType::kBool, "bool", 1, false},
    {DType::kFloat8E4M3FN, "float8_e4m3fn", 1, true},
    {DType::kFloat8E5M2, "float8_e5m2", 1, true},
    {DType::kUInt32, "uint32", 4, true},
    {DType::kUInt64, "uint64", 8, true},
}};

const DTypeInfo& Info(DType dtype) {
  // The enum values are 1..14 in the order of kDTypes.
  return kDTypes[static_cast<size_t>(dtype) - 1];
}

}  // namespace

bool IsValidDType(uint8_t raw) { return raw >= 1 && raw <= kDTypes.size(); }
std::string_view DTypeName(DType dtype) { return Info(dtype).name; }
size_t DTypeSize(DType dtype) { return Info(dtype).size; }
bool IsNumeric(DType dtype) { return Info(dtype).numeric; }

Result<DType> DTypeFromName(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) + "'");
}

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorView TensorView::Whole(void* data, DType dtype, Shape shape,
                             Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.global_offset.assign(shape.size(), 0);
  v.local_shape = shape;
  v.global_shape = std::move(shape);
  return v;
}

TensorView TensorView::Shard(void* data, DType dtype, Shape local_shape,
                             Shape global_shape, Shape global_offset,
                             Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.local_shape = std::move(local_shape);
  v.global_shape = std::move(global_shape);
  v.global_offset = std::move(global_offset);
  return v;
}

TensorView TensorView::FlatRange(void* data, DType dtype, int64_t num_elements,
                                 Shape global_shape, int64_t flat_offset,
                                 Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.local_shape = {num_elements};
  v.global_shape = std::move(global_shape);
  v.flat_offset = flat_offset;
  return v;
}

TensorView TensorView::WithStrides(Shape element_strides) const {
  TensorView v = *this;
  v.strides = std::move(element_strides);
  return v;
}

Box TensorView::box() const { return Box{global_offset, local_shape}; }

bool TensorView::is_dense() const {
  if (strides.empty() || num_elements() == 0) return true;
  if (strides.size() != local_shape.size()) return false;
  const Shape dense = RowMajorStrides(local_shape);
  for (size_t d = 0; d < strides.size(); ++d) {
    if (local_shape[d] != 1 && strides[d] != dense[d]) return false;
  }
  return true;
}

Shape RowMajorStrides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  return strides;
}

std::string_view ValueTypeName(const Value& value) {
  static constexpr std::array<std::string_view, 7> kNames = {
      "int", "float", "bool", "str", "bytes", "None", "int"};
  return kNames[value.index()];
}

bool IsValidBigInt(const BigInt& value) {
  std::string_view digits = value.digits;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (negative) digits.remove_prefix(1);
  if (digits.empty() || digits[0] == '0') return false;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  // Outside [-2^63, 2^63 - 1]: more digits than they have, or as many and
  // greater.
  const std::string_view bound =
      negative ? "9223372036854775808" : "9223372036854775807";
  if (digits.size() != bound.size()) return digits.size() > bound.size();
  return digits > bound;
}

StateDict StateDict::Invalid(Status error) {
  CKPTDB_REQUIRE(!error.ok(), "StateDict::Invalid needs an error");
  StateDict out;
  out.error_ = std::make_shared<const Status>(std::move(error));
  return out;
}

StateDict::StateDict(const StateDict& other) = default;
StateDict& StateDict::operator=(const StateDict& other) = default;
StateDict::~StateDict() = default;

std::string KeyText(const Key& key) {
  if (const auto* i = std::get_if<int64_t>(&key)) return std::to_string(*i);
  return std::get<std::string>(key);
}

std::string JoinKeys(const std::vector<Key>& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) out += '.';
    out += KeyText(path[i]);
  }
  return out;
}

StateDict& StateDict::Set(Key key, TensorView tensor) {
  AtOrInsert(items_, std::move(key)).node = std::move(tensor);
  return *this;
}

StateDict& StateDict::Set(Key key, Value value) {
  AtOrInsert(items_, std::move(key)).node = std::move(value);
  return *this;
}

StateDict& StateDict::Set(Key key, StateDict child) {
  AtOrInsert(items_, std::move(key)).node = std::move(child);
  return *this;
}

StateDict& StateDict::Append(TensorView tensor) {
  return Set(static_cast<int64_t>(items_.size()), std::move(tensor));
}

StateDict& StateDict::Append(Value value) {
  return Set(static_cast<int64_t>(items_.size()), std::move(value));
}

StateDict& StateDict::Append(StateDict child) {
  return Set(static_cast<int64_t>(items_.size()), std::move(child));
}

StateDict& StateDict::Child(const Key& key, ContainerKind kind) {
  Entry& entry = items_[key];
  if (!std::holds_alternative<StateDict>(entry.node))
    entry.node = StateDict(kind);
  return std::get<StateDict>(entry.node);
}

const TensorView* StateDict::GetTensor(const Key& key) const {
  auto it = items_.find(key);
  return it == items_.end() ? nullptr
                            : std::get_if<TensorView>(&it->second.node);
}

const Value* StateDict::GetValue(const Key& key) const {
  auto it = items_.find(key);
  return it == items_.end() ? nullptr : std::get_if<Value>(&it->second.node);
}

const StateDict* StateDict::GetChild(const Key& key) const {
  auto it = items_.find(key);
  return it == items_.end() ? nullptr
                            : std::get_if<StateDict>(&it->second.node);
}

}  // namespace ckptdb
