// NodeTable: the nodes of a job the scheduler knows - servers and workers, each with its node
// id, role, rank, address and what the scheduler has learnt of it (NodeInfo) - and how ranks
// are given: a node that asked for a rank gets it; the others fill the free ranks of their role
// in registration order, once every node has registered (AssignRanks). A server replacing a
// dead one takes its rank under a new node id (TakeOver). Node ids start at 2 (1 is the
// scheduler) and are never reused.
//
// Threading: not thread-safe; SchedulerCore guards it with its lock.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_NODE_TABLE_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_NODE_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace kvstore {

enum class NodeRole { kServer, kWorker };

struct ServerEntry {
  int rank = 0;
  uint64_t node_id = 0;
  std::string address;
};

// ClusterView: what every node learns when the job is complete.
struct ClusterView {
  int num_servers = 0;
  int num_workers = 0;
  std::vector<ServerEntry> servers;       // In rank order.
  std::vector<uint64_t> worker_node_ids;  // In rank order.
  int64_t big_value_bound = 0;
  int64_t chunk_bytes = 0;
  // "dist_sync" or "dist_async": the first registering worker's mode.
  std::string mode;
  // Names the job (SchedulerCore::job_id): nodes present it when they register again with a
  // scheduler restarted in place.
  std::string job_id;
  absl::Duration heartbeat_interval;
  int replicas = 1;
  bool signed_payloads = false;  // SchedulerOptions::signed_payloads.
};

// TableLoad: a table a server holds, as its heartbeat reports it (proto::TableStatus).
struct TableLoad {
  std::string key;
  int64_t dim = 0, round = 0, rows = 0, counting = 0, admitted = 0, evicted = 0, bytes = 0;
};

struct NodeInfo {
  uint64_t node_id = 0;
  NodeRole role = NodeRole::kWorker;
  int rank = 0;
  std::string address;
  std::string hostname;
  absl::Time last_heartbeat;
  bool finished = false;
  // Servers: what their last heartbeat reported.
  int64_t num_keys = 0;
  int64_t num_bytes = 0;
  std::vector<TableLoad> tables;
  // Whether a heartbeat has told the node that the job is over.
  bool released = false;
  // Workers: failed (finished with an error, or died), and why.
  bool failed = false;
  std::string failure;
  // Workers of an elastic job: left the job (died, or finished as failed) while it went on;
  // `failure` says why. The worker whose loss ended the job is `failed` instead.
  bool left = false;
  // Servers: the highest round reported, and the checkpoint round restored (-1: none).
  int64_t max_round = 0;
  int64_t restored_round = -1;
  // Servers that replaced a dead one: its address and last reported round (-1: none).
  std::string replaced_address;
  int64_t replaced_round = -1;
  // Servers in a job with replicas: declared dead (DeclareServerDead), and why.
  bool dead = false;
  std::string death;
  // Servers replacing a dead one (JoinServer): being loaded with its shards, the view epoch
  // they are published at, and why the join failed ("" unless it did).
  bool joining = false;
  uint64_t join_epoch = 0;
  std::string join_failure;
};

class NodeTable {
 public:
  using Nodes = std::map<uint64_t, NodeInfo>;

  NodeTable(int num_servers, int num_workers)
      : num_servers_(num_servers), num_workers_(num_workers) {}

  // Add registers a node under the next node id, its rank unknown (-1) until AssignRanks;
  // `requested_rank` is -1 (any) or the rank it asked for.
  NodeInfo& Add(NodeRole role, int requested_rank, std::string address, std::string hostname,
                absl::Time now);
  // TakeOver replaces `old` by a new node of its role and rank at `address` (a new node id; its
  // keys, bytes and restored round reset; `replaced_address` the old one's address).
  NodeInfo& TakeOver(const NodeInfo& old, std::string address, std::string hostname,
                     absl::Time now);
  // Restore adds `node` under its own node id and rank (a running job re-formed by a scheduler
  // restarted in place); later ids are above it.
  NodeInfo& Restore(NodeInfo node);
  // TakeId issues a node id for a node added later with Restore (a server joining the running
  // job as one more: it enters the table once published).
  uint64_t TakeId() { return next_id_++; }
  // Remove forgets node `id` (a server drained from the running job).
  void Remove(uint64_t id) {
    nodes_.erase(id);
    requested_rank_.erase(id);
  }
  // Rerank gives node `id` rank `rank` (the servers above a drained one move down).
  void Rerank(uint64_t id, int rank) {
    nodes_.at(id).rank = rank;
    requested_rank_[id] = rank;
  }
  // set_num_servers: the job's servers changed (a server added or drained while it runs).
  void set_num_servers(int num_servers) { num_servers_ = num_servers; }
  // next_id: the node id the next Add or TakeOver gives.
  uint64_t next_id() const { return next_id_; }

  // Find returns the node `id`, or null.
  NodeInfo* Find(uint64_t id);
  const NodeInfo* Find(uint64_t id) const;
  // ServerOfRank returns the server of `rank`, or null.
  NodeInfo* ServerOfRank(int rank);
  const NodeInfo* ServerOfRank(int rank) const;
  // requested_rank returns the rank node `id` asked for (-1: any).
  int requested_rank(uint64_t id) const;
  // RankHolder returns the node of `role` that asked for `rank`, or null.
  const NodeInfo* RankHolder(NodeRole role, int rank) const;

  // Count returns how many nodes of `role` have registered; full: every expected node has.
  int Count(NodeRole role) const;
  bool full() const { return static_cast<int>(nodes_.size()) == num_servers_ + num_workers_; }
  bool empty() const { return nodes_.empty(); }
  // AssignRanks gives every node its rank (see the top).
  void AssignRanks();
  // Missing says who has registered and who is missing: "registered 1 of 2 servers and 2 of 2
  // workers; missing 1 server and 0 workers".
  std::string Missing() const;
  // FillView puts the servers (by rank) and the workers' node ids (by rank) into `view`.
  void FillView(ClusterView* view) const;
  // Sorted returns every node, servers by rank, then workers by rank.
  std::vector<NodeInfo> Sorted() const;

  Nodes::iterator find(uint64_t id) { return nodes_.find(id); }
  Nodes::const_iterator find(uint64_t id) const { return nodes_.find(id); }
  Nodes::iterator begin() { return nodes_.begin(); }
  Nodes::iterator end() { return nodes_.end(); }
  Nodes::const_iterator begin() const { return nodes_.begin(); }
  Nodes::const_iterator end() const { return nodes_.end(); }

 private:
  int num_servers_;
  const int num_workers_;
  uint64_t next_id_ = 2;  // 1 is the scheduler itself.
  Nodes nodes_;
  std::map<uint64_t, int> requested_rank_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_NODE_TABLE_H_
