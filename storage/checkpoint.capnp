# Checkpoint metadata record: one message per checkpoint in the `meta` column family. Writing it is
# the commit point of a save. Field numbers are part of the storage format: only add fields.
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
}

struct Tensor {
  key @0 :Text;               # flat key
  path @1 :List(Text);        # flat mapping: the nested path the key came from
  dtype @2 :UInt8;            # ckptdb::DType
  globalShape @3 :List(Int64);
  chunks @4 :List(Chunk);
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
  }
}

struct KeyValue {
  key @0 :Text;
  value @1 :Text;
}
