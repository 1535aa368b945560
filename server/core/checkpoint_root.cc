#include "server/core/checkpoint_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

// Directories below the root are opened for reading (a written file's directory is fsynced),
// never through a link.
constexpr int kOpenDirectory = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Quoted returns `text` in double quotes with unprintable bytes escaped.
std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

std::string Join(const std::string& parent, absl::string_view name) {
  return absl::StrCat(parent, parent == "/" ? "" : "/", name);
}

// LinkRefused refuses the symbolic link `link`, met resolving `what`.
absl::Status LinkRefused(absl::string_view what, const std::string& link, const std::string& root) {
  return absl::PermissionDeniedError(absl::StrCat(
      what, ": ", link,
      " is a symbolic link; checkpoints follow no link below the checkpoint root ", root));
}

// Components returns DIR's components, refusing DIR as the file comment of the header says.
absl::StatusOr<std::vector<std::string>> Components(absl::string_view dir,
                                                    const std::string& root) {
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint directory ", Quoted(dir), " ", why,
                                                   " the checkpoint root ", root));
  };
  if (dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint directory is empty: name one relative to the checkpoint root ", root));
  }
  if (dir.find('\0') != absl::string_view::npos) return refuse("holds a NUL byte; name one in");
  // An absolute DIR is taken as written below the root's canonical path; the rest is checked as
  // a relative DIR would be (errors still quote DIR as given).
  absl::string_view relative = dir;
  if (relative.front() == '/' && root != "/" &&
      !(absl::ConsumePrefix(&relative, root) && (relative.empty() || relative.front() == '/'))) {
    return refuse("is absolute and not below: name a directory relative to, or below,");
  }
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(relative, '/')) {
    if (part == "..") return refuse("has a \"..\" component: name a directory below");
    if (!part.empty() && part != ".") parts.emplace_back(part);
  }
  return parts;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CheckpointRoot>> CheckpointRoot::Open(
    const std::string& root) {
  std::error_code error;
  std::filesystem::path given(root);
  if (root.empty()) {
    given = std::filesystem::current_path(error);
    if (error) return absl::ErrnoToStatus(error.value(), "cannot read the working directory");
  }
  const std::string named = absl::StrCat("the checkpoint root ", Quoted(given.string()));
  std::filesystem::create_directories(given, error);
  if (error) return absl::ErrnoToStatus(error.value(), absl::StrCat("cannot create ", named));
  const std::filesystem::path canonical = std::filesystem::canonical(given, error);
  if (error) return absl::ErrnoToStatus(error.value(), absl::StrCat("cannot resolve ", named));
  // O_PATH: a root this process may only search still starts; reading it is checked when a
  // checkpoint is made there.
  UniqueFd fd(open(canonical.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd.ok()) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", named));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", named));
  }
  return std::shared_ptr<const CheckpointRoot>(
      new CheckpointRoot(canonical.string(), std::move(fd), st.st_dev, st.st_ino));
}

std::string CheckpointRoot::PathOf(absl::string_view dir) const {
  if (!dir.empty() && dir.front() == '/' && path_ != "/") absl::ConsumePrefix(&dir, path_);
  std::string path = path_;
  for (absl::string_view part : absl::StrSplit(dir, '/', absl::SkipEmpty())) {
    if (part != ".") path = Join(path, part);
  }
  return path;
}

absl::StatusOr<ConfinedDirectory> CheckpointRoot::OpenDirectory(absl::string_view dir,
                                                                bool create) const {
  ASSIGN_OR_RETURN(const std::vector<std::string> parts, Components(dir, path_));
  UniqueFd current(openat(fd_.get(), ".", kOpenDirectory));
  if (!current.ok()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open the checkpoint root ", path_));
  }
  std::string path = path_;
  for (const std::string& part : parts) {
    path = Join(path, part);
    UniqueFd next(openat(current.get(), part.c_str(), kOpenDirectory));
    if (!next.ok() && errno == ENOENT && create) {
      if (mkdirat(current.get(), part.c_str(), 0777) != 0 && errno != EEXIST) {
        return absl::ErrnoToStatus(errno, absl::StrCat("cannot create checkpoint directory ", path,
                                                       " below the checkpoint root ", path_));
      }
      next = UniqueFd(openat(current.get(), part.c_str(), kOpenDirectory));
    }
    if (!next.ok()) {
      const int error = errno;
      struct stat st;
      if ((error == ELOOP || error == ENOTDIR) &&
          fstatat(current.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode)) {
          return LinkRefused(absl::StrCat("checkpoint directory ", Quoted(dir)), path, path_);
        }
        if (!S_ISDIR(st.st_mode)) {
          return absl::FailedPreconditionError(
              absl::StrCat("checkpoint directory ", Quoted(dir), ": ", path,
                           " is not a directory (checkpoint root ", path_, ")"));
        }
      }
      return absl::ErrnoToStatus(error, absl::StrCat("cannot open checkpoint directory ", path,
                                                     " below the checkpoint root ", path_));
    }
    current = std::move(next);
  }
  RETURN_IF_ERROR(CheckBeneath(current.get(), path));
  return ConfinedDirectory(this, std::move(current), std::move(path));
}

absl::Status CheckpointRoot::CheckBeneath(int fd, const std::string& path) const {
  // O_PATH: walking up needs only search permission.
  constexpr int kUp = O_PATH | O_DIRECTORY | O_CLOEXEC;
  UniqueFd current(openat(fd, ".", kUp));
  struct stat st;
  // Bounded all the same: each step goes one level up, and "/" is its own parent.
  for (int level = 0; current.ok() && fstat(current.get(), &st) == 0 && level < 100000; ++level) {
    if (st.st_dev == dev_ && st.st_ino == ino_) return absl::OkStatus();
    UniqueFd parent(openat(current.get(), "..", kUp));
    struct stat up;
    if (!parent.ok() || fstat(parent.get(), &up) != 0 ||
        (up.st_dev == st.st_dev && up.st_ino == st.st_ino)) {
      break;
    }
    current = std::move(parent);
  }
  return absl::PermissionDeniedError(
      absl::StrCat(path, " is not below the checkpoint root ", path_, " (moved out of it?)"));
}

std::string ConfinedDirectory::PathOf(absl::string_view name) const { return Join(path_, name); }

absl::Status ConfinedDirectory::CheckName(const std::string& name) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted(name), " is not a file name (in ", path_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ConfinedDirectory::WriteStateFile(const std::string& name,
                                                              StateKind kind,
                                                              absl::string_view payload) const {
  RETURN_IF_ERROR(CheckName(name));
  const std::string path = PathOf(name);
  struct stat st;
  if (fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    return LinkRefused("cannot write the state file", path, root_->path());
  }
  // Checked again just before the write: the caller may have taken long since OpenDirectory.
  RETURN_IF_ERROR(root_->CheckBeneath(fd_.get(), path_));
  RETURN_IF_ERROR(WriteStateFileAt(fd_.get(), name, path, kind, payload));
  return path;
}

absl::StatusOr<std::string> ConfinedDirectory::ReadStateFile(const std::string& name,
                                                             StateKind kind) const {
  RETURN_IF_ERROR(CheckName(name));
  const std::string path = PathOf(name);
  // O_NONBLOCK: opening a FIFO planted here must not hang the server.
  UniqueFd fd(openat(fd_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.ok()) {
    if (errno == ELOOP) return LinkRefused("cannot read the state file", path, root_->path());
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("cannot open state file ", path));
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open state file ", path));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat state file ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  std::string bytes;
  bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n > 0) {
      bytes.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot read state file ", path));
    }
  }
  return ParseStateFile(bytes, path, kind);
}

absl::Status ConfinedDirectory::CheckNotLink(const std::string& name) const {
  RETURN_IF_ERROR(CheckName(name));
  struct stat st;
  if (fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    return LinkRefused("cannot write the state file", PathOf(name), root_->path());
  }
  return absl::OkStatus();
}

absl::Status ConfinedDirectory::RenameFile(const std::string& from, const std::string& to) const {
  RETURN_IF_ERROR(CheckName(from));
  RETURN_IF_ERROR(CheckNotLink(to));
  RETURN_IF_ERROR(root_->CheckBeneath(fd_.get(), path_));
  if (renameat(fd_.get(), from.c_str(), fd_.get(), to.c_str()) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot rename ", PathOf(from), " to ", PathOf(to)));
  }
  if (fsync(fd_.get()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot sync directory ", path_));
  }
  return absl::OkStatus();
}

absl::Status ConfinedDirectory::RemoveFile(const std::string& name) const {
  RETURN_IF_ERROR(CheckName(name));
  RETURN_IF_ERROR(root_->CheckBeneath(fd_.get(), path_));
  if (unlinkat(fd_.get(), name.c_str(), 0) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot remove ", PathOf(name)));
  }
  if (fsync(fd_.get()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot sync directory ", path_));
  }
  return absl::OkStatus();
}

absl::Status ConfinedDirectory::RemoveEmptySubdirectory(const std::string& name) const {
  RETURN_IF_ERROR(CheckName(name));
  RETURN_IF_ERROR(root_->CheckBeneath(fd_.get(), path_));
  if (unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    if (errno == ENOTEMPTY || errno == EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot remove ", PathOf(name), ": it holds other files"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot remove ", PathOf(name)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ConfinedDirectory::FileNames() const {
  // fdopendir takes over the descriptor it is given: hand it a duplicate.
  const int dup_fd = fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot list ", path_));
  DIR* dir = fdopendir(dup_fd);
  if (dir == nullptr) {
    close(dup_fd);
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot list ", path_));
  }
  rewinddir(dir);
  std::vector<std::string> names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kvstore
