// kvserver: serves one shard of the keys of a job.
//
//   kvserver --scheduler=10.0.0.1:9091 --port=0 [--updater=NAME] [--checkpoint_root=ROOT]
//            [--restore=DIR]
//
// See server/kvserver_lib.h for the flags, and for building a kvserver with your own updaters.
#include "server/kvserver_lib.h"

int main(int argc, char** argv) { return kvstore::KVServerMain(argc, argv); }
