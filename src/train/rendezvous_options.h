// How the ranks of a job find each other (free of LibTorch: the trainer's
// options hold it, and the launcher fills those).
#ifndef HETERODL_SRC_TRAIN_RENDEZVOUS_OPTIONS_H_
#define HETERODL_SRC_TRAIN_RENDEZVOUS_OPTIONS_H_

#include <string>

#include "absl/time/time.h"

namespace heterodl {

// Rank 0 hosts a c10d TCPStore at master_addr:master_port; every rank joins
// it within `timeout`.
struct RendezvousOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string local_hostname;  // empty: this host's name
  absl::Duration timeout = absl::Seconds(60);
  // NCCL (the ncclUniqueId travels through the TCPStore) for tensors on
  // CUDA devices; Gloo otherwise.
  bool use_nccl = false;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_RENDEZVOUS_OPTIONS_H_
