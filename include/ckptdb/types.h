#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ckptdb/shape.h"
#include "ckptdb/status.h"

namespace ckptdb {

// Element types a checkpoint can hold. The numeric values are part of the
// storage format.
enum class DType : uint8_t {
  kFloat64 = 1,
  kFloat32 = 2,
  kFloat16 = 3,
  kBFloat16 = 4,
  kInt64 = 5,
  kInt32 = 6,
  kInt16 = 7,
  kInt8 = 8,
  kUInt8 = 9,
  kBool = 10,
  kFloat8E4M3FN = 11,
  kFloat8E5M2 = 12,
  kUInt32 = 13,
  kUInt64 = 14,
};

// "float32", "bfloat16", ... (the names of docs/api.md).
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName; InvalidArgument for an unknown name.
Result<DType> DTypeFromName(std::string_view name);
// True for every value of the enum above (used to validate decoded records).
bool IsValidDType(uint8_t raw);
// Bytes per element.
size_t DTypeSize(DType dtype);
// Floating point and integer types (not bool): the types `cast` converts
// between.
bool IsNumeric(DType dtype);

// "[2, 3]".
std::string ShapeToString(const Shape& shape);
// Product of the extents (1 for a 0-d shape).
int64_t NumElements(const Shape& shape);

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

// The most dimensions a tensor of a checkpoint has, and the largest extent of
// one dimension: what its records hold. Save and Load refuse views beyond
// them (InvalidArgument), so that no checkpoint is committed that its readers
// would refuse.
inline constexpr size_t kMaxTensorDims = 32;
inline constexpr int64_t kMaxTensorExtent = int64_t{1} << 48;

// A rank's piece of a global tensor, borrowed from the caller: `data` points at
// the first of `local_shape` elements of `dtype`, laid out by `strides`. The
// caller keeps the memory alive and unchanged (Save) or untouched by others
// (Load) for the duration of the call.
//
// Two kinds of piece: a box (`global_offset` set, the local box is [offset,
// offset + local_shape)), or a flat range (`flat_offset` set: `data` is 1-D
// and holds elements [flat_offset, flat_offset + local_shape[0]) of the
// row-major flattening of the global tensor, as ZeRO or FSDP shard flattened
// parameters).
struct Box;  // ckptdb/box.h

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device{};
  Shape local_shape{};
  Shape global_shape{};
  Shape global_offset{};  // same rank as global_shape; local box = [offset,
                          // offset + local_shape)
  // Element (not byte) strides of `data`, one per dimension of local_shape;
  // empty: dense row-major (C-contiguous). Negative strides are refused; a
  // load target must not have a stride of 0 on a dimension longer than 1.
  Shape strides{};
  // Set for a flat range: its first element's row-major position in the
  // global tensor. Then local_shape is 1-D and global_offset empty.
  std::optional<int64_t> flat_offset{};

  // The whole tensor: offset 0, local shape == global shape.
  static TensorView Whole(void* data, DType dtype, Shape shape,
                          Device device = {});
  // One shard of a global tensor.
  static TensorView Shard(void* data, DType dtype, Shape local_shape,
                          Shape global_shape, Shape global_offset,
                          Device device = {});
  // Elements [flat_offset, flat_offset + num_elements) of the row-major
  // flattening of a tensor of `global_shape`, dense at `data`.
  static TensorView FlatRange(void* data, DType dtype, int64_t num_elements,
                              Shape global_shape, int64_t flat_offset,
                              Device device = {});
  // A copy of this view laid out by element `strides` (see `strides`).
  TensorView WithStrides(Shape element_strides) const;

  bool is_flat_range() const { return flat_offset.has_value(); }
  // The shard's box in the global index space: [global_offset, global_offset +
  // local_shape). Not for a flat range.
  Box box() const;
  // True when `data` is dense row-major: no strides, or the strides a dense
  // array of local_shape has (dimensions of extent 1 aside).
  bool is_dense() const;
  int64_t num_elements() const { return NumElements(local_shape); }
  size_t nbytes() const {
    return static_cast<size_t>(num_elements()) * DTypeSize(dtype);
  }
};

// The element strides of a dense row-major array of `shape`.
Shape RowMajorStrides(const Shape& shape);

// Raw bytes, distinct from text.
struct Bytes {
  std::string data{};
  friend bool operator==(const Bytes&, const Bytes&) = default;
};

// The absent value (Python's None).
struct None {
  friend bool operator==(const None&, const None&) = default;
};

// An integer outside int64_t's range (Python's int has no bound: a
// generator's 128-bit state), as its decimal digits with a leading '-' when
// negative, no leading zeros ("340282366920938463463374607431768211455").
struct BigInt {
  std::string digits{};
  friend bool operator==(const BigInt&, const BigInt&) = default;
};

// Whether `value.digits` is an integer in that form that int64_t cannot hold
// (each integer has one representation as a Value).
bool IsValidBigInt(const BigInt& value);

// A small non-tensor leaf: int (int64_t, else BigInt), float, bool, text,
// bytes or none. Stored in the checkpoint metadata.
using Value =
    std::variant<int64_t, double, bool, std::string, Bytes, None, BigInt>;

// "int", "float", "bool", "str", "bytes", "None" ("int" for a BigInt).
std::string_view ValueTypeName(const Value& value);

// What a StateDict is: a dict (str and int keys), or a list or tuple (int keys
// 0..n-1, its items in order). The numeric values are part of the storage
// format (PathPartKind).
enum class ContainerKind : uint8_t { kDict = 0, kList = 1, kTuple = 2 };

// How one part of a path addresses its container: a dict's str key, a dict's
// int key, or a list's or tuple's index. The numeric values are part of the
// storage format.
enum class PathPartKind : uint8_t {
  kStrKey = 0,
  kIntKey = 1,
  kListIndex = 2,
  kTupleIndex = 3,
};
// The kind of each part of a path, parallel to the path.
using PathKinds = std::vector<PathPartKind>;

// A key of a StateDict: a str, or an int (a dict's int key, or the index of a
// list or tuple item). Ints sort before strs.
using Key = std::variant<int64_t, std::string>;

// The key's part of a flat key: the str, or the int in decimal ("3", "-1").
std::string KeyText(const Key& key);

// "optim.state.0.exp_avg": the flat key of a path of keys.
std::string JoinKeys(const std::vector<Key>& path);

// How many containers deep a state dict may nest, the root included; a deeper
// one is InvalidArgument (no input exhausts the stack).
inline constexpr size_t kMaxNesting = 1000;

// A nested state dict: key -> tensor view, small value, or nested state dict,
// which is a dict, list or tuple (ContainerKind). Keys are kept in sorted
// order. Value type (copies are deep; tensor data is borrowed, never copied).
class StateDict {
 public:
  struct Entry;
  using Map = std::map<Key, Entry>;

  explicit StateDict(ContainerKind kind = ContainerKind::kDict) : kind_(kind) {}
  StateDict(const StateDict& other);
  StateDict& operator=(const StateDict& other);
  StateDict(StateDict&&) noexcept = default;
  StateDict& operator=(StateDict&&) noexcept = default;
  ~StateDict();

  // An empty list or tuple; fill it with Append.
  static StateDict List() { return StateDict(ContainerKind::kList); }
  static StateDict Tuple() { return StateDict(ContainerKind::kTuple); }

  // A state dict that could not be built: its builder (a binding converting
  // its language's objects) found bad input on this rank. A collective call
  // (Save, SaveAsync, Load) given it still takes part, and fails on every
  // rank with `error` (or with the disagreement it causes), so that the
  // other ranks never wait for, or pair their next call with, a rank that
  // left. `error` must not be OK.
  static StateDict Invalid(Status error);
  // OK, unless made by Invalid.
  Status error() const { return error_ ? *error_ : Status::OK(); }

  StateDict& Set(Key key, TensorView tensor);
  StateDict& Set(Key key, Value value);
  StateDict& Set(Key key, StateDict child);
  // Sets the item at index size() (a list's or tuple's next item).
  StateDict& Append(TensorView tensor);
  StateDict& Append(Value value);
  StateDict& Append(StateDict child);
  // Returns the nested state dict under `key`, creating an empty one of `kind`
  // (replacing any leaf) when absent.
  StateDict& Child(const Key& key, ContainerKind kind = ContainerKind::kDict);

  // nullptr when absent or of another kind.
  const TensorView* GetTensor(const Key& key) const;
  const Value* GetValue(const Key& key) const;
  const StateDict* GetChild(const Key& key) const;

  ContainerKind kind() const { return kind_; }
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  Map& items() { return items_; }
  const Map& items() const { return items_; }

 private:
  ContainerKind kind_ = ContainerKind::kDict;
  Map items_;
  std::shared_ptr<const Status> error_;
};

struct StateDict::Entry {
  std::variant<TensorView, Value, StateDict> node;
};

}  // namespace ckptdb
