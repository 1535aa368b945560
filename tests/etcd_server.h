// EtcdServer: a real etcd (Debian's etcd-server, /usr/bin/etcd) for the tests, on 127.0.0.1
// with ports the OS just chose, its data in a fresh folder below TempDir(). Start returns once
// it answers on its client port (or REQUIREs naming its log); the destructor kills it.
#ifndef KVSTORE_TESTS_ETCD_SERVER_H_
#define KVSTORE_TESTS_ETCD_SERVER_H_

#include <memory>
#include <string>

#include "tests/process.h"

namespace kvstore::testing {

class EtcdServer {
 public:
  // kBinary is where Debian's etcd-server installs etcd (deploy/install-deps.sh).
  static constexpr char kBinary[] = "/usr/bin/etcd";
  static std::unique_ptr<EtcdServer> Start();
  ~EtcdServer();

  // endpoint is the client address, "127.0.0.1:PORT".
  const std::string& endpoint() const { return endpoint_; }
  Process& process() { return *process_; }

 private:
  std::string endpoint_;
  std::unique_ptr<Process> process_;
};

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_ETCD_SERVER_H_
