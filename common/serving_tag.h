// ServingTag: what a daemon's own serving loop finds behind each tag of its gRPC completion
// queues (gRPC's async API). Every call object that a daemon asks for on such a queue derives
// from it and passes `static_cast<ServingTag*>(this)` (or a member's address) as its tag, so
// that calls of several services (the kvserver's methods, the health service) share one
// queue and one thread.
#ifndef KVSTORE_COMMON_SERVING_TAG_H_
#define KVSTORE_COMMON_SERVING_TAG_H_

namespace kvstore {

class ServingTag {
 public:
  // What an event was, for the loop's choice to poll or sleep next (KVServerService::Serve):
  // kSmallEnded a call has been answered with under 64 KB, kEnded another call has
  // ended, kOther anything else.
  enum class Event { kOther, kSmallEnded, kEnded };

  // Proceed runs for each event of the tag, on the serving thread, with the event's `ok`. It
  // may delete the object.
  virtual Event Proceed(bool ok) = 0;

 protected:
  ~ServingTag() = default;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_SERVING_TAG_H_
