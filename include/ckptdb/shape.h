#pragma once

// Shape: the extents (or origin, offsets, strides) of a tensor's dimensions.
// A vector of int64_t that keeps up to kInline values in the object itself,
// so that the shapes, boxes and views of tensors of up to four dimensions
// allocate nothing: a load or save of many small tensors copies millions of
// them. Beyond kInline values it holds them on the heap, as std::vector does.
// Its interface is the part of std::vector's that shapes need, with the same
// meaning; it converts from and to std::vector<int64_t>.

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace ckptdb {

class Shape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  // Values held without a heap allocation.
  static constexpr size_t kInline = 4;

  Shape() noexcept = default;
  explicit Shape(size_t n) { assign(n, 0); }
  Shape(size_t n, int64_t value) { assign(n, value); }
  Shape(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
  }
  template <typename It,
            typename = typename std::iterator_traits<It>::iterator_category>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<int64_t>& values) {  // NOLINT: a vector is a shape
    assign(values.begin(), values.end());
  }
  Shape(const Shape& other) { assign(other.begin(), other.end()); }
  Shape(Shape&& other) noexcept { TakeFrom(other); }
  Shape& operator=(const Shape& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) {
      Release();
      TakeFrom(other);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~Shape() { Release(); }

  operator std::vector<int64_t>() const { return {begin(), end()}; }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }
  int64_t* data() noexcept { return on_heap() ? heap_ : inline_; }
  const int64_t* data() const noexcept { return on_heap() ? heap_ : inline_; }

  int64_t& operator[](size_t i) noexcept { return data()[i]; }
  const int64_t& operator[](size_t i) const noexcept { return data()[i]; }
  int64_t& at(size_t i) {
    CheckIndex(i);
    return data()[i];
  }
  const int64_t& at(size_t i) const {
    CheckIndex(i);
    return data()[i];
  }
  int64_t& front() noexcept { return data()[0]; }
  const int64_t& front() const noexcept { return data()[0]; }
  int64_t& back() noexcept { return data()[size_ - 1]; }
  const int64_t& back() const noexcept { return data()[size_ - 1]; }

  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size_; }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size_; }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept {
    return const_reverse_iterator(end());
  }
  const_reverse_iterator rend() const noexcept {
    return const_reverse_iterator(begin());
  }

  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto grown = std::make_unique<int64_t[]>(n);
    std::copy(begin(), end(), grown.get());
    const size_t size = size_;
    Release();
    heap_ = grown.release();
    capacity_ = n;
    size_ = size;
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_t n) { resize(n, 0); }
  void resize(size_t n, int64_t value) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = n;
  }
  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }
  template <typename It,
            typename = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    using Category = typename std::iterator_traits<It>::iterator_category;
    if constexpr (std::is_same_v<It, const int64_t*> ||
                  std::is_same_v<It, int64_t*>) {
      // The range may be this shape's own values.
      const size_t n = static_cast<size_t>(last - first);
      if (n > capacity_) {
        Shape grown;
        grown.reserve(n);
        std::memcpy(grown.data(), first, n * sizeof(int64_t));
        grown.size_ = n;
        *this = std::move(grown);
      } else {
        std::memmove(data(), first, n * sizeof(int64_t));
        size_ = n;
      }
    } else if constexpr (std::is_base_of_v<std::forward_iterator_tag,
                                           Category>) {
      const size_t n = static_cast<size_t>(std::distance(first, last));
      if (n > capacity_) {
        Release();
        reserve(n);
      }
      std::copy(first, last, data());
      size_ = n;
    } else {
      clear();
      for (; first != last; ++first) push_back(*first);
    }
  }
  void assign(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
  }
  void push_back(int64_t value) {
    if (size_ == capacity_) reserve(capacity_ * 2);
    data()[size_++] = value;
  }
  int64_t& emplace_back(int64_t value) {
    push_back(value);
    return back();
  }
  void pop_back() noexcept { --size_; }

  iterator insert(const_iterator pos, int64_t value) {
    return insert(pos, size_t{1}, value);
  }
  iterator insert(const_iterator pos, size_t n, int64_t value) {
    const size_t at = static_cast<size_t>(pos - begin());
    reserve(std::max(size_ + n, capacity_ * 2));
    int64_t* p = data();
    std::move_backward(p + at, p + size_, p + size_ + n);
    std::fill(p + at, p + at + n, value);
    size_ += n;
    return p + at;
  }
  template <typename It,
            typename = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - begin());
    const Shape values(first, last);  // may be this shape's own values
    reserve(std::max(size_ + values.size(), capacity_ * 2));
    int64_t* p = data();
    std::move_backward(p + at, p + size_, p + size_ + values.size());
    std::copy(values.begin(), values.end(), p + at);
    size_ += values.size();
    return p + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    int64_t* p = data();
    const size_t from = static_cast<size_t>(first - p);
    const size_t to = static_cast<size_t>(last - p);
    std::move(p + to, p + size_, p + from);
    size_ -= to - from;
    return p + from;
  }
  void swap(Shape& other) noexcept {
    Shape t(std::move(other));
    other = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    return a.size_ == b.size_ &&
           std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend std::strong_ordering operator<=>(const Shape& a,
                                          const Shape& b) noexcept {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(),
                                                  b.end());
  }
  friend bool operator==(const Shape& a, const std::vector<int64_t>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool on_heap() const noexcept { return capacity_ > kInline; }
  void Release() noexcept {
    if (on_heap()) delete[] heap_;
    capacity_ = kInline;
    size_ = 0;
  }
  void TakeFrom(Shape& other) noexcept {
    size_ = other.size_;
    capacity_ = other.capacity_;
    if (other.on_heap()) {
      heap_ = other.heap_;
    } else {
      std::memcpy(inline_, other.inline_, sizeof(int64_t) * other.size_);
    }
    other.capacity_ = kInline;
    other.size_ = 0;
  }
  void CheckIndex(size_t i) const {
    if (i >= size_) throw std::out_of_range("Shape::at");
  }

  union {
    int64_t inline_[kInline];
    int64_t* heap_;
  };
  size_t size_ = 0;
  size_t capacity_ = kInline;
};

inline void swap(Shape& a, Shape& b) noexcept { a.swap(b); }

}  // namespace ckptdb
