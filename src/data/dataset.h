// Dataset: an ordered list of samples (index, source, label) with a
// fingerprint that client and server compare.
//
//   ASSIGN_OR_RETURN(Dataset dataset, Dataset::Open("/data/train"));
//   ASSIGN_OR_RETURN(std::string bytes, dataset.ReadSample(17));
//
// Formats:
//   - image folder: ROOT/CLASS/FILE with image extensions; classes sorted by
//     name get labels 0..C-1, files sorted within a class (ImageNet layout);
//   - file list: a text file of `path<TAB>label` lines, paths relative to the
//     list's folder unless absolute; or, for segmentation, `image<TAB>mask`
//     lines (a path where a label would be; every line one or the other);
//   - segmentation folder: ROOT/images/NAME.* and ROOT/masks/NAME.png (the
//     same stem), and no other folder in ROOT;
//   - COCO instances JSON (`annotations.json`, by its extension): detection
//     samples, one per image (src/data/coco_instances.h), images under
//     DatasetLimits::image_root;
//   - WebDataset tar shards: a .tar file, or a folder of them (sorted by
//     name), holding KEY.jpg (or .jpeg/.png/.webp/.bmp) and KEY.cls (the
//     label as text) per sample, or KEY.mask.png (segmentation). Shards are indexed once with
//     libarchive and samples read at their offsets, so the epoch plan's random order costs one read
//     per sample. Shards must be uncompressed tar;
//   - TFRecord files of tf.train.Example records: a file, or a folder of
//     them (sorted by name), known by their content (TensorFlow names them
//     "train-00000-of-01024"): the image, label and mask under the keys
//     DatasetLimits::tfrecord names (TensorFlow's ImageNet layout by
//     default). Indexed once, each record read at its offset, its checksum
//     checked.
// Each form can be in object storage instead: s3://BUCKET/KEY names an
// object (a .tar shard, a TFRecord file, a COCO .json, a file list whose
// paths are keys relative to its folder) or a prefix taken as a folder (listed once, every
// page). The same files on disk and in a bucket make the same samples, in
// the same order, with the same fingerprint.
// Sample order is a pure function of the files present, so every data server
// that sees the same files computes the same dataset and fingerprint.
//
// Class names: an image folder's folder names; a file list's or tar shards'
// labels 0..max as numbers; a COCO file's categories by id (class_names[id]
// is category id's name, as torchvision's detection models number classes:
// ids no category has, 0 among them, are "__background__" at 0 and "N/A"
// elsewhere). A segmentation dataset's come from a `classes.txt` beside it
// (in its folder, or the list's or shards' folder: one name per line, line i
// naming mask id i), or else from its masks: ids 0..the largest id a spread
// of kMasksForClasses masks holds (the ignore index aside), named by number.
#ifndef HETERODL_SRC_DATA_DATASET_H_
#define HETERODL_SRC_DATA_DATASET_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "augment/boxes.h"
#include "src/common/net/unique_fd.h"
#include "src/common/read_file.h"
#include "src/data/sample_fetcher.h"
#include "src/data/shard_chunks.h"
#include "src/data/tfrecord.h"
#include "src/storage/object_url.h"
#include "src/storage/s3_client.h"

namespace heterodl {

struct Sample {
  std::string path;  // relative to Dataset::root(); "SHARD.tar:MEMBER" in tar shards
  int64_t label = 0;
  // Segmentation datasets: the mask's path, as `path` names the image;
  // empty in every other.
  std::string mask_path;
  // In tar shards: which shard, and where the member's bytes lie in it
  // (the image's, and the mask's when there is one).
  int shard = -1;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t mask_offset = 0;
  uint64_t mask_size = 0;
  // Detection datasets (every sample, even one without objects): its
  // objects' boxes, xyxy in the image's pixels, their category ids and
  // whether each is a crowd region.
  bool detection = false;
  std::vector<Box> boxes;
  std::vector<int64_t> box_labels;
  std::vector<uint8_t> crowd;
};

class TarShards;      // open shard files of a tar-shard dataset
class TfRecordFiles;  // open files of a TFRecord dataset
class SampleCache;    // object storage's samples kept on local disk

// The largest label a file list or a tar shard may give (class counts are
// derived from it: a label is a promise of that many classes).
inline constexpr int64_t kMaxLabel = (int64_t{1} << 20) - 1;

// What a data server reads for one sample, whatever the dataset names.
struct DatasetLimits {
  // A sample file (or tar member) larger than this is a bad sample, refused
  // before it is read (serve --max-file-mb).
  uint64_t max_file_bytes = uint64_t{256} << 20;
  // Non-empty: every sample file must lie beneath this directory (serve
  // --dataset-root). A file list naming a path outside it ("../", an
  // absolute path elsewhere) is refused at start; a symlink leading out is
  // a bad sample, refused as it is opened (openat2, RESOLVE_BENEATH).
  std::string root;
  // A COCO annotations file's images: file names are relative to this
  // folder (serve --image-root); empty: the file's own folder.
  std::string image_root;
  // A segmentation dataset's mask value that marks pixels no class owns
  // (serve --ignore-index): not a class when classes are read from masks.
  int mask_ignore_index = 255;
  // How a dataset named by an s3:// URL is read (its endpoint, region,
  // credentials, retries); nullopt: as the environment says
  // (S3OptionsFromEnvironment).
  std::optional<S3Options> s3;
  // Which features of a TFRecord dataset's records make a sample.
  TfExampleKeys tfrecord;
  // Index tar shards and TFRecord files even where an index of them is
  // saved (`heterodl dataset index`, which writes a new one).
  bool ignore_saved_index = false;
  // Non-empty: samples read from object storage are kept in this folder
  // (SampleCache), up to `cache_bytes` (serve --cache-dir, --cache-mb).
  std::string cache_dir;
  uint64_t cache_bytes = uint64_t{10} << 30;
  // Tar shards and TFRecord files in object storage, read for a
  // block-shuffled plan: the chunks they are read in (one range GET each)
  // and the memory that holds them (ShardChunks; serve --read-chunk-mb,
  // --chunk-memory-mb).
  uint64_t read_chunk_bytes = uint64_t{8} << 20;
  uint64_t chunk_memory_bytes = uint64_t{2} << 30;
};

// A file list (or COCO file, or classes.txt) is read whole at start: 4 GiB
// is some 50 million lines.
inline constexpr uint64_t kMaxListBytes = uint64_t{4} << 30;

// Masks Dataset::Open reads for a segmentation dataset's classes when no
// classes.txt names them.
inline constexpr size_t kMasksForClasses = 64;

class Dataset {
 public:
  // Opens an image folder (a directory) or a file list (a regular file).
  // Errors name the path and the problem: missing, empty, no classes, a
  // malformed list line (with its line number), a label over kMaxLabel, a
  // list or shard that is not a regular file.
  static absl::StatusOr<Dataset> Open(const std::string& path, const DatasetLimits& limits = {});

  // `num_samples` samples with no files behind them, for measuring the wire
  // without decoding (`heterodl serve --synthetic N`): every pixel is
  // BatchAssembler::kSyntheticPixel.
  static Dataset Synthetic(size_t num_samples, int num_classes);
  bool synthetic() const { return synthetic_; }

  size_t size() const { return samples_.size(); }
  const Sample& sample(size_t index) const { return samples_[index]; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  uint64_t fingerprint() const { return fingerprint_; }
  // The path given to Open().
  const std::string& source() const { return source_; }
  // What relative sample paths are relative to: the folder, the list's or
  // the annotations file's folder, or the image root.
  const std::string& root() const { return root_; }
  // Whether samples have segmentation masks (Sample::mask_path).
  bool has_masks() const { return has_masks_; }
  // Whether samples are detection samples (Sample::boxes).
  bool has_boxes() const { return has_boxes_; }
  // Tar shards and TFRecord files: the samples of each shard (file), in
  // order; empty for every other form. What a block-shuffled plan permutes.
  const std::vector<uint64_t>& shard_sizes() const { return shard_sizes_; }

  // The samples of a file list whose files do not exist (an image folder
  // and tar shards list only what exists): how many, and the first `keep`
  // paths as the list names them. One stat per sample.
  struct MissingFiles {
    size_t count = 0;
    std::vector<std::string> first;
  };
  MissingFiles FindMissingFiles(size_t keep = 5) const;

  // Reads sample `index`'s encoded bytes. NotFound / Unavailable with the
  // file's path when it cannot be read; FAILED_PRECONDITION when it is not
  // a regular file (a FIFO, a device: never opened in a way that can block)
  // or is over limits.max_file_bytes; OutOfRange for a bad index.
  // With reads ahead enabled, a sample asked for by Prefetch comes from
  // those reads.
  absl::StatusOr<std::string> ReadSample(size_t index) const;
  // The same for sample `index`'s mask. FAILED_PRECONDITION when the
  // dataset has none.
  absl::StatusOr<std::string> ReadMask(size_t index) const;

  // Whether samples are read from object storage, where each read waits a
  // round trip.
  bool in_object_storage() const { return s3_ != nullptr; }
  // Reads samples on `threads` threads of their own ahead of ReadSample,
  // holding at most `max_bytes` of them (SampleFetcher). Once, on the
  // dataset where it will stay: a moved dataset reads as if never enabled.
  void EnableReadAhead(int threads, uint64_t max_bytes);
  bool reads_ahead() const { return read_ahead_ != nullptr && read_ahead_owner_ == this; }
  // Starts reading `indices` ahead (nothing unless enabled). `whole_chunks`
  // (a block-shuffled plan's batches, whose neighbours in their shards are
  // in batches soon after): shards in object storage are read in whole
  // chunks, held in memory for the samples that follow (chunks()).
  void Prefetch(absl::Span<const int64_t> indices, bool whole_chunks = false) const;
  // The reads ahead's counts (zero unless enabled).
  SampleFetcher::Counts read_ahead_counts() const;
  // Tar shards and TFRecord files: their index as saved beside them
  // (shard_index.h), and where it goes (a path, or an s3:// URL);
  // FAILED_PRECONDITION for other datasets, which have no index.
  absl::StatusOr<std::string> SerializeIndex() const;
  const std::string& index_location() const { return index_location_; }

  // The local cache of its samples (--cache-dir), or null.
  const SampleCache* cache() const { return cache_.get(); }
  // Shards in object storage: the chunks read for block-shuffled plans; null
  // for other datasets.
  const ShardChunks* chunks() const { return chunks_.get(); }

 private:
  Dataset(std::string source, std::string root, std::vector<Sample> samples,
          std::vector<std::string> class_names);

  // Open() but for a segmentation dataset's class names: the dataset, its
  // reads confined to limits.root.
  static absl::StatusOr<Dataset> OpenConfined(const std::string& path, const DatasetLimits& limits);
  static absl::StatusOr<Dataset> OpenAnyFormat(const std::string& path,
                                               const DatasetLimits& limits);
  static absl::StatusOr<Dataset> OpenImageFolder(const std::string& root);
  static absl::StatusOr<Dataset> OpenSegmentationFolder(const std::string& root);
  static absl::StatusOr<Dataset> OpenFileList(const std::string& list_path);
  // A file list's samples and class names from its `contents`; errors name
  // `list_name`.
  static absl::StatusOr<Dataset> FromFileList(const std::string& list_name, std::string root,
                                              const std::string& contents);
  // Any format, in object storage (object_dataset.cc).
  static absl::StatusOr<Dataset> OpenObjects(const std::string& url, const DatasetLimits& limits);
  static absl::StatusOr<Dataset> OpenCoco(const std::string& json_path,
                                          const std::string& image_root);
  // Local shards or records; `index_path`: where their index is saved.
  static absl::StatusOr<Dataset> OpenTarShards(const std::string& path,
                                               std::vector<std::string> shard_paths,
                                               const std::string& index_path,
                                               const DatasetLimits& limits);
  static absl::StatusOr<Dataset> OpenTfRecords(const std::string& path,
                                               std::vector<std::string> file_paths,
                                               const std::string& index_path,
                                               const DatasetLimits& limits);
  // The samples `records` index; `path` names the dataset in messages.
  // `index`: the bytes of a saved index of them, used when it matches.
  static absl::StatusOr<Dataset> FromTfRecords(const std::string& path, std::string root,
                                               std::shared_ptr<const TfRecordFiles> records,
                                               const std::optional<std::string>& index);
  // The samples `shards` index; `path` names the dataset in messages.
  static absl::StatusOr<Dataset> FromTarShards(const std::string& path, std::string root,
                                               std::shared_ptr<const TarShards> shards,
                                               const std::optional<std::string>& index);
  // A segmentation dataset's class names (see the file's comment), read
  // from classes.txt beside `path` or from its masks.
  absl::StatusOr<std::vector<std::string>> MaskClassNames(const std::string& path) const;

  // The fingerprint of the samples and class names.
  uint64_t ComputeFingerprint() const;

  std::string source_;
  std::string root_;
  std::vector<Sample> samples_;
  std::vector<std::string> class_names_;
  uint64_t fingerprint_ = 0;
  bool synthetic_ = false;
  bool has_masks_ = false;
  bool has_boxes_ = false;
  std::vector<uint64_t> shard_sizes_;
  // `path` (a sample's, as the dataset names it) relative to limits_.root;
  // PERMISSION_DENIED when it lies outside.
  absl::StatusOr<std::string> PathBeneathRoot(const std::string& path) const;
  // ReadSample without the reads ahead: from the cache, else from storage
  // (and into the cache); `whole_chunks` as Prefetch says.
  absl::StatusOr<std::string> ReadSampleNow(size_t index, bool whole_chunks = false) const;
  absl::StatusOr<std::string> ReadSampleFromStorage(size_t index) const;
  absl::StatusOr<std::string> ReadMaskFromStorage(size_t index) const;
  // The cache's entry `name`, else what `read` gives (then kept there).
  absl::StatusOr<std::string> Cached(
      const std::string& name, const std::function<absl::StatusOr<std::string>()>& read) const;
  // Reads the file `path` names (relative to root_ unless absolute), within
  // the limits.
  absl::StatusOr<std::string> ReadFile(const std::string& path) const;
  // The object at `path` below object_root_ (object_dataset.cc).
  absl::StatusOr<std::string> ReadObject(const std::string& path) const;
  // A tar member of `size` bytes named `name`: FAILED_PRECONDITION over
  // limits_.max_file_bytes.
  absl::Status MemberWithinLimit(const std::string& name, uint64_t size) const;

  DatasetLimits limits_;
  std::filesystem::path confined_to_;             // limits_.root, absolute
  std::filesystem::path absolute_root_;           // root_, absolute (with a confining root)
  std::shared_ptr<const UniqueFd> root_dir_;      // open on it (O_PATH)
  std::shared_ptr<const TarShards> shards_;       // null unless tar shards
  std::shared_ptr<const TfRecordFiles> records_;  // null unless TFRecord files
  // Where the shards' or records' index is saved (empty for other forms).
  std::string index_location_;
  // In object storage: the client, and the URL that relative sample paths
  // are below (root_ as a URL).
  std::shared_ptr<S3Client> s3_;
  ObjectUrl object_root_;
  // Reads ahead (EnableReadAhead), for the dataset at `read_ahead_owner_`
  // only: its reads call back into that object.
  std::shared_ptr<SampleFetcher> read_ahead_;
  const Dataset* read_ahead_owner_ = nullptr;
  // Object storage's samples on local disk (--cache-dir); null without.
  std::shared_ptr<SampleCache> cache_;
  // The chunks of shards in object storage (held by their files too).
  std::shared_ptr<ShardChunks> chunks_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_DATASET_H_
