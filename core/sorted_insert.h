#pragma once

// Filling a std::map from keys that usually arrive in ascending order (a
// record or a layout written from sorted maps): each goes in at the end
// without a search, and only a key out of order costs a lookup.

#include <utility>

namespace ckptdb {

// Inserts `value` at `key` unless the key is there already; then returns
// false and leaves `value` as it was.
template <typename Map, typename Key, typename V>
bool InsertNew(Map& map, const Key& key, V&& value) {
  if (map.empty() || map.rbegin()->first < key) {
    map.try_emplace(map.end(), key, std::forward<V>(value));
    return true;
  }
  return map.try_emplace(key, std::forward<V>(value)).second;
}

// The element at `key`, default-constructed there when absent.
template <typename Map, typename Key>
typename Map::mapped_type& AtOrInsert(Map& map, const Key& key) {
  if (map.empty() || map.rbegin()->first < key)
    return map.try_emplace(map.end(), key)->second;
  return map[key];
}

}  // namespace ckptdb
