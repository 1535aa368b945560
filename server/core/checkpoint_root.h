// CheckpointRoot: the one directory under which a server writes its checkpoints and from which
// it restores them (`kvserver --checkpoint_root`, by default the working directory at start).
//
// A client names a checkpoint directory DIR relative to the root (`kvctl checkpoint DIR`,
// KVStore::Checkpoint(dir), controller command 4; `kvserver --restore DIR` alike), or as an
// absolute path that begins with the root's canonical path (what operators and MXNet scripts
// write). OpenDirectory resolves DIR without ever leaving the root:
// - DIR is checked as text first: an empty DIR, an absolute one that does not begin with the
//   root's canonical path (component by component), one with a ".." component or a NUL byte is
//   InvalidArgument ("." and empty components are skipped); an absolute DIR's components after
//   the root's are then treated as a relative DIR's;
// - each component is then opened relative to the descriptor of the directory before it, with
//   O_NOFOLLOW: a symbolic link anywhere below the root - even one pointing back inside - is
//   PermissionDenied, a file where a directory is expected is FailedPrecondition, a missing
//   directory is created (mkdirat, one component at a time) when asked and NotFound otherwise;
// - the directory reached must still have the root among its ancestors (device and inode
//   numbers, walking ".."), or it is PermissionDenied: one moved out of the root while DIR was
//   being resolved is refused.
// A ConfinedDirectory then reads and writes files by name in the directory it holds open,
// refusing a symbolic link in place of the file. Every error names DIR or the file, and the
// root.
//
// The root itself is resolved once, by Open (it may be a symbolic link, or relative to the
// working directory), and held open: renaming it, or pointing a link at another directory
// later, does not move where checkpoints go. What this guards against, and what it does not
// (mounts below the root, hard links, a directory moved out between the last check and the
// write), is written in docs/security.md.
//
// Threading: a CheckpointRoot and a ConfinedDirectory do not change once made; use them from
// any thread. A ConfinedDirectory must not outlive the root that opened it.
#ifndef KVSTORE_SERVER_CORE_CHECKPOINT_ROOT_H_
#define KVSTORE_SERVER_CORE_CHECKPOINT_ROOT_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/state_file.h"
#include "common/unique_fd.h"

namespace kvstore {

class CheckpointRoot;

// ConfinedDirectory: a directory below a checkpoint root, held open.
class ConfinedDirectory {
 public:
  // path returns the directory's path: the root's canonical path, then DIR's components.
  const std::string& path() const { return path_; }
  // PathOf returns path() + "/" + name.
  std::string PathOf(absl::string_view name) const;

  // WriteStateFile writes the state file `name` (a file name, no '/') here atomically
  // (common/state_file.h) and returns its path. PermissionDenied when `name` is a symbolic link,
  // or when the directory is no longer below the root; otherwise errors as WriteStateFile's.
  absl::StatusOr<std::string> WriteStateFile(const std::string& name, StateKind kind,
                                             absl::string_view payload) const;

  // ReadStateFile returns the payload of the state file `name` here. PermissionDenied for a
  // symbolic link, FailedPrecondition for what is not a regular file, NotFound for no file;
  // otherwise errors as ReadStateFile's.
  absl::StatusOr<std::string> ReadStateFile(const std::string& name, StateKind kind) const;

  // CheckNotLink returns PermissionDenied, as WriteStateFile would, when the entry `name` here
  // is a symbolic link; OK otherwise (also when absent).
  absl::Status CheckNotLink(const std::string& name) const;
  // RenameFile renames the file `from` to `to` here (replacing `to`), then syncs the
  // directory. PermissionDenied when `to` is a symbolic link; errors name both paths.
  absl::Status RenameFile(const std::string& from, const std::string& to) const;
  // RemoveFile removes the file `name` here (nothing when it is absent), then syncs the
  // directory.
  absl::Status RemoveFile(const std::string& name) const;
  // RemoveEmptySubdirectory removes the empty directory `name` here (nothing when absent;
  // FailedPrecondition naming it when not empty).
  absl::Status RemoveEmptySubdirectory(const std::string& name) const;
  // FileNames returns the names of the entries here, sorted (no "." or "..").
  absl::StatusOr<std::vector<std::string>> FileNames() const;

 private:
  friend class CheckpointRoot;
  ConfinedDirectory(const CheckpointRoot* root, UniqueFd fd, std::string path)
      : root_(root), fd_(std::move(fd)), path_(std::move(path)) {}
  absl::Status CheckName(const std::string& name) const;

  const CheckpointRoot* root_;
  UniqueFd fd_;
  std::string path_;
};

class CheckpointRoot {
 public:
  // Open resolves `root` (empty: the working directory) to its canonical path, creating it and
  // its parents when missing, and holds it open. An error (not a directory, no permission)
  // names `root`.
  static absl::StatusOr<std::shared_ptr<const CheckpointRoot>> Open(const std::string& root);

  // path returns the root's canonical path.
  const std::string& path() const { return path_; }

  // PathOf returns where DIR lies below the root, as text: path() and DIR's components. It
  // checks nothing; OpenDirectory does.
  std::string PathOf(absl::string_view dir) const;

  // OpenDirectory resolves DIR below the root as the file comment says, creating missing
  // directories when `create`, and returns it held open. It touches nothing when DIR is
  // refused as text.
  absl::StatusOr<ConfinedDirectory> OpenDirectory(absl::string_view dir, bool create) const;

 private:
  friend class ConfinedDirectory;
  CheckpointRoot(std::string path, UniqueFd fd, dev_t dev, ino_t ino)
      : path_(std::move(path)), fd_(std::move(fd)), dev_(dev), ino_(ino) {}
  // CheckBeneath returns PermissionDenied naming `path` unless the root is among the ancestors
  // of the directory open as `fd` (or is that directory).
  absl::Status CheckBeneath(int fd, const std::string& path) const;

  std::string path_;
  UniqueFd fd_;
  dev_t dev_;
  ino_t ino_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_CHECKPOINT_ROOT_H_
