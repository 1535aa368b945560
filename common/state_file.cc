#include "common/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'T', 'A', 'T', 'E', '\0'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 4;

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

uint32_t Crc32(absl::string_view data) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

absl::Status WriteStateFile(const std::string& path, StateKind kind, absl::string_view payload) {
  std::string header(kMagic, sizeof(kMagic));
  PutLE(&header, kStateFileVersion, 4);
  PutLE(&header, static_cast<uint32_t>(kind), 4);
  PutLE(&header, payload.size(), 8);
  PutLE(&header, Crc32(payload), 4);
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  for (absl::string_view part : {absl::string_view(header), payload}) {
    while (!part.empty()) {
      const ssize_t n = write(fd, part.data(), part.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        const absl::Status error = ErrnoError("cannot write", temp);
        close(fd);
        unlink(temp.c_str());
        return error;
      }
      part.remove_prefix(static_cast<size_t>(n));
    }
  }
  if (fsync(fd) != 0) {
    const absl::Status error = ErrnoError("cannot fsync", temp);
    close(fd);
    unlink(temp.c_str());
    return error;
  }
  close(fd);
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const absl::Status error = ErrnoError("cannot rename into", path);
    unlink(temp.c_str());
    return error;
  }
  const std::string dir = DirectoryOf(path);
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string prefix = dir.substr(0, at);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError("cannot create directory", prefix);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadStateFile(const std::string& path, StateKind kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open state file ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    if (bytes.size() < kHeaderBytes && bytes.size() >= 1 &&
        std::memcmp(bytes.data(), kMagic, std::min(bytes.size(), sizeof(kMagic))) == 0) {
      return absl::DataLossError(absl::StrCat(path, ": truncated header (", bytes.size(),
                                              " bytes)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a KVStore state file"));
  }
  const uint32_t version = static_cast<uint32_t>(GetLE(bytes.data() + 8, 4));
  const uint32_t got_kind = static_cast<uint32_t>(GetLE(bytes.data() + 12, 4));
  const uint64_t length = GetLE(bytes.data() + 16, 8);
  const uint32_t crc = static_cast<uint32_t>(GetLE(bytes.data() + 24, 4));
  if (version != kStateFileVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": format version ", version,
                                                   ", this build reads version ",
                                                   kStateFileVersion));
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
  std::string payload = bytes.substr(kHeaderBytes);
  if (Crc32(payload) != crc) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (the file is corrupted)"));
  }
  return payload;
}

}  // namespace kvstore
