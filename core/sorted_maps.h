#pragma once

// Filling and searching a std::map with keys that usually come in ascending
// order (a record or a layout written from sorted maps, a walk over sorted
// leaves): each goes in at the end, or is found next to the previous one,
// without a search; only a key out of order costs a lookup.

#include <utility>

namespace ckptdb {

// Inserts `value` at `key` (a key passed as an rvalue moves in) unless the
// key is there already; then returns false and leaves `key` and `value` as
// they were.
template <typename Map, typename Key, typename V>
bool InsertNew(Map& map, Key&& key, V&& value) {
  if (map.empty() || map.rbegin()->first < key) {
    map.try_emplace(map.end(), std::forward<Key>(key), std::forward<V>(value));
    return true;
  }
  return map.try_emplace(std::forward<Key>(key), std::forward<V>(value)).second;
}

// The element at `key`, default-constructed there when absent (a key passed
// as an rvalue moves in).
template <typename Map, typename Key>
typename Map::mapped_type& AtOrInsert(Map& map, Key&& key) {
  if (map.empty() || map.rbegin()->first < key)
    return map.try_emplace(map.end(), std::forward<Key>(key))->second;
  return map[std::forward<Key>(key)];
}

// The element at `key`, or end(): at `near` or just after it, as keys taken
// in ascending order find theirs, else looked up.
template <typename Map, typename Key>
typename Map::const_iterator FindNear(const Map& map,
                                      typename Map::const_iterator near,
                                      const Key& key) {
  if (near != map.end()) {
    if (near->first == key) return near;
    if (++near != map.end() && near->first == key) return near;
  }
  return map.find(key);
}

}  // namespace ckptdb
