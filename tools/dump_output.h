#pragma once

// Where `ckpt-db-dump export` writes: never over what the output path holds
// until the export is whole.

#include <string>

#include "ckptdb/status.h"

namespace ckptdb::tools {

// Sets SIGINT, SIGTERM, SIGHUP and SIGPIPE to be noted (Interrupted)
// rather than end the process at once: an export then stops at the next
// tensor or write, removes its files and exits by the signal.
void CatchInterrupts();
// The signal noted, or 0.
int Interrupted();

// The file an export writes (`path()`), and how it reaches the output once
// whole (`Finish`):
// - an output that is a regular file with one name, or absent, through any
//   symbolic links: a new file beside the file they name, given its
//   permissions, owner and group and renamed over it, so that a failed or
//   interrupted export leaves what was there, and links stay links;
// - a regular file with other names (hard links) or extended attributes
//   (ACLs), one whose owner cannot be kept, one in a directory where no file
//   can be made or where it cannot be replaced by name (sticky): the bytes
//   are replaced in place once the export is whole, after the room for them
//   is taken (so a full disk fails before a byte changes), with the noted
//   signals held; a process killed by SIGKILL meanwhile leaves it partial;
// - an output that is a FIFO, a device or a socket, or this process's
//   standard output (`-o /dev/stdout`, whatever it is redirected to): a
//   temporary file whose bytes are then copied into it (a .npz is written by
//   seeking), into the standard output's own descriptor, where it stands,
//   for the latter;
// - a directory, an empty name, or a path in the store being exported:
//   refused (InvalidArgument), before anything is read.
// The new or temporary file is removed unless it was renamed.
class ExportOutput {
 public:
  static Result<ExportOutput> For(const std::string& output,
                                  const std::string& store);
  ExportOutput(ExportOutput&& other) noexcept;
  ExportOutput& operator=(ExportOutput&&) = delete;
  ExportOutput(const ExportOutput&) = delete;
  ~ExportOutput();

  const std::string& path() const { return written_; }
  // Whether the export goes to the standard output (say what was done on
  // the standard error instead).
  bool to_stdout() const { return to_stdout_; }
  Status Finish();

 private:
  enum class Mode { kRename, kCopy };
  ExportOutput(std::string output, std::string final_path, std::string written,
               Mode mode, bool to_stdout)
      : output_(std::move(output)),
        final_(std::move(final_path)),
        written_(std::move(written)),
        mode_(mode),
        to_stdout_(to_stdout) {}

  std::string output_;   // as given, for messages
  std::string final_;    // the file replaced or copied into
  std::string written_;  // the file written, removed unless renamed
  Mode mode_;
  bool to_stdout_ = false;
  bool renamed_ = false;
};

}  // namespace ckptdb::tools
