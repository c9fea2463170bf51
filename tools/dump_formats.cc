#include "dump_formats.h"

#include <zip.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "dump_common.h"

namespace ckptdb::tools {
namespace {

const char* SafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return "F64";
    case DType::kFloat32:
      return "F32";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kInt64:
      return "I64";
    case DType::kInt32:
      return "I32";
    case DType::kInt16:
      return "I16";
    case DType::kInt8:
      return "I8";
    case DType::kUInt8:
      return "U8";
    case DType::kBool:
      return "BOOL";
    case DType::kFloat8E4M3FN:
      return "F8_E4M3";
    case DType::kFloat8E5M2:
      return "F8_E5M2";
    case DType::kUInt32:
      return "U32";
    case DType::kUInt64:
      return "U64";
  }
  return "U8";
}

const char* NpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return "<f8";
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat16:
      return "<f2";
    case DType::kBFloat16:
      return "<u2";
    case DType::kInt64:
      return "<i8";
    case DType::kInt32:
      return "<i4";
    case DType::kInt16:
      return "<i2";
    case DType::kInt8:
      return "|i1";
    case DType::kUInt8:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
      return "|u1";
    case DType::kBool:
      return "|b1";
    case DType::kUInt32:
      return "<u4";
    case DType::kUInt64:
      return "<u8";
  }
  return "|u1";
}

Status WriteAll(std::FILE* f, const void* data, size_t n,
                const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n) {
    return Status::IOError("writing " + path + ": " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace

Status WriteSafetensors(const std::string& path,
                        const std::vector<ExportTensor>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        const TensorFiller& fill) {
  // The header's one reserved name: a tensor under it would take the
  // metadata's place, which readers require to map text to text.
  for (const ExportTensor& t : tensors) {
    if (t.name != "__metadata__") continue;
    return Status::InvalidArgument(
        "tensor '__metadata__': a safetensors file keeps its metadata under "
        "that name, so no tensor can have it; export to .npz (--format npz) "
        "instead");
  }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // Appended in file order without a lookup each (the names are distinct):
  // an ordered object's insertion searches the whole object, quadratic in
  // the tensors (a second for 20,000).
  auto& entries = *header.get_ptr<nlohmann::ordered_json::object_t*>();
  entries.reserve(entries.size() + tensors.size());
  uint64_t at = 0;
  for (const ExportTensor& t : tensors) {
    entries.emplace_back(
        t.name, nlohmann::ordered_json{{"dtype", SafetensorsDType(t.dtype)},
                                       {"shape", t.shape},
                                       {"data_offsets", {at, at + t.nbytes}}});
    at += t.nbytes;
  }
  // Names that are not UTF-8 (a store written before saves checked them)
  // have U+FFFD in their place.
  std::string text = header.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8,
              ' ');  // the data starts 8-byte aligned
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(
      std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f)
    return Status::IOError("creating " + path + ": " + std::strerror(errno));
  const uint64_t length =
      text.size();  // little-endian on every platform we build for
  CKPTDB_RETURN_IF_ERROR(WriteAll(f.get(), &length, sizeof(length), path));
  CKPTDB_RETURN_IF_ERROR(WriteAll(f.get(), text.data(), text.size(), path));
  for (size_t i = 0; i < tensors.size(); ++i) {
    CKPTDB_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, fill(i));
    CKPTDB_ASSERT(bytes.size() == tensors[i].nbytes);
    CKPTDB_RETURN_IF_ERROR(WriteAll(f.get(), bytes.data(), bytes.size(), path));
  }
  if (std::fflush(f.get()) != 0)
    return Status::IOError("writing " + path + ": " + std::strerror(errno));
  return Status::OK();
}

std::string NpyHeader(DType dtype, const Shape& shape) {
  std::string dict = std::string("{'descr': '") + NpyDescr(dtype) +
                     "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ", ";
  }
  if (shape.size() == 1) dict.pop_back();
  dict += "), }";
  // Version 1.0 has a 2-byte header length, 2.0 a 4-byte one; the total is a
  // multiple of 64 and the dict ends with a newline.
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  out.append(reinterpret_cast<const char*>(&len), v2 ? 4 : 2);
  return out + dict;
}

namespace {

// A libzip source producing one .npy member on demand: the tensor is assembled
// when libzip opens the source (while writing the archive) and freed when it
// closes it, so only one tensor is in memory at a time.
struct NpySource {
  const ExportTensor* tensor;
  size_t index;
  const TensorFiller* fill;
  std::string header;
  std::vector<std::byte> data{};
  uint64_t offset = 0;
  Status status{};
  zip_error_t error{};
};

zip_int64_t NpyCallback(void* user, void* data, zip_uint64_t len,
                        zip_source_cmd_t cmd) {
  auto* s = static_cast<NpySource*>(user);
  switch (cmd) {
    case ZIP_SOURCE_OPEN: {
      Result<std::vector<std::byte>> bytes = (*s->fill)(s->index);
      s->offset = 0;
      if (!bytes.ok()) {
        s->status = bytes.status();
        zip_error_set(&s->error, ZIP_ER_READ, EIO);
        return -1;
      }
      s->data = std::move(bytes).value();
      CKPTDB_ASSERT(s->data.size() == s->tensor->nbytes);
      return 0;
    }
    case ZIP_SOURCE_READ: {
      const uint64_t total = s->header.size() + s->data.size();
      const uint64_t n = std::min<uint64_t>(len, total - s->offset);
      auto* out = static_cast<char*>(data);
      for (uint64_t done = 0; done < n;) {
        const uint64_t at = s->offset + done;
        if (at < s->header.size()) {
          const uint64_t k =
              std::min<uint64_t>(n - done, s->header.size() - at);
          std::memcpy(out + done, s->header.data() + at, k);
          done += k;
        } else {
          const uint64_t k = n - done;
          std::memcpy(out + done, s->data.data() + (at - s->header.size()), k);
          done += k;
        }
      }
      s->offset += n;
      return static_cast<zip_int64_t>(n);
    }
    case ZIP_SOURCE_CLOSE:
      std::vector<std::byte>().swap(s->data);
      return 0;
    case ZIP_SOURCE_STAT: {
      auto* st = static_cast<zip_stat_t*>(data);
      zip_stat_init(st);
      st->size = s->header.size() + s->tensor->nbytes;
      st->valid |= ZIP_STAT_SIZE;
      return sizeof(*st);
    }
    case ZIP_SOURCE_ERROR:
      return zip_error_to_data(&s->error, data, len);
    case ZIP_SOURCE_FREE:
      return 0;
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap(
          ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
          ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default:
      return -1;
  }
}

// Each tensor is the entry "<key>.npy", which numpy's np.load(f)[key] finds.
// Refused, naming the keys: a NUL (a zip entry's name ends at its first NUL,
// libzip takes C strings); a key that is another's with ".npy" added (numpy
// would give the other's entry under it); a name that leaves the directory an
// archive is extracted into ("..", a leading "/").
Status CheckNpzNames(const std::vector<ExportTensor>& tensors) {
  const std::string kInstead =
      "; export to safetensors (--format safetensors) instead";
  std::set<std::string_view> names;
  for (const ExportTensor& t : tensors) names.insert(t.name);
  std::map<std::string, std::string> extracted_as;
  for (const ExportTensor& t : tensors) {
    // (Error messages are escaped where they are printed.)
    const std::string key = "tensor '" + t.name + "'";
    if (t.name.find('\0') != std::string::npos) {
      return Status::InvalidArgument(
          key + ": its key holds a NUL byte, which no .npz entry name can" +
          kInstead);
    }
    const std::string_view name = t.name;
    if (name.ends_with(".npy") &&
        names.contains(name.substr(0, name.size() - 4))) {
      return Status::InvalidArgument(
          key + " and tensor '" + std::string(name.substr(0, name.size() - 4)) +
          "': numpy would read the second's entry under the first's key" +
          kInstead);
    }
    const std::string entry = t.name + ".npy";
    // unzip writes "./a.npy" and "b//c.npy" as "a.npy" and "b/c.npy": two
    // entries that extract to one file.
    const std::string extracted =
        std::filesystem::path(entry).lexically_normal().string();
    if (const auto [at, fresh] = extracted_as.emplace(extracted, t.name);
        !fresh) {
      return Status::InvalidArgument(
          key + " and tensor '" + at->second + "': their entry names extract " +
          "to the same file " + extracted + kInstead);
    }
    bool leaves = entry.starts_with("/");
    for (const auto& part : std::filesystem::path(entry))
      leaves |= part == "..";
    if (leaves) {
      return Status::InvalidArgument(
          key + ": its entry name " + entry +
          " would leave the directory the archive is extracted into" +
          kInstead);
    }
  }
  return Status::OK();
}

// An archive of no entries: the 22-byte end of central directory record.
Status WriteEmptyZip(const std::string& path) {
  static constexpr char kEnd[22] = {'P', 'K', 5, 6};
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(kEnd, sizeof(kEnd));
  out.close();
  if (!out)
    return Status::IOError("writing " + path + ": " + std::strerror(errno));
  return Status::OK();
}

}  // namespace

Status WriteNpz(const std::string& path,
                const std::vector<ExportTensor>& tensors,
                const TensorFiller& fill) {
  CKPTDB_RETURN_IF_ERROR(CheckNpzNames(tensors));
  // libzip removes an archive without entries instead of writing one: an
  // empty archive is its end record alone, as numpy's savez() writes it.
  if (tensors.empty()) return WriteEmptyZip(path);
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  if (!archive) {
    zip_error_t e;
    zip_error_init_with_code(&e, error);
    Status s =
        Status::IOError("creating " + path + ": " + zip_error_strerror(&e));
    zip_error_fini(&e);
    return s;
  }
  std::vector<std::unique_ptr<NpySource>> sources;
  auto fail = [&](const std::string& what) {
    Status s =
        Status::IOError(what + " " + path + ": " + zip_strerror(archive));
    zip_discard(archive);
    return s;
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    sources.push_back(std::make_unique<NpySource>(NpySource{
        &tensors[i], i, &fill, NpyHeader(tensors[i].dtype, tensors[i].shape)}));
    zip_error_init(&sources.back()->error);
    zip_source_t* src =
        zip_source_function(archive, NpyCallback, sources.back().get());
    if (!src) return fail("adding to");
    const zip_int64_t entry = zip_file_add(
        archive, (tensors[i].name + ".npy").c_str(), src, ZIP_FL_ENC_UTF_8);
    if (entry < 0) {
      zip_source_free(src);
      return fail("adding to");
    }
    zip_set_file_compression(archive, static_cast<zip_uint64_t>(entry),
                             ZIP_CM_STORE, 0);
    // Extracted as a file readable by all, writable by its owner (libzip's
    // default, 0666, makes it writable by all whatever the umask).
    zip_file_set_external_attributes(archive, static_cast<zip_uint64_t>(entry),
                                     0, ZIP_OPSYS_UNIX, (0100644u) << 16);
  }
  if (zip_close(archive) != 0) {
    for (const auto& s : sources) {
      if (!s->status.ok()) {
        zip_discard(archive);
        return s->status;
      }
    }
    return fail("writing");
  }
  return Status::OK();
}

}  // namespace ckptdb::tools
