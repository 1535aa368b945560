// TraceWriter: a timeline of a node's operations in the Chrome trace event format (JSON Array
// Format), like BytePS's BYTEPS_TRACE_ON: open the file in chrome://tracing or
// https://ui.perfetto.dev. A worker writes one when KV_TRACE_FILE is set (its operations:
// queued, sent, answered, per key and server), a kvserver its dist_sync rounds
// (docs/operations.md, "Reading a timeline").
//
// Events are written as they complete, one line each, so a process that dies leaves a file the
// viewers still read (the format allows the closing bracket to be missing); Close writes it.
// After kMaxEvents events, later ones are counted and dropped, and Close says how many.
//
// Threading: thread-safe (a lock per event: tracing is for diagnosis, off by default).
#ifndef KVSTORE_COMMON_TRACE_WRITER_H_
#define KVSTORE_COMMON_TRACE_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvstore {

class TraceWriter {
 public:
  static constexpr int64_t kMaxEvents = 2000000;
  using Args = std::vector<std::pair<std::string, std::string>>;

  // Open creates (truncates) `path` and names the process `process_name` in the viewer.
  // Unavailable naming the file when it cannot be created.
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Open(const std::string& path,
                                                           const std::string& process_name);
  ~TraceWriter();  // Closes.
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Complete records an event `name` of category `category` on row `row` (a "thread" in the
  // viewer) from `start` to `end`, with `args` shown when it is selected.
  void Complete(const std::string& name, const char* category, int row, absl::Time start,
                absl::Time end, const Args& args = {});
  // NameRow names row `row` in the viewer ("operations", "server 1").
  void NameRow(int row, const std::string& name);
  // Close writes the closing bracket and closes the file; later events are dropped. Returns
  // the write error, naming the file, if any.
  absl::Status Close();

  const std::string& path() const { return path_; }

 private:
  TraceWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  void Write(const std::string& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const int pid_ = 1;
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  int64_t events_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_TRACE_WRITER_H_
