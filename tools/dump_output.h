#pragma once

// Where `ckpt-db-dump export` writes: never over what the output path holds
// until the export is whole.

#include <string>

#include "ckptdb/status.h"

namespace ckptdb::tools {

// The file an export writes (`path()`), and how it reaches the output once
// whole (`Finish`):
// - an output that is a regular file, or absent, through any symbolic links:
//   a new file beside the file they name, renamed over it (taking its
//   permissions), so that a failed export leaves what was there, and the
//   links stay links;
// - an output that is a FIFO, a device or a socket, or this process's
//   standard output (`-o /dev/stdout`, whatever it is redirected to): a
//   temporary file whose bytes are then copied into it (a .npz is written by
//   seeking), into the standard output's own descriptor for the latter;
// - a regular file in a directory where no new file can be made: a
//   temporary file whose bytes then replace the file's;
// - a directory: refused (InvalidArgument), before anything is read.
// The new or temporary file is removed unless Finish succeeded.
class ExportOutput {
 public:
  static Result<ExportOutput> For(const std::string& output);
  ExportOutput(ExportOutput&& other) noexcept;
  ExportOutput& operator=(ExportOutput&&) = delete;
  ExportOutput(const ExportOutput&) = delete;
  ~ExportOutput();

  const std::string& path() const { return written_; }
  // The output path as given, for messages.
  const std::string& output() const { return output_; }
  // Whether the export goes to the standard output (say what was done on
  // the standard error instead).
  bool to_stdout() const { return to_stdout_; }
  Status Finish();

 private:
  ExportOutput(std::string output, std::string final_path, std::string written,
               bool stream, bool to_stdout)
      : output_(std::move(output)),
        final_(std::move(final_path)),
        written_(std::move(written)),
        stream_(stream),
        to_stdout_(to_stdout) {}

  std::string output_;
  std::string final_;    // the regular file renamed over (not stream_)
  std::string written_;  // the file written, removed unless finished
  bool stream_ = false;
  bool to_stdout_ = false;
  bool finished_ = false;
};

}  // namespace ckptdb::tools
