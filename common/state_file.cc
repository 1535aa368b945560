#include "common/state_file.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'T', 'A', 'T', 'E', '\0'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 4;

void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

// ErrorStatus maps `error` (an errno value) to its Abseil code, naming `what` and `path`.
absl::Status ErrorStatus(int error, absl::string_view what, const std::filesystem::path& path) {
  return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path.string()));
}

}  // namespace

uint32_t Crc32(absl::string_view data) {
  return crc32_gzip_refl(0, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

absl::Status WriteStateFileAt(int dir_fd, const std::string& name, const std::string& path,
                              StateKind kind, absl::string_view payload) {
  std::string header(kMagic, sizeof(kMagic));
  PutLE(&header, kStateFileVersion, 4);
  PutLE(&header, static_cast<uint32_t>(kind), 4);
  PutLE(&header, payload.size(), 8);
  PutLE(&header, Crc32(payload), 4);
  static std::atomic<uint64_t> counter{0};
  const std::string suffix = absl::StrCat(".tmp.", getpid(), ".", counter++);
  const std::string temp = name + suffix;
  const std::string temp_path = path + suffix;
  // O_EXCL: the temporary is a new file, never an existing one or a link's target. One left
  // behind by a crashed process of the same id is removed first.
  constexpr int kCreate = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  int fd = openat(dir_fd, temp.c_str(), kCreate, 0644);
  if (fd < 0 && errno == EEXIST && unlinkat(dir_fd, temp.c_str(), 0) == 0) {
    fd = openat(dir_fd, temp.c_str(), kCreate, 0644);
  }
  if (fd < 0) return ErrorStatus(errno, "cannot create", temp_path);
  // Written with write(2), not a stream: the data must reach the disk (fsync) before the
  // rename makes it the state file.
  absl::Status written;
  for (absl::string_view part : {absl::string_view(header), payload}) {
    while (written.ok() && !part.empty()) {
      const ssize_t n = write(fd, part.data(), part.size());
      if (n >= 0) {
        part.remove_prefix(static_cast<size_t>(n));
      } else if (errno != EINTR) {
        written = ErrorStatus(errno, "cannot write", temp_path);
      }
    }
  }
  if (written.ok() && fsync(fd) != 0) written = ErrorStatus(errno, "cannot fsync", temp_path);
  close(fd);
  if (written.ok() && renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0) {
    written = ErrorStatus(errno, "cannot rename into", path);
  }
  if (!written.ok()) {
    unlinkat(dir_fd, temp.c_str(), 0);
    return written;
  }
  // The rename itself reaches the disk with an fsync of the directory.
  fsync(dir_fd);
  return absl::OkStatus();
}

absl::Status WriteStateFile(const std::string& path, StateKind kind, absl::string_view payload) {
  const std::filesystem::path target(path);
  const std::filesystem::path parent = target.parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrorStatus(errno, "cannot open the directory of", target);
  absl::Status status = WriteStateFileAt(dir_fd, target.filename().string(), path, kind, payload);
  close(dir_fd);
  return status;
}

absl::StatusOr<std::string> ReadStateFile(const std::string& path, StateKind kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open state file ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return ParseStateFile(buffer.str(), path, kind);
}

absl::StatusOr<std::string> ParseStateFile(absl::string_view bytes, const std::string& path,
                                           StateKind kind) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    if (bytes.size() < kHeaderBytes && bytes.size() >= 1 &&
        std::memcmp(bytes.data(), kMagic, std::min(bytes.size(), sizeof(kMagic))) == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": truncated header (", bytes.size(), " bytes)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a KVStore state file"));
  }
  const uint32_t version = static_cast<uint32_t>(GetLE(bytes.data() + 8, 4));
  const uint32_t got_kind = static_cast<uint32_t>(GetLE(bytes.data() + 12, 4));
  const uint64_t length = GetLE(bytes.data() + 16, 8);
  const uint32_t crc = static_cast<uint32_t>(GetLE(bytes.data() + 24, 4));
  if (version != kStateFileVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": format version ", version, ", this build reads version ", kStateFileVersion));
  }
  if (got_kind != static_cast<uint32_t>(kind)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds state of kind ", got_kind, ", expected ", static_cast<uint32_t>(kind),
        kind == StateKind::kShardCheckpoint ? " (a server checkpoint)" : " (optimizer states)"));
  }
  if (bytes.size() - kHeaderBytes != length) {
    return absl::DataLossError(absl::StrCat(path, ": truncated or padded: the header promises ",
                                            length, " payload bytes, the file holds ",
                                            bytes.size() - kHeaderBytes));
  }
  std::string payload(bytes.substr(kHeaderBytes));
  if (Crc32(payload) != crc) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (the file is corrupted)"));
  }
  return payload;
}

}  // namespace kvstore
