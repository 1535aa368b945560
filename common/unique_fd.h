// UniqueFd: owns one POSIX file descriptor and closes it when destroyed (move-only).
//
// Threading: as an int; the descriptor itself may be used from any thread.
#ifndef KVSTORE_COMMON_UNIQUE_FD_H_
#define KVSTORE_COMMON_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace kvstore {

class UniqueFd {
 public:
  UniqueFd() = default;
  // UniqueFd takes ownership of `fd` (a negative value: none, as open's error result).
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  // ok says whether a descriptor is held; get returns it (-1 when none), still owned.
  bool ok() const { return fd_ >= 0; }
  int get() const { return fd_; }

  // Reset closes the descriptor held, if any.
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_UNIQUE_FD_H_
