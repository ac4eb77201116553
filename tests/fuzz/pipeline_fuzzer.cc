// libFuzzer target over decoding and the augment pipeline, and over the
// pipeline spec parser. Built by the `fuzz` CMake preset (clang, ASan, UBSan)
// and run for a bounded time by tests/fuzz/run_fuzzer.sh under ctest.
//
// Input layout: first byte even -> the rest is an encoded image run through
// several pipelines; odd -> the rest is a pipeline spec to parse.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "augment/pipeline.h"

namespace {

const std::vector<heterodl::Pipeline>& Pipelines() {
  static const auto* pipelines = [] {
    auto* list = new std::vector<heterodl::Pipeline>();
    heterodl::PipelineOptions small_limit;
    small_limit.max_pixels = 4'000'000;  // keeps each input's work bounded
    for (const char* spec :
         {"random_resized_crop(64)|hflip(0.5)",
          "decode(exact)|resize(48)|center_crop(40)|color_jitter(0.4,0.4,0.4,0.1)",
          "center_crop(32)|grayscale(0.5)|gaussian_blur(3)|rotation(20)"}) {
      list->push_back(*heterodl::Pipeline::Parse(spec, small_limit));
    }
    return list;
  }();
  return *pipelines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 1) {
    (void)heterodl::Pipeline::Parse(input);
    return 0;
  }
  for (const heterodl::Pipeline& pipeline : Pipelines()) {
    std::vector<uint8_t> out(pipeline.output_bytes());
    for (uint64_t index = 0; index < 2; ++index) {
      (void)pipeline.Run(input, {1, 0, index}, out.data());
    }
  }
  return 0;
}
