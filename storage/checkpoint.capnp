# Checkpoint metadata records in the `meta` column family (key layout: storage/keys.h). Field
# numbers are part of the storage format: only add fields.
#
# Format 1: one Checkpoint message per checkpoint, every tensor's chunks inline (Tensor.chunks).
# Format 2: the main record (a Checkpoint message at MetaKey(id), still the commit point) holds
# the info, values, user metadata and per tensor its key, path, dtype, global shape and chunk
# count, but no chunks; each tensor's chunks are a TensorChunks message in a record of their own
# (TensorRecordKey(id, key)), written in the same batch as the main record.
# Format 3: format 2's records; chunks may be in value files (storage/value_files.h).
# Format 4: the tensors of few chunks (storage::kMaxSmallTensorChunks) are flagged in the main
# record (Tensor.chunksInGroup) and have no record of their own: their chunks are one
# SmallTensors message at SmallTensorsKey(id), in the main record's order of those tensors.
@0xb6bd6dc4d113a16d;

struct Checkpoint {
  formatVersion @0 :UInt32;
  id @1 :Int64;
  hasStep @2 :Bool;
  step @3 :Int64;
  hasTag @4 :Bool;
  tag @5 :Text;
  created @6 :Float64;        # unix seconds
  worldSize @7 :Int32;
  nbytes @8 :Int64;           # tensor bytes, each stored box once
  tensors @9 :List(Tensor);
  values @10 :List(SmallValue);
  userMetadata @11 :List(KeyValue);
  # Incremental saves (absent in older records: every byte written, nothing referred to).
  hasNbytesWritten @12 :Bool;
  nbytesWritten @13 :Int64;   # tensor bytes this checkpoint wrote itself
  references @14 :List(Int64); # ascending ids of earlier checkpoints holding chunks it uses
}

struct Tensor {
  key @0 :Text;               # flat key
  path @1 :List(Text);        # flat mapping: the nested path the key came from
  dtype @2 :UInt8;            # ckptdb::DType
  globalShape @3 :List(Int64);
  chunks @4 :List(Chunk);      # format 1 only; empty in format 2
  chunkCount @5 :UInt64;       # format 2: the number of chunks in the tensor's record
  pathKinds @6 :Data;          # one ckptdb::PathPartKind per path part (str key, int key, list or
                               # tuple index); empty: every part a dict's str key
  chunksInGroup @7 :Bool;      # format 4: the chunks are in the SmallTensors record
}

# Format 4: the chunks of the tensors flagged chunksInGroup, one entry per such tensor in the
# main record's order (an entry's formatVersion, checkpointId and key are unset).
struct SmallTensors {
  formatVersion @0 :UInt32;
  checkpointId @1 :Int64;      # must match the main record's
  tensors @2 :List(TensorChunks);
}

# Format 2: one tensor's chunks, sorted by global offset. `boxes` packs each chunk's global
# offset, shape and writer rank as bytes (storage/metadata_codec.cc, "box stream"): a flags byte,
# then only what the flags say differs from the prediction (varints):
#   bit 0: the offset is given, one zigzag varint per dimension: its difference from the
#          predicted offset (the first chunk's is all zeros; a later one's is the previous chunk's
#          offset advanced like an odometer: the last dimension by the previous chunk's extent,
#          carrying into the dimension before it when it reaches the tensor's extent);
#   bit 1: the shape is given, one varint per dimension, and becomes the reference shape
#          (initially the tensor's shape); otherwise the shape is the reference shape clipped
#          to the tensor (per dimension min(reference, extent - offset));
#   bit 2: the writer rank is given as a varint; otherwise it is the previous chunk's (0 first).
# Other bits are zero. A chunk's size is its volume times the dtype's size (not stored).
struct TensorChunks {
  formatVersion @0 :UInt32;
  checkpointId @1 :Int64;      # must match the main record's
  key @2 :Text;                # flat key; must match the record's key
  chunkCount @3 :UInt64;
  boxes @4 :Data;
  checksums @5 :List(UInt64);  # XXH3-64 of each chunk's bytes, in chunk order
  # Incremental saves; both empty in older records.
  hashes @6 :Data;             # 16 bytes per chunk in chunk order: XXH3-128 low64, high64 (LE)
  holders @7 :List(Int64);     # per chunk, the checkpoint holding its bytes (0: this one),
                               # each one of the main record's references
}

struct Chunk {
  globalOffset @0 :List(Int64);
  localShape @1 :List(Int64);
  writerRank @2 :Int32;
  nbytes @3 :UInt64;
  checksum @4 :UInt64;        # XXH3-64 of the chunk bytes
}

struct SmallValue {
  key @0 :Text;
  path @1 :List(Text);
  union {
    int @2 :Int64;
    float @3 :Float64;
    bool @4 :Bool;
    text @5 :Text;
    bytes @6 :Data;
    none @8 :Void;
    bigInt @9 :Text;           # ckptdb::BigInt: decimal digits, outside int64
  }
  pathKinds @7 :Data;          # as Tensor.pathKinds
}

struct KeyValue {
  key @0 :Text;
  value @1 :Text;
}
