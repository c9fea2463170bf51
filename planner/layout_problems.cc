#include "planner/layout_problems.h"

#include "core/partition.h"

namespace ckptdb::planner {
namespace {

std::string ChunkName(const ChunkMetadata& c) {
  return "chunk at offset " + ShapeToString(c.box.origin) + " shape " +
         ShapeToString(c.box.shape) + " (writer rank " +
         std::to_string(c.writer_rank) + ")";
}

// The message of a layout problem other than a chunk outside the tensor.
std::string LayoutMessage(const std::string& name, const TensorMetadata& t,
                          const PartitionProblem& p) {
  const std::string shape = ShapeToString(t.global_shape);
  switch (p.error) {
    case PartitionError::kNone:
      return "";
    case PartitionError::kBadShape:
      return name + ": global shape " + shape + " is not a valid shape";
    case PartitionError::kWrongRank:
    case PartitionError::kOutside:
      return name + ": " + ChunkName(t.chunks[p.box]) + " lies outside " +
             shape;
    case PartitionError::kEmptyBox:
      return name + ": " + ChunkName(t.chunks[p.box]) + " holds no element";
    case PartitionError::kOverlap:
      return name + ": " + ChunkName(t.chunks[p.box]) + " and " +
             ChunkName(t.chunks[p.other_box]) + " overlap in " +
             BoxToString(p.overlap);
    case PartitionError::kGap:
      break;
  }
  std::string message = name + ": chunks cover " + std::to_string(p.covered) +
                        " of " + std::to_string(p.total) + " elements (a gap";
  if (p.missing_element)
    message += ": no chunk holds " + ShapeToString(*p.missing_element);
  if (p.covered >= p.total) message += "; chunks also overlap elsewhere";
  return message + ")";
}

}  // namespace

std::vector<std::string> LayoutProblems(const std::string& key,
                                        const TensorMetadata& t) {
  std::vector<std::string> problems;
  const std::string name = "tensor '" + key + "'";
  std::vector<Box> boxes;
  boxes.reserve(t.chunks.size());
  for (const ChunkMetadata& c : t.chunks) {
    boxes.push_back(c.box);
    if (CheckBoxInside(t.global_shape, boxes.back()) != PartitionError::kNone) {
      problems.push_back(name + ": " + ChunkName(c) + " lies outside " +
                         ShapeToString(t.global_shape));
      continue;
    }
    const uint64_t expected =
        static_cast<uint64_t>(c.box.volume()) * DTypeSize(t.dtype);
    if (c.nbytes != expected) {
      problems.push_back(name + ": chunk at offset " +
                         ShapeToString(c.box.origin) + " records " +
                         std::to_string(c.nbytes) + " bytes, its box holds " +
                         std::to_string(expected));
    }
  }
  if (!problems.empty()) return problems;
  const PartitionProblem p = CheckPartition(t.global_shape, boxes);
  if (!p.ok()) problems.push_back(LayoutMessage(name, t, p));
  return problems;
}

}  // namespace ckptdb::planner
