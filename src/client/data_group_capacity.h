// DataGroupCapacity: how fast a data group can build batches, as its servers'
// statistics give it (server_status.h measures it; DataGroupWatch keeps it
// current for the trainer). Its own header, free of protobuf, because the
// trainer's LibTorch translation units include it and torch's include path
// carries protobuf headers of its own.
#ifndef HETERODL_SRC_CLIENT_DATA_GROUP_CAPACITY_H_
#define HETERODL_SRC_CLIENT_DATA_GROUP_CAPACITY_H_

namespace heterodl {

struct DataGroupCapacity {
  double per_host = 0;  // mean images/s of the hosts counted, every thread busy
  int hosts = 0;        // servers that have built something (0: nothing known)
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_DATA_GROUP_CAPACITY_H_
