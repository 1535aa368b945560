#include "common/trace_writer.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvstore {
namespace {

std::string Quoted(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
  return out;
}

int64_t Micros(absl::Time t) { return absl::ToUnixMicros(t); }

}  // namespace

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path,
                                                               const std::string& process_name) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the trace file ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<TraceWriter> writer(new TraceWriter(path, file));
  absl::MutexLock lock(&writer->mu_);
  std::fputs("[\n", file);
  writer->Write(absl::StrCat(R"({"name":"process_name","ph":"M","pid":)", writer->pid_,
                             R"(,"tid":0,"args":{"name":)", Quoted(process_name), "}}"));
  return writer;
}

TraceWriter::~TraceWriter() { Close().IgnoreError(); }

void TraceWriter::Write(const std::string& event) {
  if (file_ == nullptr) return;
  if (events_ >= kMaxEvents) {
    ++dropped_;
    return;
  }
  if (events_ > 0) std::fputs(",\n", file_);
  std::fputs(event.c_str(), file_);
  ++events_;
}

void TraceWriter::Complete(const std::string& name, const char* category, int row, absl::Time start,
                           absl::Time end, const Args& args) {
  std::string event =
      absl::StrCat(R"({"name":)", Quoted(name), R"(,"cat":")", category, R"(","ph":"X","pid":)",
                   pid_, R"(,"tid":)", row, R"(,"ts":)", Micros(start), R"(,"dur":)",
                   std::max<int64_t>(0, Micros(end) - Micros(start)));
  if (!args.empty()) {
    event += R"(,"args":{)";
    for (size_t i = 0; i < args.size(); ++i) {
      absl::StrAppend(&event, i > 0 ? "," : "", Quoted(args[i].first), ":", Quoted(args[i].second));
    }
    event += "}";
  }
  event += "}";
  absl::MutexLock lock(&mu_);
  Write(event);
}

void TraceWriter::NameRow(int row, const std::string& name) {
  const std::string event =
      absl::StrCat(R"({"name":"thread_name","ph":"M","pid":)", pid_, R"(,"tid":)", row,
                   R"(,"args":{"name":)", Quoted(name), "}}");
  absl::MutexLock lock(&mu_);
  Write(event);
}

absl::Status TraceWriter::Close() {
  absl::MutexLock lock(&mu_);
  if (file_ == nullptr) return absl::OkStatus();
  std::fputs("\n]\n", file_);
  const bool failed = std::ferror(file_) != 0;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (failed || !closed) {
    return absl::DataLossError(absl::StrCat("writing the trace file ", path_, " failed"));
  }
  if (dropped_ > 0) {
    return absl::ResourceExhaustedError(absl::StrCat("the trace file ", path_, " holds the first ",
                                                     kMaxEvents, " events; ", dropped_,
                                                     " later ones were dropped"));
  }
  return absl::OkStatus();
}

}  // namespace kvstore
