#include "client/completion_thread.h"

#include "client/kvstore.h"
#include "common/named_thread.h"

namespace kvstore {

std::shared_ptr<CompletionThread> CompletionThread::Start() {
  std::shared_ptr<CompletionThread> started(new CompletionThread());
  started->thread_ = NamedThread("kv-completion", [cq = &started->cq_] {
    void* tag;
    bool ok;
    while (cq->Next(&tag, &ok)) static_cast<Completion*>(tag)->Complete(ok);
  });
  return started;
}

CompletionThread::~CompletionThread() {
  cq_.Shutdown();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<CompletionThread> NewCompletionThread() { return CompletionThread::Start(); }

}  // namespace kvstore
