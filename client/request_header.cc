#include "client/request_header.h"

#include "common/proto_convert.h"

namespace kvstore {

void FillHeader(const Key& key, DType dtype, const Shape& shape, const Slice& slice,
                proto::TensorHeader* header) {
  KeyToProto(key, header->mutable_key());
  header->set_dtype(DTypeToProto(dtype));
  for (int64_t d : shape) header->add_shape(d);
  header->set_element_offset(slice.offset);
  header->set_element_count(slice.count);
}

}  // namespace kvstore
