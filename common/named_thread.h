// NamedThread: a std::thread that names itself first, so that profiles (`perf report --sort
// comm`) and scheduler traces (`perf sched timehist`) tell the project's threads apart.
#ifndef KVSTORE_COMMON_NAMED_THREAD_H_
#define KVSTORE_COMMON_NAMED_THREAD_H_

#include <pthread.h>

#include <thread>
#include <utility>

namespace kvstore {

// NamedThread starts `body` on a new thread named `name`: a literal of at most 15 characters
// (Linux refuses a longer name, and the thread keeps its parent's).
template <typename Body>
std::thread NamedThread(const char* name, Body body) {
  return std::thread([name, body = std::move(body)]() mutable {
    pthread_setname_np(pthread_self(), name);
    body();
  });
}

}  // namespace kvstore

#endif  // KVSTORE_COMMON_NAMED_THREAD_H_
