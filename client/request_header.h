// FillHeader: the protobuf header that names one slice of a key's value in a worker's request
// (proto/kvstore.proto's TensorHeader), for every transfer.
#ifndef KVSTORE_CLIENT_REQUEST_HEADER_H_
#define KVSTORE_CLIENT_REQUEST_HEADER_H_

#include "common/key.h"
#include "common/partitioner.h"
#include "common/tensor.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

// FillHeader sets the key, dtype, whole shape and element range of `slice`; payload fields
// are left to the caller.
void FillHeader(const Key& key, DType dtype, const Shape& shape, const Slice& slice,
                proto::TensorHeader* header);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_REQUEST_HEADER_H_
